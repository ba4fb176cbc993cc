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
#include "ring.h"

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
	case IBV_QPT_RAW_PACKET:
		return SN_QPT_RAW_PACKET;
	case IBV_QPT_XRC_SEND:
		return SN_QPT_XRC_SEND;
	default:
		return -1;
	}
}

/* unsupported_type says whether t is a QP type libibverbs knows that
 * softnic does not offer (the kernel's EOPNOTSUPP), not a wrong value. */
static int unsupported_type(enum ibv_qp_type t)
{
	return t == IBV_QPT_DRIVER;
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

static struct ibv_qp *finish_qp(struct sn_qp *qp, struct ibv_pd *pd, struct ibv_qp_init_attr *attr,
				const struct sn_create_qp_reply *r, int n, int fd, uint32_t cm_id);

/* sn_create_qp_for makes a QP, a CM ID's when cm_id is not 0. */
struct ibv_qp *sn_create_qp_for(struct ibv_pd *pd, struct ibv_qp_init_attr *attr, uint32_t cm_id)
{
	int type = qp_type(attr->qp_type);
	/* An XRC send QP has a send queue only (ibv_create_qp_ex). */
	int xrc = type == SN_QPT_XRC_SEND;
	if (type < 0 || !attr->send_cq || (!attr->recv_cq && !xrc)) {
		errno = type < 0 && unsupported_type(attr->qp_type) ? EOPNOTSUPP : EINVAL;
		return NULL;
	}
	/* As the kernel, an XRC send QP ignores a receive CQ and SRQ given. */
	struct ibv_qp_init_attr xa;
	struct ibv_qp_cap *orig_cap = &attr->cap;
	if (xrc) {
		xa = *attr;
		xa.recv_cq = NULL;
		xa.srq = NULL;
		xa.cap.max_recv_wr = xa.cap.max_recv_sge = 0;
		attr = &xa;
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
		.recv_cq = attr->recv_cq ? sn_container_of(attr->recv_cq, struct sn_cq, ibv)->handle : 0,
		.srq = attr->srq ? sn_container_of(attr->srq, struct sn_srq, ibv)->handle : 0,
		.max_send_wr = cap->max_send_wr ? cap->max_send_wr : 1,
		.max_recv_wr = attr->srq || xrc ? 0 : (cap->max_recv_wr ? cap->max_recv_wr : 1),
		.max_send_sge = cap->max_send_sge, .max_recv_sge = cap->max_recv_sge,
		.max_inline = cap->max_inline_data, .user_handle = (uintptr_t)&qp->vqp.qp};
	struct sn_create_qp_reply r;
	int fd = -1, n = call_create_qp(pd, &req, cm_id, &r, &fd);
	struct ibv_qp *ibqp = finish_qp(qp, pd, attr, &r, n, fd, cm_id);
	if (ibqp && attr == &xa) {
		/* the caller's capabilities, as the daemon gave them */
		orig_cap->max_send_wr = cap->max_send_wr;
		orig_cap->max_send_sge = cap->max_send_sge;
		orig_cap->max_inline_data = cap->max_inline_data;
		orig_cap->max_recv_wr = orig_cap->max_recv_sge = 0;
	}
	return ibqp;
}

/* sn_create_qp_req makes the QP that command op, with body req of len
 * bytes, makes (create_rss_qp): the QP's user handle, a u64, is written
 * into req at handle_off first. */
struct ibv_qp *sn_create_qp_req(struct ibv_pd *pd, struct ibv_qp_init_attr *attr, int op, void *req, size_t len,
				size_t handle_off)
{
	struct sn_qp *qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	uint64_t h = (uintptr_t)&qp->vqp.qp;
	memcpy((uint8_t *)req + handle_off, &h, sizeof(h));
	struct sn_create_qp_reply r;
	int fd = -1, n = sn_call(to_ctx(pd->context), op, req, len, &r, sizeof(r), &fd, 1);
	return finish_qp(qp, pd, attr, &r, n, fd, 0);
}

/* finish_qp maps the rings of a QP the daemon made (n: the descriptors
 * its reply r passed, fd; n < 0: it failed) and fills qp; it frees qp on
 * an error. */
static struct ibv_qp *finish_qp(struct sn_qp *qp, struct ibv_pd *pd, struct ibv_qp_init_attr *attr,
				const struct sn_create_qp_reply *rp, int n, int fd, uint32_t cm_id)
{
	struct ibv_qp_cap *cap = &attr->cap;
	struct sn_create_qp_reply r = *rp;
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
	qp->cm_id = cm_id;
	pthread_mutex_init(&qp->attr_lock, NULL);
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

/* sn_qp_record keeps attributes set on qp (by the daemon, when the
 * library says so: a UD ID's Q_Key) for query_qp. */
void sn_qp_record(struct sn_qp *qp, const struct ibv_qp_attr *a, int mask)
{
	pthread_mutex_lock(&qp->attr_lock);
	sn_qp_remember(&qp->attr, a, mask);
	pthread_mutex_unlock(&qp->attr_lock);
}

/* attr_of turns a modify_qp request body (cm_init_qp_attr's reply) into
 * ibv_modify_qp's attributes. */
static void attr_of(struct ibv_qp_attr *a, const struct sn_modify_qp_req *r)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = r->state;
	a->cur_qp_state = r->cur_state;
	a->path_mtu = r->path_mtu;
	a->port_num = r->port;
	a->timeout = r->timeout;
	a->retry_cnt = r->retry_cnt;
	a->rnr_retry = r->rnr_retry;
	a->min_rnr_timer = r->min_rnr;
	a->max_rd_atomic = r->max_rd_atomic;
	a->max_dest_rd_atomic = r->max_dest_rd_atomic;
	a->pkey_index = r->pkey_index;
	a->qp_access_flags = r->access;
	a->qkey = r->qkey;
	a->dest_qp_num = r->dest_qpn;
	a->rq_psn = r->rq_psn;
	a->sq_psn = r->sq_psn;
	/* On RoCE every address vector is a global route. */
	a->ah_attr.is_global = 1;
	a->ah_attr.port_num = 1;
	a->ah_attr.grh.sgid_index = r->sgid_index;
	a->ah_attr.grh.hop_limit = r->hop_limit;
	a->ah_attr.grh.traffic_class = r->traffic_class;
	a->ah_attr.grh.flow_label = r->flow_label;
	memcpy(a->ah_attr.grh.dgid.raw, r->dgid, 16);
}

/* The states an RC or UC QP passes on its way to RTS, in order: bit i of
 * cm_fetched is cm_steps[i]'s. */
static const enum ibv_qp_state cm_steps[] = {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS};
#define SN_CM_FETCHED_ALL ((1 << 3) - 1)

/* passed says whether a QP in state s has been through step. */
static int passed(enum ibv_qp_state s, enum ibv_qp_state step)
{
	switch (s) {
	case IBV_QPS_INIT:
		return step == IBV_QPS_INIT;
	case IBV_QPS_RTR:
		return step != IBV_QPS_RTS;
	case IBV_QPS_RTS:
	case IBV_QPS_SQD:
	case IBV_QPS_SQE:
	case IBV_QPS_ERR: /* as far as it went: the daemon refuses the rest */
		return 1;
	default:
		return 0;
	}
}

/*
 * fetch_cm_attrs records what the daemon set on a CM ID's QP for each
 * state the QP passed, as far as not yet recorded: the daemon moves such a
 * QP itself (INIT at rdma_create_qp, RTR and RTS at rdma_accept or when
 * the REP comes, with the ACK timeout of rdma_set_option), and
 * cm_init_qp_attr answers those very attributes, as rdma_init_qp_attr
 * does. The kernel's ibv_query_qp asks the QP, so what rdma_cm set shows;
 * here the provider asks the ID, once per state, when the program first
 * queries or modifies the QP after it passed it. So the record keeps the
 * order in which the two set things: the program's modify after the
 * daemon's moves wins. A step the daemon refuses (the ID is gone, the
 * connection failed before it) is given up, with those after it. Called
 * with qp->attr_lock held.
 */
static void fetch_cm_attrs(struct sn_qp *qp)
{
	if (!qp->cm_id || qp->vqp.qp.qp_type == IBV_QPT_UD || qp->cm_fetched == SN_CM_FETCHED_ALL)
		return;
	enum ibv_qp_state s = sn_qp_state(qp);
	for (int i = 0; i < 3; i++) {
		if (qp->cm_fetched & (1 << i))
			continue;
		if (!passed(s, cm_steps[i]))
			return;
		struct sn_cm_init_qp_attr_req req = {.id = qp->cm_id, .state = cm_steps[i]};
		struct sn_modify_qp_req r;
		if (sn_call(to_ctx(qp->vqp.qp.context), SN_OP_CM_INIT_QP_ATTR, &req, sizeof(req), &r, sizeof(r), NULL,
			    0) < 0) {
			qp->cm_fetched = SN_CM_FETCHED_ALL;
			return;
		}
		struct ibv_qp_attr a;
		attr_of(&a, &r);
		int mask = r.mask & ~IBV_QP_STATE;
		if (cm_steps[i] == IBV_QPS_INIT)
			mask &= ~IBV_QP_ACCESS_FLAGS; /* the ID's QP gets none before RTR, as the kernel's */
		sn_qp_remember(&qp->attr, &a, mask);
		qp->cm_fetched |= 1 << i;
	}
}

/* cq_clean discards the completions of QP qpn that cq holds and the
 * program has not polled, as libmlx5 does when a QP moves to RESET: the
 * QP starts again with nothing of its past in its CQs. The daemon, done
 * with the QP's old work once modify_qp returned, writes none of them any
 * more. Receive completions of a QP that takes its receives from an SRQ
 * stay (sends_only): their work requests are the SRQ's, and gone. */
static void cq_clean(struct ibv_cq *ibcq, uint32_t qpn, int sends_only)
{
	if (!ibcq)
		return;
	struct sn_cq *cq = sn_container_of(ibcq, struct sn_cq, ibv);
	pthread_spin_lock(&cq->lock);
	for (uint32_t i = cq->next;; i++) {
		uint8_t *e = cq_written(cq, i);
		if (!e)
			break;
		struct sn_cq_entry c;
		memcpy(&c, e, sizeof(c));
		if (c.qpn == qpn && (!sends_only || c.opcode < IBV_WC_RECV))
			e[offsetof(struct sn_cq_entry, discarded)] = 1;
	}
	pthread_spin_unlock(&cq->lock);
}

int sn_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask)
{
	struct sn_qp *qp = sn_container_of(ibqp, struct sn_qp, vqp.qp);
	struct sn_modify_qp_req req = {.handle = qp->handle};
	modify_request(&req, attr, mask);
	pthread_mutex_lock(&qp->attr_lock);
	fetch_cm_attrs(qp); /* what the daemon set before this */
	int err = sn_call(to_ctx(ibqp->context), SN_OP_MODIFY_QP, &req, sizeof(req), NULL, 0, NULL, 0) < 0 ? errno : 0;
	if (!err)
		sn_qp_remember(&qp->attr, attr, mask);
	pthread_mutex_unlock(&qp->attr_lock);
	if (!err && (mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET) {
		int srq = ibqp->srq != NULL;
		cq_clean(ibqp->send_cq, ibqp->qp_num, srq && ibqp->recv_cq == ibqp->send_cq);
		if (ibqp->recv_cq != ibqp->send_cq)
			cq_clean(ibqp->recv_cq, ibqp->qp_num, srq);
	}
	return err;
}

/* sn_query_qp answers from what modify_qp set (and, for a CM ID's QP, the
 * daemon), with the state the daemon last published in the send queue's
 * ring (a QP the transport moved to the error state says so). */
int sn_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	(void)mask;
	struct sn_qp *qp = sn_container_of(ibqp, struct sn_qp, vqp.qp);
	pthread_mutex_lock(&qp->attr_lock);
	fetch_cm_attrs(qp);
	*attr = qp->attr;
	pthread_mutex_unlock(&qp->attr_lock);
	attr->qp_state = sn_qp_state(qp);
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
	pthread_mutex_destroy(&qp->attr_lock);
	pthread_spin_destroy(&qp->sq.lock);
	if (qp->has_rq)
		pthread_spin_destroy(&qp->rq.lock);
	free(qp);
	return 0;
}

