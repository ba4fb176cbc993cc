/*
 * qp.c: queue pairs. The daemon runs each QP's transport; the provider
 * holds its send and receive rings (one memfd, the send queue first) and
 * passes modify_qp's attributes through as libibverbs gives them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "provider.h"

/* Ring sizes the provider believes: a reply asking for more is broken. */
#define SN_MAX_DEPTH (1u << 16)
#define SN_MAX_STRIDE (1u << 16)

int sn_wq_init(struct sn_wq *wq, uint8_t *ring, uint32_t depth, uint32_t stride)
{
	wq->ring = ring;
	wq->mask = depth - 1;
	wq->stride = stride;
	wq->next = __atomic_load_n((uint32_t *)(ring + SN_WQ_PRODUCER), __ATOMIC_ACQUIRE);
	return pthread_spin_init(&wq->lock, PTHREAD_PROCESS_PRIVATE);
}

static int qp_type(enum ibv_qp_type t)
{
	switch (t) {
	case IBV_QPT_RC:
		return SN_QPT_RC;
	case IBV_QPT_UC:
		return SN_QPT_UC;
	case IBV_QPT_UD:
		return SN_QPT_UD;
	default:
		return -1;
	}
}

static int ring_ok(uint32_t depth, uint32_t stride)
{
	return depth && !(depth & (depth - 1)) && depth <= SN_MAX_DEPTH && stride >= 32 && stride <= SN_MAX_STRIDE &&
	       !(stride & (stride - 1));
}

/* map_qp maps the rings the create_qp reply r describes and sets up the
 * queues; 0 or an errno. */
static int map_qp(struct sn_qp *qp, const struct sn_create_qp_reply *r, int n, int fd)
{
	size_t sq_size = SN_RING_HEADER + (size_t)r->sq_depth * r->sq_stride;
	qp->has_rq = r->rq_depth > 0;
	if (n != 1 || !ring_ok(r->sq_depth, r->sq_stride) || r->rq_offset != sq_size ||
	    (qp->has_rq && !ring_ok(r->rq_depth, r->rq_stride))) {
		if (n > 0)
			close(fd);
		return EPROTO;
	}
	qp->size = sq_size + (qp->has_rq ? SN_RING_HEADER + (size_t)r->rq_depth * r->rq_stride : 0);
	qp->mem = sn_map_ring(fd, qp->size);
	int err = qp->mem ? 0 : errno;
	close(fd);
	if (err)
		return err;
	if (sn_wq_init(&qp->sq, qp->mem, r->sq_depth, r->sq_stride) ||
	    (qp->has_rq && sn_wq_init(&qp->rq, qp->mem + sq_size, r->rq_depth, r->rq_stride))) {
		munmap(qp->mem, qp->size);
		return ENOMEM;
	}
	return 0;
}

/* fill_qp sets the ibv_qp fields ibv_cmd_create_qp would have set. */
static void fill_qp(struct sn_qp *qp, struct ibv_pd *pd, struct ibv_qp_init_attr *attr, uint32_t qpn)
{
	struct ibv_qp *q = &qp->vqp.qp;
	q->context = pd->context;
	q->qp_context = attr->qp_context;
	q->pd = pd;
	q->send_cq = attr->send_cq;
	q->recv_cq = attr->recv_cq;
	q->srq = attr->srq;
	q->qp_num = qpn;
	q->state = IBV_QPS_RESET;
	q->qp_type = attr->qp_type;
	q->events_completed = 0;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);
}

/* call_create_qp sends create_qp, or cm_create_qp for CM ID cm_id when it
 * is not 0; the reply's rings are mapped by map_qp. */
