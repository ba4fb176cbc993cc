/*
 * extended.c: the extended verbs over the same rings as datapath.c.
 *
 * ibv_create_cq_ex's CQs are polled an entry at a time (ibv_start_poll,
 * ibv_next_poll, ibv_end_poll) and read field by field (ibv_wc_read_*).
 * ibv_create_qp_ex's QPs with send_ops_flags build work requests a call at
 * a time (ibv_wr_start, an opcode, its SGEs or inline data, ibv_wr_complete)
 * straight into the send queue's entries, which the daemon sees at
 * ibv_wr_complete, all of them or, after an error or ibv_wr_abort, none.
 * Both are what ibv_rc_pingpong -N and programs written for mlx5 use.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "ring.h"

/* The completion fields softnic's entries carry: rdma_rxe's, the time
 * the engine made the completion, in the device clock's ticks (ns of
 * CLOCK_REALTIME: verbs/clock.go), which are also wall-clock ns, and a
 * tag matching receive's tag and app_ctx (tm.c). */
#define SN_WC_EX_FLAGS                                                                                       \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |      \
	 IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS |                          \
	 IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK | IBV_WC_EX_WITH_TM_INFO)

static inline struct sn_cq *to_cq_ex(struct ibv_cq_ex *x)
{
	return sn_container_of(x, struct sn_cq, ex);
}

/* take_entry copies the CQ's next written entry into cur and consumes it;
 * ENOENT if there is none. Called with the CQ's lock held. */
static int take_entry(struct sn_cq *cq)
{
	const uint8_t *e = cq_entry(cq);
	if (!e)
		return ENOENT;
	memcpy(&cq->cur, e, sizeof(cq->cur));
	cq->next++;
	cq->ex.wr_id = cq->cur.wr_id;
	cq->ex.status = cq->cur.status;
	return 0;
}

/* cq_start_poll holds the CQ until end_poll, unless there is nothing to
 * read: then, as with every provider, the program does not call end_poll. */
static int cq_start_poll(struct ibv_cq_ex *x, struct ibv_poll_cq_attr *attr)
{
	struct sn_cq *cq = to_cq_ex(x);
	if (attr->comp_mask)
		return EINVAL;
	pthread_spin_lock(&cq->lock);
	if (take_entry(cq) == 0) {
		cq->empty_polls = 0;
		return 0;
	}
	pthread_spin_unlock(&cq->lock);
	int err = sn_cq_empty(cq);
	return err ? err : ENOENT;
}

static int cq_next_poll(struct ibv_cq_ex *x)
{
	return take_entry(to_cq_ex(x));
}

static void cq_end_poll(struct ibv_cq_ex *x)
{
	struct sn_cq *cq = to_cq_ex(x);
	store_release(cq->ring + SN_CQ_CONSUMER, cq->next);
	pthread_spin_unlock(&cq->lock);
}

static enum ibv_wc_opcode cq_read_opcode(struct ibv_cq_ex *x)
{
	return to_cq_ex(x)->cur.opcode;
}

static uint32_t cq_read_vendor_err(struct ibv_cq_ex *x)
{
	(void)x;
	return 0;
}

static uint32_t cq_read_byte_len(struct ibv_cq_ex *x)
{
	return to_cq_ex(x)->cur.byte_len;
}

/* The immediate data, network order as stored, or the invalidated rkey
 * (ibv_wc_read_invalidated_rkey reads it here too). */
static __be32 cq_read_imm_data(struct ibv_cq_ex *x)
{
	__be32 v;
	memcpy(&v, &to_cq_ex(x)->cur.imm, sizeof(v));
	return v;
}

static uint32_t cq_read_qp_num(struct ibv_cq_ex *x)
{
	return to_cq_ex(x)->cur.qpn;
}

static uint32_t cq_read_src_qp(struct ibv_cq_ex *x)
{
	return to_cq_ex(x)->cur.src_qp;
}

static unsigned int cq_read_wc_flags(struct ibv_cq_ex *x)
{
	return to_cq_ex(x)->cur.flags;
}

