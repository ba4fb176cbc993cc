/*
 * cm.c: the provider's private entry point for softnic's librdmacm
 * (softnic_rdmacm.h). librdmacm runs its IDs on a context it opened
 * through this provider, so that an ID's QP is a session QP whose rings
 * the data path drives like any other.
 */
#define _GNU_SOURCE
#include <errno.h>

#include "provider.h"
#include "softnic_rdmacm.h"

/* cm_op_allowed: the CM's commands, except cm_create_qp, which needs the
 * rings mapped (cm_create_qp below). */
static int cm_op_allowed(int op)
{
	return (op >= SN_OP_CM_CREATE_CHANNEL && op <= SN_OP_CM_DETACH_QP && op != SN_OP_CM_CREATE_QP) ||
	       (op >= SN_OP_CM_SET_OPTION && op <= SN_OP_CM_ESTABLISH) || op == SN_OP_CM_DESTROY_CHANNEL ||
	       op == SN_OP_CM_JOIN_MCAST || op == SN_OP_CM_LEAVE_MCAST;
}

static int cm_call(struct ibv_context *context, int op, const void *req, size_t req_len, void *reply,
		   size_t reply_len, int *fds, int max_fds)
{
	if (!sn_is_softnic(context) || !cm_op_allowed(op) || max_fds < 0 || (max_fds > 0 && !fds)) {
		errno = EINVAL;
		return -1;
	}
	return sn_call(to_ctx(context), op, req, req_len, reply, reply_len, fds, max_fds);
}

static struct ibv_qp *cm_create_qp(struct ibv_pd *pd, uint32_t id, struct ibv_qp_init_attr *attr,
				   const uint64_t *send_ops)
{
	if (!pd || !attr || !id || !sn_is_softnic(pd->context)) {
		errno = EINVAL;
		return NULL;
	}
	return sn_create_qp_wr(pd, attr, id, send_ops);
}

static struct ibv_qp *cm_create_xrc_qp(struct ibv_xrcd *xrcd, uint32_t id, void *qp_context)
{
	if (!xrcd || !id || !sn_is_softnic(xrcd->context)) {
		errno = EINVAL;
		return NULL;
	}
	return sn_xrc_recv_qp(xrcd->context, SN_OP_CM_CREATE_QP, id, xrcd, qp_context);
}

static void cm_qp_attr(struct ibv_qp *ibqp, const struct ibv_qp_attr *attr, int mask)
{
	if (ibqp && attr && sn_is_softnic(ibqp->context))
		sn_qp_record(sn_container_of(ibqp, struct sn_qp, vqp.qp), attr, mask);
}

static const struct softnic_rdmacm_ops ops = {
	.abi = SOFTNIC_RDMACM_ABI,
	.cm_call = cm_call,
	.cm_create_qp = cm_create_qp,
	.cm_qp_attr = cm_qp_attr,
	.cm_create_xrc_qp = cm_create_xrc_qp,
	.alloc_shared = sn_alloc_shared,
	.free_shared = sn_free_shared,
};

__attribute__((visibility("default"))) const struct softnic_rdmacm_ops *softnic_rdmacm_ops(void)
{
	return &ops;
}