static int call_create_qp(struct ibv_pd *pd, const struct sn_create_qp_req *req, uint32_t cm_id,
			  struct sn_create_qp_reply *r, int *fd)
{
	struct sn_context *ctx = to_ctx(pd->context);
	if (!cm_id)
		return sn_call(ctx, SN_OP_CREATE_QP, req, sizeof(*req), r, sizeof(*r), fd, 1);
	struct sn_cm_create_qp_req cm = {.id = cm_id, .qp = *req};
	return sn_call(ctx, SN_OP_CM_CREATE_QP, &cm, sizeof(cm), r, sizeof(*r), fd, 1);
}

/* sn_create_qp_for makes a QP, a CM ID's when cm_id is not 0. */
struct ibv_qp *sn_create_qp_for(struct ibv_pd *pd, struct ibv_qp_init_attr *attr, uint32_t cm_id)
{
	int type = qp_type(attr->qp_type);
	if (type < 0 || !attr->send_cq || !attr->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	struct sn_qp *qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	struct ibv_qp_cap *cap = &attr->cap;
	/* The daemon wants at least one work request each way (none with an
	 * SRQ); a QP that never receives still gets the smallest queue. */
	struct sn_create_qp_req req = {
		.pd = sn_container_of(pd, struct sn_pd, ibv)->handle, .type = type,
		.send_cq = sn_container_of(attr->send_cq, struct sn_cq, ibv)->handle,
		.recv_cq = sn_container_of(attr->recv_cq, struct sn_cq, ibv)->handle,
		.srq = attr->srq ? sn_container_of(attr->srq, struct sn_srq, ibv)->handle : 0,
		.max_send_wr = cap->max_send_wr ? cap->max_send_wr : 1,
		.max_recv_wr = attr->srq ? 0 : (cap->max_recv_wr ? cap->max_recv_wr : 1),
		.max_send_sge = cap->max_send_sge, .max_recv_sge = cap->max_recv_sge,
		.max_inline = cap->max_inline_data, .user_handle = (uintptr_t)&qp->vqp.qp};
	struct sn_create_qp_reply r;
	int fd = -1, n = call_create_qp(pd, &req, cm_id, &r, &fd);
	if (n < 0) {
		free(qp);
		return NULL;
	}
	int err = map_qp(qp, &r, n, fd);
	if (err) {
		/* A CM ID lets go of a QP destroyed under it at its next command. */
		struct sn_handle d = {r.handle};
		sn_call(to_ctx(pd->context), SN_OP_DESTROY_QP, &d, sizeof(d), NULL, 0, NULL, 0);
		free(qp);
		errno = err;
		return NULL;
	}
	qp->handle = r.handle;
	qp->sig_all = attr->sq_sig_all;
	qp->max_inline = r.max_inline;
	qp->max_send_sge = r.max_send_sge;
	qp->max_recv_sge = r.max_recv_sge;
	cap->max_send_wr = r.sq_depth;
	cap->max_recv_wr = r.rq_depth;
	cap->max_send_sge = r.max_send_sge;
	cap->max_recv_sge = r.max_recv_sge;
	cap->max_inline_data = r.max_inline;
	qp->cap = *cap;
	fill_qp(qp, pd, attr, r.qpn);
	return &qp->vqp.qp;
}

struct ibv_qp *sn_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	return sn_create_qp_for(pd, attr, 0);
}

/* modify_request turns ibv_modify_qp's arguments into the command. */
static void modify_request(struct sn_modify_qp_req *req, const struct ibv_qp_attr *a, int mask)
{
	req->mask = mask;
	req->state = a->qp_state;
	req->cur_state = a->cur_qp_state;
	req->path_mtu = a->path_mtu;
	req->port = a->port_num;
	req->timeout = a->timeout;
	req->retry_cnt = a->retry_cnt;
	req->rnr_retry = a->rnr_retry;
	req->min_rnr = a->min_rnr_timer;
	req->max_rd_atomic = a->max_rd_atomic;
	req->max_dest_rd_atomic = a->max_dest_rd_atomic;
	req->sgid_index = a->ah_attr.grh.sgid_index;
	req->hop_limit = a->ah_attr.grh.hop_limit;
	req->traffic_class = a->ah_attr.grh.traffic_class;
	req->pkey_index = a->pkey_index;
	req->access = a->qp_access_flags;
	req->qkey = a->qkey;
	req->dest_qpn = a->dest_qp_num;
	req->rq_psn = a->rq_psn;
	req->sq_psn = a->sq_psn;
	req->flow_label = a->ah_attr.grh.flow_label;
	memcpy(req->dgid, a->ah_attr.grh.dgid.raw, 16);
}