static uint32_t cq_read_slid(struct ibv_cq_ex *x)
{
	return to_cq_ex(x)->cur.slid;
}

static uint8_t cq_read_sl(struct ibv_cq_ex *x)
{
	return to_cq_ex(x)->cur.sl;
}

static uint8_t cq_read_dlid_path_bits(struct ibv_cq_ex *x)
{
	return to_cq_ex(x)->cur.dlid_path_bits;
}

static uint64_t cq_read_completion_ts(struct ibv_cq_ex *x)
{
	return to_cq_ex(x)->cur.timestamp;
}

static void cq_read_tm_info(struct ibv_cq_ex *x, struct ibv_wc_tm_info *info)
{
	info->tag = to_cq_ex(x)->cur.tm_tag;
	info->priv = to_cq_ex(x)->cur.tm_priv;
}

/* sn_create_cq_ex makes a CQ as sn_create_cq does, polled the extended
 * way too, with mlx5's errnos for what it is not asked right: comp_mask
 * bits past those libibverbs knows are EINVAL, and so is a PD that is not
 * a parent domain (domain.c); completion fields softnic's entries do not
 * carry (CVLAN, flow tag) and flags other than SINGLE_THREADED
 * (IGNORE_OVERRUN) are EOPNOTSUPP. libibverbs then fills what
 * ibv_create_cq's wrapper fills (verbs_init_cq). */
struct ibv_cq_ex *sn_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr)
{
	if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
		errno = EINVAL;
		return NULL;
	}
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) && !sn_is_parent_domain(context, attr->parent_domain)) {
		errno = EINVAL;
		return NULL;
	}
	if ((attr->wc_flags & ~(uint64_t)SN_WC_EX_FLAGS) ||
	    ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & ~IBV_CREATE_CQ_ATTR_SINGLE_THREADED))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct ibv_cq *ibcq = sn_create_cq(context, attr->cqe, attr->channel, attr->comp_vector);
	if (!ibcq)
		return NULL;
	struct sn_cq *cq = sn_container_of(ibcq, struct sn_cq, ibv);
	struct ibv_cq_ex *x = &cq->ex;
	/* The daemon reads the clock for each entry only if asked: before
	 * any QP uses the CQ. */
	if (attr->wc_flags & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK))
		__atomic_store_n((uint32_t *)(cq->ring + SN_CQ_OPTIONS), SN_CQ_TIMESTAMPS, __ATOMIC_RELEASE);
	x->start_poll = cq_start_poll;
	x->next_poll = cq_next_poll;
	x->end_poll = cq_end_poll;
	x->read_opcode = cq_read_opcode;
	x->read_vendor_err = cq_read_vendor_err;
	x->read_wc_flags = cq_read_wc_flags;
	x->read_byte_len = cq_read_byte_len;
	x->read_imm_data = cq_read_imm_data;
	x->read_qp_num = cq_read_qp_num;
	x->read_src_qp = cq_read_src_qp;
	x->read_slid = cq_read_slid;
	x->read_sl = cq_read_sl;
	x->read_dlid_path_bits = cq_read_dlid_path_bits;
	x->read_completion_ts = cq_read_completion_ts;
	x->read_completion_wallclock_ns = cq_read_completion_ts; /* the same clock */
	x->read_tm_info = cq_read_tm_info;
	return x;
}

static inline struct sn_qp *to_qp_ex(struct ibv_qp_ex *x)
{
	return sn_container_of(x, struct sn_qp, vqp.qp_ex);
}

/* end_wr writes the header of the work request being built into its entry.
 * A UD send without ibv_wr_set_ud_addr fails the batch. */
static void end_wr(struct sn_qp *qp)
{
	if (!qp->wr_entry)
		return;
	if (qp->vqp.qp.qp_type == IBV_QPT_UD && !qp->wr_cur.ah && !qp->wr_err)
		qp->wr_err = EINVAL;
	memcpy(qp->wr_entry, &qp->wr_cur, sizeof(qp->wr_cur));
	qp->wr_entry = NULL;
}

