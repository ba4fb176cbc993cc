// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Flow steering (ibv_create_flow, ibv_destroy_flow): a raw packet QP's
 * flows are the daemon's (create_flow). The provider walks the specs that
 * follow struct ibv_flow_attr and passes each filter's bytes as they are;
 * the daemon checks the types, sizes and values.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "provider.h"

/* put_filter copies a spec's value and mask filters (n bytes each) when
 * the spec is as large as libibverbs lays it out; a shorter one is left
 * zero, and its size tells the daemon so. */
static void put_filter(struct sn_flow_spec *s, size_t spec_size, const void *val, const void *mask, size_t n)
{
	if (s->size < spec_size || n > SN_FLOW_FILTER_MAX)
		return;
	memcpy(s->val, val, n);
	memcpy(s->mask, mask, n);
}

/* put_spec fills s from the libibverbs spec u. */
static void put_spec(struct sn_flow_spec *s, const struct ibv_flow_spec *u)
{
	s->type = u->hdr.type;
	s->size = u->hdr.size;
	switch (u->hdr.type) {
	case IBV_FLOW_SPEC_ETH:
		put_filter(s, sizeof(u->eth), &u->eth.val, &u->eth.mask, sizeof(u->eth.val));
		break;
	case IBV_FLOW_SPEC_IPV4:
		put_filter(s, sizeof(u->ipv4), &u->ipv4.val, &u->ipv4.mask, sizeof(u->ipv4.val));
		break;
	case IBV_FLOW_SPEC_IPV4_EXT:
		put_filter(s, sizeof(u->ipv4_ext), &u->ipv4_ext.val, &u->ipv4_ext.mask, sizeof(u->ipv4_ext.val));
		break;
	case IBV_FLOW_SPEC_IPV6:
		put_filter(s, sizeof(u->ipv6), &u->ipv6.val, &u->ipv6.mask, sizeof(u->ipv6.val));
		break;
	case IBV_FLOW_SPEC_TCP:
	case IBV_FLOW_SPEC_UDP:
		put_filter(s, sizeof(u->tcp_udp), &u->tcp_udp.val, &u->tcp_udp.mask, sizeof(u->tcp_udp.val));
		break;
	default:
		break; /* the daemon answers EOPNOTSUPP */
	}
}

struct ibv_flow *sn_create_flow(struct ibv_qp *ibqp, struct ibv_flow_attr *attr)
{
	struct sn_qp *qp = sn_container_of(ibqp, struct sn_qp, vqp.qp);
	if (attr->num_of_specs > SN_MAX_FLOW_SPECS) {
		errno = EINVAL;
		return NULL;
	}
	struct sn_create_flow_req req = {.qp = qp->handle, .type = attr->type, .priority = attr->priority,
					 .port = attr->port, .num_specs = attr->num_of_specs, .flags = attr->flags};
	const uint8_t *p = (const uint8_t *)(attr + 1);
	for (unsigned i = 0; i < attr->num_of_specs; i++) {
		const struct ibv_flow_spec *u = (const void *)p;
		if (u->hdr.size < sizeof(u->hdr)) {
			errno = EINVAL; /* the next spec would be where this one is */
			return NULL;
		}
		put_spec(&req.specs[i], u);
		p += u->hdr.size;
	}
	struct ibv_flow *flow = calloc(1, sizeof(*flow));
	if (!flow)
		return NULL;
	struct sn_handle r;
	if (sn_call(to_ctx(ibqp->context), SN_OP_CREATE_FLOW, &req, sizeof(req), &r, sizeof(r), NULL, 0) < 0) {
		free(flow);
		return NULL;
	}
	flow->context = ibqp->context;
	flow->handle = r.handle;
	return flow;
}

int sn_destroy_flow(struct ibv_flow *flow)
{
	struct sn_handle req = {flow->handle};
	if (sn_call(to_ctx(flow->context), SN_OP_DESTROY_FLOW, &req, sizeof(req), NULL, 0, NULL, 0) < 0)
		return errno;
	free(flow);
	return 0;
}
