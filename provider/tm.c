/*
 * tm.c: tag matching (ConnectX's TM SRQs, in libibverbs' generic API):
 * ibv_create_srq_ex of IBV_SRQT_TM, ibv_post_srq_ops, and the device's
 * tm_caps. The matching is the daemon's engines' (ibtransport/tm.go);
 * each list operation is one post_srq_op command, whose completion is in
 * the SRQ's CQ when the reply comes, as mlx5's come through its command
 * QP. ibv_wc_read_tm_info is extended.c's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "provider.h"

void sn_tm_caps(struct ibv_tm_caps *caps)
{
	caps->max_rndv_hdr_size = SN_TM_MAX_RNDV_HDR_SIZE;
	caps->max_num_tags = SN_TM_MAX_NUM_TAGS;
	caps->flags = IBV_TM_CAP_RC;
	caps->max_ops = SN_TM_MAX_OPS;
	caps->max_sge = SN_TM_MAX_SGE;
}

/* create_tm_srq makes a TM SRQ: the daemon's, with the list and CQ attr
 * names. */
static struct ibv_srq *create_tm_srq(struct ibv_context *context, struct ibv_srq_init_attr_ex *attr)
{
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_TM) ||
	    attr->tm_cap.max_num_tags == 0 || attr->tm_cap.max_num_tags > SN_TM_MAX_NUM_TAGS ||
	    attr->tm_cap.max_ops == 0 || attr->tm_cap.max_ops > SN_TM_MAX_OPS || attr->cq->context != context) {
		errno = EINVAL;
		return NULL;
	}
	struct sn_srq *srq = calloc(1, sizeof(*srq));
	if (!srq)
		return NULL;
	struct sn_create_tm_srq_req req = {
		.pd = sn_pd_handle(attr->pd), .max_wr = attr->attr.max_wr, .max_sge = attr->attr.max_sge,
		.limit = attr->attr.srq_limit, .cq = sn_container_of(attr->cq, struct sn_cq, ibv)->handle,
		.max_num_tags = attr->tm_cap.max_num_tags, .max_ops = attr->tm_cap.max_ops,
		.user_handle = (uintptr_t)&srq->ibv};
	struct sn_create_srq_reply r;
	int fd = -1, n = sn_call(to_ctx(context), SN_OP_CREATE_TM_SRQ, &req, sizeof(req), &r, sizeof(r), &fd, 1);
	if (n < 0) {
		free(srq);
		return NULL;
	}
	srq->tm = 1;
	return sn_srq_created(context, srq, &r, n, fd, &attr->attr);
}

/* sn_create_srq_ex makes an SRQ of the basic, tag matching or XRC type
 * (xrc.c), and fills what libibverbs' ibv_create_srq fills for the basic
 * one, since
 * libibverbs leaves that to the provider here (as ibv_cmd_create_srq_ex
 * does for mlx5). */
struct ibv_srq *sn_create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *attr)
{
	uint32_t mask = attr->comp_mask;
	if ((mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_RESERVED - 1)) || !(mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd ||
	    attr->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	enum ibv_srq_type type = (mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
	struct ibv_srq *srq;
	switch (type) {
	case IBV_SRQT_BASIC: {
		struct ibv_srq_init_attr basic = {.srq_context = attr->srq_context, .attr = attr->attr};
		srq = sn_create_srq(attr->pd, &basic);
		if (srq)
			attr->attr = basic.attr;
		break;
	}
	case IBV_SRQT_TM:
		srq = create_tm_srq(context, attr);
		break;
	case IBV_SRQT_XRC:
		return sn_create_xrc_srq(context, attr); /* it fills its own */
	default:
		errno = EINVAL;
		return NULL;
	}
	if (!srq)
		return NULL;
	srq->context = context;
	srq->srq_context = attr->srq_context;
	srq->pd = attr->pd;
	srq->events_completed = 0;
	pthread_mutex_init(&srq->mutex, NULL);
	pthread_cond_init(&srq->cond, NULL);
	return srq;
}

/* post_op sends one list operation; ADD's handle comes back in wr. */
static int post_op(struct sn_srq *srq, struct ibv_ops_wr *wr)
{
	struct sn_srq_op_req req = {.srq = srq->handle, .opcode = wr->opcode, .flags = wr->flags,
				    .unexpected_cnt = wr->tm.unexpected_cnt, .handle = wr->tm.handle, .wr_id = wr->wr_id};
	if ((unsigned)wr->opcode > IBV_WR_TAG_SYNC || (wr->flags & ~(IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC)))
		return EINVAL;
	if (wr->opcode == IBV_WR_TAG_ADD) {
		if (wr->tm.add.num_sge < 0 || wr->tm.add.num_sge > SN_TM_MAX_SGE ||
		    (wr->tm.add.num_sge && !wr->tm.add.sg_list))
			return EINVAL;
		req.recv_wr_id = wr->tm.add.recv_wr_id;
		req.tag = wr->tm.add.tag;
		req.mask = wr->tm.add.mask;
		req.num_sge = wr->tm.add.num_sge;
		if (req.num_sge) {
			req.sge_addr = wr->tm.add.sg_list[0].addr;
			req.sge_length = wr->tm.add.sg_list[0].length;
			req.sge_lkey = wr->tm.add.sg_list[0].lkey;
		}
	}
	struct sn_handle r;
	if (sn_call(to_ctx(srq->ibv.context), SN_OP_POST_SRQ_OP, &req, sizeof(req), &r, sizeof(r), NULL, 0) < 0)
		return errno;
	if (wr->opcode == IBV_WR_TAG_ADD)
		wr->tm.handle = r.handle;
	return 0;
}

/* sn_post_srq_ops performs the list in order and stops at the first that
 * fails (*bad). */
int sn_post_srq_ops(struct ibv_srq *ibsrq, struct ibv_ops_wr *wr, struct ibv_ops_wr **bad)
{
	struct sn_srq *srq = sn_container_of(ibsrq, struct sn_srq, ibv);
	for (; wr; wr = wr->next) {
		int err = srq->tm ? post_op(srq, wr) : EINVAL;
		if (err) {
			*bad = wr;
			return err;
		}
	}
	return 0;
}