/* begin_wr starts a work request of opcode in the send queue's next entry
 * and returns its header, or NULL after an error (which wr_complete
 * returns) or when the queue is full (ENOMEM, as ibv_post_send). */
static struct sn_send_entry *begin_wr(struct ibv_qp_ex *x, enum ibv_wr_opcode opcode)
{
	struct sn_qp *qp = to_qp_ex(x);
	end_wr(qp);
	if (qp->wr_err)
		return NULL;
	uint8_t *e = next_entry(&qp->sq);
	if (!e) {
		qp->wr_err = ENOMEM;
		return NULL;
	}
	qp->sq.next++;
	qp->wr_entry = e;
	struct sn_send_entry *h = &qp->wr_cur;
	memset(h, 0, sizeof(*h));
	h->wr_id = x->wr_id;
	h->opcode = opcode;
	h->flags = x->wr_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED);
	if (qp->sig_all)
		h->flags |= IBV_SEND_SIGNALED;
	return h;
}

static void wr_start(struct ibv_qp_ex *x)
{
	struct sn_qp *qp = to_qp_ex(x);
	pthread_spin_lock(&qp->sq.lock);
	qp->wr_first = qp->sq.next;
	qp->wr_entry = NULL;
	qp->wr_err = sn_daemon_gone(to_ctx(x->qp_base.context), 0) ? EIO : sn_send_refused(qp) ? EINVAL : 0;
}

static int wr_complete(struct ibv_qp_ex *x)
{
	struct sn_qp *qp = to_qp_ex(x);
	end_wr(qp);
	int err = qp->wr_err;
	if (err)
		qp->sq.next = qp->wr_first;
	else
		store_release(qp->sq.ring + SN_WQ_PRODUCER, qp->sq.next);
	pthread_spin_unlock(&qp->sq.lock);
	if (!err)
		sn_ring_doorbell(to_ctx(x->qp_base.context));
	return err;
}

static void wr_abort(struct ibv_qp_ex *x)
{
	struct sn_qp *qp = to_qp_ex(x);
	qp->sq.next = qp->wr_first;
	qp->wr_entry = NULL;
	pthread_spin_unlock(&qp->sq.lock);
}

static void wr_send(struct ibv_qp_ex *x)
{
	begin_wr(x, IBV_WR_SEND);
}

static void wr_send_imm(struct ibv_qp_ex *x, __be32 imm)
{
	struct sn_send_entry *h = begin_wr(x, IBV_WR_SEND_WITH_IMM);
	if (h)
		memcpy(&h->imm, &imm, sizeof(imm)); /* stays in network order */
}

static void wr_send_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct sn_send_entry *h = begin_wr(x, IBV_WR_SEND_WITH_INV);
	if (h)
		h->imm = rkey;
}

static void wr_local_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct sn_send_entry *h = begin_wr(x, IBV_WR_LOCAL_INV);
	if (h)
		h->imm = rkey;
}

static void wr_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *info)
{
	struct sn_qp *qp = to_qp_ex(x);
	if (!mw || (!info->mr && info->length)) {
		if (!qp->wr_err)
			qp->wr_err = EINVAL;
		return;
	}
	struct sn_send_entry *h = begin_wr(x, IBV_WR_BIND_MW);
	if (h)
		sn_put_bind(h, rkey, info);
}

static struct sn_send_entry *begin_remote(struct ibv_qp_ex *x, enum ibv_wr_opcode opcode, uint32_t rkey,
					  uint64_t addr)
{
	struct sn_send_entry *h = begin_wr(x, opcode);
	if (h) {
		h->rkey = rkey;
		h->remote_addr = addr;
	}
	return h;
}

static void wr_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	begin_remote(x, IBV_WR_RDMA_WRITE, rkey, addr);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct sn_send_entry *h = begin_remote(x, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr);
	if (h)
		memcpy(&h->imm, &imm, sizeof(imm));
}

static void wr_rdma_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	begin_remote(x, IBV_WR_RDMA_READ, rkey, addr);
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap)
{
	struct sn_send_entry *h = begin_remote(x, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr);
	if (h) {
		h->compare_add = compare;
		h->swap = swap;
	}
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t add)
{
	struct sn_send_entry *h = begin_remote(x, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr);
	if (h)
		h->compare_add = add;
}

