/*
 * xrc.c: XRC domains, their SRQs and receive QPs. The daemon shares a
 * domain among every session that opens one on the same file (device and
 * inode), as the kernel does among processes: the file's descriptor goes
 * with open_xrcd. XRC send QPs are create_qp's (qp.c); their work
 * requests name the remote SRQ in the send entry (datapath.c, extended.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "provider.h"

struct ibv_xrcd *sn_open_xrcd(struct ibv_context *context, struct ibv_xrcd_init_attr *attr)
{
	const uint32_t need = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
	if ((attr->comp_mask & need) != need || (attr->comp_mask & ~need) ||
	    (attr->oflags & ~(O_CREAT | O_EXCL))) {
		errno = EINVAL;
		return NULL;
	}
	struct sn_xrcd *x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	struct sn_open_xrcd_req req = {.oflags = (uint32_t)attr->oflags, .has_fd = attr->fd >= 0};
	struct sn_handle r;
	int n = sn_call_fds(to_ctx(context), SN_OP_OPEN_XRCD, &req, sizeof(req), &attr->fd, attr->fd >= 0, &r,
			    sizeof(r), NULL, 0);
	if (n < 0) {
		free(x);
		return NULL;
	}
	x->ibv.context = context;
	x->handle = r.handle;
	return &x->ibv;
}

int sn_close_xrcd(struct ibv_xrcd *ibx)
{
	struct sn_xrcd *x = sn_container_of(ibx, struct sn_xrcd, ibv);
	int err = sn_destroy_handle(to_ctx(ibx->context), SN_OP_CLOSE_XRCD, x->handle);
	if (!err)
		free(x);
	return err;
}

/* fill_srq sets the ibv_srq fields ibv_cmd_create_srq_ex would have set. */
static void fill_srq(struct sn_srq *srq, struct ibv_context *context, struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq *s = &srq->ibv;
	s->context = context;
	s->srq_context = attr->srq_context;
	s->pd = attr->pd;
	s->events_completed = 0;
	pthread_mutex_init(&s->mutex, NULL);
	pthread_cond_init(&s->cond, NULL);
	srq->srq_type = IBV_SRQT_XRC;
	srq->xrcd = attr->xrcd;
	srq->cq = attr->cq;
}

/* sn_create_xrc_srq makes an XRC SRQ (its PD, XRCD and CQ given), for
 * sn_create_srq_ex (tm.c). */
struct ibv_srq *sn_create_xrc_srq(struct ibv_context *context, struct ibv_srq_init_attr_ex *attr)
{
	const uint32_t xrc = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
			     IBV_SRQ_INIT_ATTR_CQ;
	uint32_t mask = attr->comp_mask;
	if ((mask & xrc) != xrc || (mask & ~xrc) || !attr->pd || !attr->xrcd || !attr->cq) {
		errno = EINVAL;
		return NULL;
	}
	struct sn_srq *srq = calloc(1, sizeof(*srq));
	if (!srq)
		return NULL;
	struct sn_create_xrc_srq_req req = {
		.srq = {.pd = sn_pd_handle(attr->pd), .max_wr = attr->attr.max_wr, .max_sge = attr->attr.max_sge,
			.limit = attr->attr.srq_limit, .user_handle = (uintptr_t)&srq->ibv},
		.xrcd = sn_container_of(attr->xrcd, struct sn_xrcd, ibv)->handle,
		.cq = sn_container_of(attr->cq, struct sn_cq, ibv)->handle};
	struct sn_create_xrc_srq_reply r;
	int fd = -1, n = sn_call(to_ctx(context), SN_OP_CREATE_XRC_SRQ, &req, sizeof(req), &r, sizeof(r), &fd, 1);
	if (n < 0 || sn_srq_map(context, srq, n, fd, r.handle, r.depth, r.stride)) {
		free(srq);
		return NULL;
	}
	srq->limit = attr->attr.srq_limit;
	srq->srq_num = r.srq_num;
	attr->attr.max_wr = r.depth;
	attr->attr.max_sge = srq->max_sge;
	fill_srq(srq, context, attr);
	return &srq->ibv;
}

int sn_get_srq_num(struct ibv_srq *ibsrq, uint32_t *srq_num)
{
	struct sn_srq *srq = sn_container_of(ibsrq, struct sn_srq, ibv);
	if (srq->srq_type != IBV_SRQT_XRC)
		return EINVAL;
	*srq_num = srq->srq_num;
	return 0;
}

/* sn_create_xrc_recv_qp makes an XRC receive QP in the XRCD
 * ibv_create_qp_ex names: no PD, CQs or queues. */
struct ibv_qp *sn_create_xrc_recv_qp(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr)
{
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd ||
	    (attr->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_PD))) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_qp *qp = sn_xrc_recv_qp(context, SN_OP_CREATE_XRC_QP, 0, attr->xrcd, attr->qp_context);
	if (qp)
		memset(&attr->cap, 0, sizeof(attr->cap));
	return qp;
}

/* sn_open_qp opens the XRC receive QP attr names (ibv_open_qp). */
struct ibv_qp *sn_open_qp(struct ibv_context *context, struct ibv_qp_open_attr *attr)
{
	const uint32_t need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
	if ((attr->comp_mask & need) != need || attr->qp_type != IBV_QPT_XRC_RECV || !attr->xrcd) {
		errno = EINVAL;
		return NULL;
	}
	return sn_xrc_recv_qp(context, SN_OP_OPEN_QP, attr->qp_num, attr->xrcd, attr->qp_context);
}