/* sn_xrc_recv_qp makes a handle of an XRC receive QP of xrcd with op:
 * create_xrc_qp (qpn 0), open_qp, or cm_create_qp for the CM ID qpn
 * names then (type XRC receive, the XRCD in the PD's place). Its ring, a
 * send queue of one entry, takes no posts; its header shows the state. */
struct ibv_qp *sn_xrc_recv_qp(struct ibv_context *context, enum sn_op op, uint32_t qpn, struct ibv_xrcd *xrcd,
			      void *qp_context)
{
	struct sn_qp *qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	struct sn_xrc_qp_req req = {.xrcd = sn_container_of(xrcd, struct sn_xrcd, ibv)->handle,
				    .qpn = op == SN_OP_CM_CREATE_QP ? 0 : qpn, .user_handle = (uintptr_t)&qp->vqp.qp};
	struct sn_create_qp_reply r;
	int fd = -1, n;
	if (op == SN_OP_CM_CREATE_QP) {
		struct sn_cm_create_qp_req cm = {.id = qpn,
						 .qp = {.pd = req.xrcd, .type = SN_QPT_XRC_RECV, .user_handle = req.user_handle}};
		n = sn_call(to_ctx(context), op, &cm, sizeof(cm), &r, sizeof(r), &fd, 1);
	} else {
		n = sn_call(to_ctx(context), op, &req, sizeof(req), &r, sizeof(r), &fd, 1);
	}
	if (n < 0) {
		free(qp);
		return NULL;
	}
	int err = map_qp(qp, &r, n, fd);
	if (err || qp->has_rq) {
		if (!err)
			munmap(qp->mem, qp->size);
		struct sn_handle d = {r.handle};
		sn_call(to_ctx(context), SN_OP_DESTROY_QP, &d, sizeof(d), NULL, 0, NULL, 0);
		free(qp);
		errno = err ? err : EPROTO;
		return NULL;
	}
	qp->handle = r.handle;
	if (op == SN_OP_CM_CREATE_QP)
		qp->cm_id = qpn;
	pthread_mutex_init(&qp->attr_lock, NULL);
	struct ibv_qp *q = &qp->vqp.qp;
	q->context = context;
	q->qp_context = qp_context;
	q->qp_num = r.qpn;
	q->state = IBV_QPS_RESET;
	q->qp_type = IBV_QPT_XRC_RECV;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);
	qp->vqp.comp_mask |= SN_VERBS_QP_XRCD;
	qp->vqp.xrcd = xrcd;
	return q;
}