/* wr_atomic_write (IBTA 1.5): the 8 bytes at value go on the wire as they
 * lie, in the entry's compare/add field (docs/HOST-INTERFACE.md). */
static void wr_atomic_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, const void *value)
{
	struct sn_send_entry *h = begin_remote(x, IBV_WR_ATOMIC_WRITE, rkey, addr);
	if (h)
		memcpy(&h->compare_add, value, sizeof(h->compare_add));
}

/* building returns the QP whose work request a setter completes, or NULL
 * when there is none (an error came first). */
static struct sn_qp *building(struct ibv_qp_ex *x)
{
	struct sn_qp *qp = to_qp_ex(x);
	return qp->wr_entry ? qp : NULL;
}

static void wr_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct sn_qp *qp = building(x);
	if (!qp)
		return;
	if (!ah) {
		qp->wr_err = EINVAL;
		return;
	}
	qp->wr_cur.ah = sn_container_of(ah, struct sn_ah, ibv)->handle;
	qp->wr_cur.remote_qpn = remote_qpn;
	qp->wr_cur.remote_qkey = remote_qkey;
}

static void wr_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *sg)
{
	struct sn_qp *qp = building(x);
	if (!qp)
		return;
	if (n > (qp->max_send_sge ? qp->max_send_sge : 1)) {
		qp->wr_err = EINVAL;
		return;
	}
	put_sges(qp->wr_entry + sizeof(qp->wr_cur), sg, (int)n);
	qp->wr_cur.count = (uint16_t)n;
	qp->wr_cur.flags &= ~IBV_SEND_INLINE;
}

static void wr_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge sg = {.addr = addr, .length = length, .lkey = lkey};
	wr_set_sge_list(x, 1, &sg);
}

/* Inline data is copied now: the program may reuse its buffers at once. */
static void wr_set_inline_data_list(struct ibv_qp_ex *x, size_t n, const struct ibv_data_buf *bufs)
{
	struct sn_qp *qp = building(x);
	if (!qp)
		return;
	uint8_t *data = qp->wr_entry + sizeof(qp->wr_cur);
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		if (bufs[i].length > qp->max_inline - total) {
			qp->wr_err = EINVAL;
			return;
		}
		memcpy(data + total, bufs[i].addr, bufs[i].length);
		total += bufs[i].length;
	}
	qp->wr_cur.count = (uint16_t)total;
	qp->wr_cur.flags |= IBV_SEND_INLINE;
}

static void wr_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t length)
{
	struct ibv_data_buf b = {.addr = addr, .length = length};
	wr_set_inline_data_list(x, 1, &b);
}

/* The send_ops_flags each QP type takes: those its opcodes are valid for. */
#define SN_UD_SEND_OPS (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM)
#define SN_UC_SEND_OPS (SN_UD_SEND_OPS | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)
#define SN_RC_SEND_OPS                                                                                       \
	(SN_UC_SEND_OPS | IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_RDMA_READ |                          \
	 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_BIND_MW |      \
	 IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_ATOMIC_WRITE)

static uint64_t send_ops(enum ibv_qp_type type)
{
	switch (type) {
	case IBV_QPT_RC:
		return SN_RC_SEND_OPS;
	case IBV_QPT_UC:
		return SN_UC_SEND_OPS;
	case IBV_QPT_UD:
		return SN_UD_SEND_OPS;
	case IBV_QPT_RAW_PACKET:
		return IBV_QP_EX_WITH_SEND; /* whole frames */
	case IBV_QPT_XRC_SEND: /* RC's but IBTA 1.5's, which XRC does not carry */
		return SN_RC_SEND_OPS & ~(uint64_t)IBV_QP_EX_WITH_ATOMIC_WRITE;
	default:
		return 0;
	}
}

/* wr_set_xrc_srqn names the remote SRQ of an XRC send QP's work request. */
static void wr_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t remote_srqn)
{
	struct sn_qp *qp = building(x);
	if (qp)
		qp->wr_cur.remote_srqn = remote_srqn;
}

