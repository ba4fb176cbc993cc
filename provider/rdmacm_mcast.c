/*
 * rdmacm_mcast.c: rdma_join_multicast, rdma_join_multicast_ex and
 * rdma_leave_multicast through the daemon's cm_join_mcast and
 * cm_leave_mcast. The daemon attaches the ID's QP to the group (unless
 * the join is send-only) and posts RDMA_CM_EVENT_MULTICAST_JOIN, whose
 * ud param is the group's address vector (its GID the group's address,
 * an IPv4 one mapped, as Linux's cma.c makes it on RoCEv2), QPN 0xFFFFFF
 * and RDMA_UDP_QKEY. The library keeps each group's context, which the
 * event gives as param.ud.private_data, as rdma-core's does.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm.h"

/* find_mc returns the link to id's group at wire address a, or NULL.
 * Called with cm_lib.lock held. */
static struct cm_mc **find_mc(struct cm_id *id, const uint8_t a[16])
{
	for (struct cm_mc **p = &id->mcs; *p; p = &(*p)->next)
		if (!memcmp((*p)->addr, a, 16))
			return p;
	return NULL;
}

/* cm_mc_context returns the context the program joined id's group a with. */
void *cm_mc_context(struct cm_id *id, const uint8_t a[16])
{
	pthread_mutex_lock(&cm_lib.lock);
	struct cm_mc **p = find_mc(id, a);
	void *ctx = p ? (*p)->context : NULL;
	pthread_mutex_unlock(&cm_lib.lock);
	return ctx;
}

/* cm_free_mcs forgets id's groups, which the daemon left with the ID. */
void cm_free_mcs(struct cm_id *id)
{
	pthread_mutex_lock(&cm_lib.lock);
	while (id->mcs) {
		struct cm_mc *m = id->mcs;
		id->mcs = m->next;
		free(m);
	}
	pthread_mutex_unlock(&cm_lib.lock);
}

/* mc_addr checks a group address and gives its wire form. */
static int mc_addr(const struct sockaddr *sa, uint8_t out[16])
{
	if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
		return cm_fail(EINVAL);
	cm_addr_to_wire(sa, out);
	return 0;
}

CM_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	if (!id || !attr)
		return cm_fail(EINVAL);
	if (attr->comp_mask & ~(RDMA_CM_JOIN_MC_ATTR_RESERVED - 1))
		return cm_fail(EOPNOTSUPP);
	if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
	    attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED)
		return cm_fail(EINVAL);
	struct cm_id *cid = to_cm_id(id);
	struct sn_cm_mcast_req req = {.id = cid->handle, .flags = attr->join_flags};
	if (mc_addr(attr->addr, req.addr))
		return -1;
	struct cm_mc *m = calloc(1, sizeof(*m));
	if (!m)
		return -1;
	memcpy(m->addr, req.addr, 16);
	m->context = context;
	/* Listed before the daemon joins: the event may be read at once. */
	pthread_mutex_lock(&cm_lib.lock);
	int dup = find_mc(cid, req.addr) != NULL;
	if (!dup) {
		m->next = cid->mcs;
		cid->mcs = m;
	}
	pthread_mutex_unlock(&cm_lib.lock);
	if (dup) {
		free(m);
		return cm_fail(EADDRINUSE);
	}
	if (cm_call(SN_OP_CM_JOIN_MCAST, &req, sizeof(req), NULL, 0)) {
		int e = errno;
		pthread_mutex_lock(&cm_lib.lock);
		struct cm_mc **p = find_mc(cid, req.addr);
		if (p)
			*p = m->next;
		pthread_mutex_unlock(&cm_lib.lock);
		free(m);
		return cm_fail(e);
	}
	return cm_wait(cid, RDMA_CM_EVENT_MULTICAST_JOIN);
}

CM_EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	struct rdma_cm_join_mc_attr_ex attr = {.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
					       .join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER,
					       .addr = addr};
	return rdma_join_multicast_ex(id, &attr, context);
}

CM_EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	if (!id)
		return cm_fail(EINVAL);
	struct cm_id *cid = to_cm_id(id);
	struct sn_cm_mcast_req req = {.id = cid->handle};
	if (mc_addr(addr, req.addr))
		return -1;
	pthread_mutex_lock(&cm_lib.lock);
	struct cm_mc **p = find_mc(cid, req.addr);
	struct cm_mc *m = p ? *p : NULL;
	if (p)
		*p = m->next;
	pthread_mutex_unlock(&cm_lib.lock);
	if (!m)
		return cm_fail(EADDRNOTAVAIL);
	free(m);
	return cm_call(SN_OP_CM_LEAVE_MCAST, &req, sizeof(req), NULL, 0);
}