/* sn_qp_remember keeps the attributes a successful modify set (or the
 * daemon set on a CM ID's QP), for query_qp. */
void sn_qp_remember(struct ibv_qp_attr *m, const struct ibv_qp_attr *a, int mask)
{
#define KEEP(bit, field)           \
	if (mask & (bit))          \
		m->field = a->field
	KEEP(IBV_QP_STATE, qp_state);
	KEEP(IBV_QP_ACCESS_FLAGS, qp_access_flags);
	KEEP(IBV_QP_PKEY_INDEX, pkey_index);
	KEEP(IBV_QP_PORT, port_num);
	KEEP(IBV_QP_QKEY, qkey);
	KEEP(IBV_QP_AV, ah_attr);
	KEEP(IBV_QP_PATH_MTU, path_mtu);
	KEEP(IBV_QP_TIMEOUT, timeout);
	KEEP(IBV_QP_RETRY_CNT, retry_cnt);
	KEEP(IBV_QP_RNR_RETRY, rnr_retry);
	KEEP(IBV_QP_RQ_PSN, rq_psn);
	KEEP(IBV_QP_MAX_QP_RD_ATOMIC, max_rd_atomic);
	KEEP(IBV_QP_MIN_RNR_TIMER, min_rnr_timer);
	KEEP(IBV_QP_SQ_PSN, sq_psn);
	KEEP(IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
	KEEP(IBV_QP_DEST_QPN, dest_qp_num);
#undef KEEP
}

int sn_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask)
{
	struct sn_qp *qp = sn_container_of(ibqp, struct sn_qp, vqp.qp);
	struct sn_modify_qp_req req = {.handle = qp->handle};
	modify_request(&req, attr, mask);
	if (sn_call(to_ctx(ibqp->context), SN_OP_MODIFY_QP, &req, sizeof(req), NULL, 0, NULL, 0) < 0)
		return errno;
	sn_qp_remember(&qp->attr, attr, mask);
	return 0;
}

/* sn_query_qp answers from what modify_qp set, with the state the daemon
 * last published in the send queue's ring (a QP the transport moved to
 * the error state says so). */
int sn_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	(void)mask;
	struct sn_qp *qp = sn_container_of(ibqp, struct sn_qp, vqp.qp);
	*attr = qp->attr;
	attr->qp_state = __atomic_load_n((uint32_t *)(qp->mem + SN_WQ_STATE), __ATOMIC_ACQUIRE);
	attr->cur_qp_state = attr->qp_state;
	attr->cap = qp->cap;
	memset(init, 0, sizeof(*init));
	init->qp_context = ibqp->qp_context;
	init->send_cq = ibqp->send_cq;
	init->recv_cq = ibqp->recv_cq;
	init->srq = ibqp->srq;
	init->cap = qp->cap;
	init->qp_type = ibqp->qp_type;
	init->sq_sig_all = qp->sig_all;
	return 0;
}

int sn_destroy_qp(struct ibv_qp *ibqp)
{
	struct sn_qp *qp = sn_container_of(ibqp, struct sn_qp, vqp.qp);
	int err = sn_destroy_handle(to_ctx(ibqp->context), SN_OP_DESTROY_QP, qp->handle);
	if (err)
		return err;
	munmap(qp->mem, qp->size);
	pthread_spin_destroy(&qp->sq.lock);
	if (qp->has_rq)
		pthread_spin_destroy(&qp->rq.lock);
	free(qp);
	return 0;
}