/* set_wr_ops gives the QP the ibv_wr_* operations of ops (which its type
 * takes); libibverbs' ibv_qp_to_qp_ex hands out its ibv_qp_ex once
 * VERBS_QP_EX says so. */
static void set_wr_ops(struct ibv_qp *ibqp, uint64_t ops)
{
	struct sn_qp *qp = sn_container_of(ibqp, struct sn_qp, vqp.qp);
	struct ibv_qp_ex *x = &qp->vqp.qp_ex;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	if (ibqp->qp_type == IBV_QPT_UD)
		x->wr_set_ud_addr = wr_set_ud_addr;
	if (ibqp->qp_type == IBV_QPT_XRC_SEND)
		x->wr_set_xrc_srqn = wr_set_xrc_srqn;
#define OP(flag, fn)        \
	if (ops & (flag))   \
	x->fn = fn
	OP(IBV_QP_EX_WITH_SEND, wr_send);
	OP(IBV_QP_EX_WITH_SEND_WITH_IMM, wr_send_imm);
	OP(IBV_QP_EX_WITH_SEND_WITH_INV, wr_send_inv);
	OP(IBV_QP_EX_WITH_RDMA_WRITE, wr_rdma_write);
	OP(IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, wr_rdma_write_imm);
	OP(IBV_QP_EX_WITH_RDMA_READ, wr_rdma_read);
	OP(IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, wr_atomic_cmp_swp);
	OP(IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, wr_atomic_fetch_add);
	OP(IBV_QP_EX_WITH_BIND_MW, wr_bind_mw);
	OP(IBV_QP_EX_WITH_LOCAL_INV, wr_local_inv);
	OP(IBV_QP_EX_WITH_ATOMIC_WRITE, wr_atomic_write);
#undef OP
	qp->vqp.comp_mask |= SN_VERBS_QP_EX;
}

/* sn_create_qp_wr makes a QP as sn_create_qp_for does (a CM ID's when
 * cm_id is not 0), with the ibv_wr_* operations of send_ops_flags *ops
 * when ops is not NULL; opcodes its type has no use for are EOPNOTSUPP. */
struct ibv_qp *sn_create_qp_wr(struct ibv_pd *pd, struct ibv_qp_init_attr *attr, uint32_t cm_id, const uint64_t *ops)
{
	if (ops && (*ops & ~send_ops(attr->qp_type))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct ibv_qp *ibqp = sn_create_qp_for(pd, attr, cm_id);
	if (ibqp && ops)
		set_wr_ops(ibqp, *ops);
	return ibqp;
}

/* sn_create_qp_ex makes a QP as ibv_create_qp does, with the ibv_wr_*
 * operations its send_ops_flags ask for; XRC receive QPs (xrc.c) and RSS
 * QPs (rss.c) are made apart. TSO, creation flags and opcodes the QP type
 * has no use for are not softnic's (EOPNOTSUPP). */
struct ibv_qp *sn_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr)
{
	const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	const uint32_t rss = IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_IND_TABLE;
	if (attr->qp_type == IBV_QPT_XRC_RECV)
		return sn_create_xrc_recv_qp(context, attr);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd || attr->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	if ((attr->comp_mask & rss) == rss && !(attr->comp_mask & ~(known | rss)) &&
	    !((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags))
		return sn_create_rss_qp(context, attr); /* receive side scaling (rss.c) */
	if ((attr->comp_mask & ~known) || ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct ibv_qp_init_attr a = {.qp_context = attr->qp_context, .send_cq = attr->send_cq,
				     .recv_cq = attr->recv_cq, .srq = attr->srq, .cap = attr->cap,
				     .qp_type = attr->qp_type, .sq_sig_all = attr->sq_sig_all};
	const uint64_t *send_ops = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ? &attr->send_ops_flags : NULL;
	struct ibv_qp *ibqp = sn_create_qp_wr(attr->pd, &a, 0, send_ops);
	if (ibqp)
		attr->cap = a.cap;
	return ibqp;
}
