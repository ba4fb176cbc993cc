/*
 * datapath.c: posting and polling, through the shared rings only. A post
 * writes entries, publishes the producer index (release) and rings the
 * session's doorbell word; a poll reads entries whose sequence (acquire)
 * says they are written. Neither makes a system call while the daemon
 * polls; a post writes the doorbell eventfd only when the daemon sleeps.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "ring.h"

/* The ibv_send_flags an entry carries: FENCE, SIGNALED, SOLICITED, INLINE. */
#define SN_SEND_FLAGS (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE)

/* put_inline copies the SGEs' bytes into the entry; -1 if they exceed max. */
static int put_inline(uint8_t *data, const struct ibv_send_wr *wr, uint32_t max)
{
	uint32_t n = 0;
	for (int i = 0; i < wr->num_sge; i++) {
		uint32_t len = wr->sg_list[i].length;
		if (len > max - n)
			return -1;
		memcpy(data + n, (const void *)(uintptr_t)wr->sg_list[i].addr, len);
		n += len;
	}
	return n;
}

/* encode_send writes wr into entry e of qp's send queue; 0 or an errno. */
static int encode_send(struct sn_qp *qp, uint8_t *e, const struct ibv_send_wr *wr)
{
	struct sn_send_entry h = {.wr_id = wr->wr_id, .opcode = wr->opcode, .flags = wr->send_flags & SN_SEND_FLAGS};
	uint8_t *data = e + sizeof(h);
	if (wr->opcode > IBV_WR_SEND_WITH_INV)
		return EINVAL; /* TSO and the drivers' own: softnic has none */
	if (qp->sig_all)
		h.flags |= IBV_SEND_SIGNALED;
	if (h.flags & IBV_SEND_INLINE) {
		int n = put_inline(data, wr, qp->max_inline);
		if (n < 0)
			return EINVAL;
		h.count = n;
	} else {
		uint32_t max = qp->max_send_sge ? qp->max_send_sge : 1;
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > max)
			return EINVAL;
		put_sges(data, wr->sg_list, wr->num_sge);
		h.count = wr->num_sge;
	}
	switch (wr->opcode) {
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_LOCAL_INV:
		h.imm = wr->invalidate_rkey;
		break;
	case IBV_WR_BIND_MW:
		if (h.count || (!wr->bind_mw.bind_info.mr && wr->bind_mw.bind_info.length))
			return EINVAL;
		sn_put_bind(&h, wr->bind_mw.rkey, &wr->bind_mw.bind_info);
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_SEND_WITH_IMM:
		memcpy(&h.imm, &wr->imm_data, 4); /* stays in network order */
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		h.remote_addr = wr->wr.atomic.remote_addr;
		h.rkey = wr->wr.atomic.rkey;
		h.compare_add = wr->wr.atomic.compare_add;
		h.swap = wr->wr.atomic.swap;
		break;
	default:
		break;
	}
	if (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
	    wr->opcode == IBV_WR_RDMA_READ) {
		h.remote_addr = wr->wr.rdma.remote_addr;
		h.rkey = wr->wr.rdma.rkey;
	}
	if (qp->vqp.qp.qp_type == IBV_QPT_XRC_SEND)
		h.remote_srqn = wr->qp_type.xrc.remote_srqn;
	if (qp->vqp.qp.qp_type == IBV_QPT_UD) {
		if (!wr->wr.ud.ah)
			return EINVAL;
		h.ah = sn_container_of(wr->wr.ud.ah, struct sn_ah, ibv)->handle;
		h.remote_qpn = wr->wr.ud.remote_qpn;
		h.remote_qkey = wr->wr.ud.remote_qkey;
	}
	memcpy(e, &h, sizeof(h));
	return 0;
}

int sn_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct sn_qp *qp = sn_container_of(ibqp, struct sn_qp, vqp.qp);
	struct sn_wq *sq = &qp->sq;
	int err = 0;
	if (sn_daemon_gone(to_ctx(ibqp->context), 0)) {
		*bad = wr;
		return EIO;
	}
	/* An XRC receive QP has no send queue: its ring takes no posts. */
	if (sn_send_refused(qp) || ibqp->qp_type == IBV_QPT_XRC_RECV) {
		*bad = wr;
		return EINVAL;
	}
	pthread_spin_lock(&sq->lock);
	for (; wr; wr = wr->next) {
		uint8_t *e = next_entry(sq);
		if (!e) {
			err = ENOMEM;
			break;
		}
		if ((err = encode_send(qp, e, wr)) != 0)
			break;
		sq->next++;
	}
	store_release(sq->ring + SN_WQ_PRODUCER, sq->next);
	pthread_spin_unlock(&sq->lock);
	sn_ring_doorbell(to_ctx(ibqp->context));
	if (err)
		*bad = wr;
	return err;
}

/* post_recvs fills receive entries of wq from the list wr; 0 or an errno,
 * with *bad the first request not posted. */
static int post_recvs(struct sn_context *ctx, struct sn_wq *wq, uint32_t max_sge, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad)
{
	int err = 0;
	if (sn_daemon_gone(ctx, 0)) {
		*bad = wr;
		return EIO;
	}
	if (max_sge == 0)
		max_sge = 1;
	pthread_spin_lock(&wq->lock);
	for (; wr; wr = wr->next) {
		uint8_t *e = next_entry(wq);
		if (!e) {
			err = ENOMEM;
			break;
		}
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge) {
			err = EINVAL;
			break;
		}
		struct sn_recv_entry h = {.wr_id = wr->wr_id, .count = wr->num_sge};
		memcpy(e, &h, sizeof(h));
		put_sges(e + sizeof(h), wr->sg_list, wr->num_sge);
		wq->next++;
	}
	store_release(wq->ring + SN_WQ_PRODUCER, wq->next);
	pthread_spin_unlock(&wq->lock);
	sn_ring_doorbell(ctx);
	if (err)
		*bad = wr;
	return err;
}

int sn_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct sn_qp *qp = sn_container_of(ibqp, struct sn_qp, vqp.qp);
	if (!qp->has_rq) {
		*bad = wr;
		return EINVAL; /* its receives go to the SRQ */
	}
	if (sn_recv_refused(qp)) {
		*bad = wr;
		return EINVAL;
	}
	return post_recvs(to_ctx(ibqp->context), &qp->rq, qp->max_recv_sge, wr, bad);
}

int sn_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct sn_srq *srq = sn_container_of(ibsrq, struct sn_srq, ibv);
	return post_recvs(to_ctx(ibsrq->context), &srq->wq, srq->max_sge, wr, bad);
}

static void decode_wc(const struct sn_cq_entry *e, struct ibv_wc *wc)
{
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = e->wr_id;
	wc->status = e->status;
	wc->opcode = e->opcode;
	wc->byte_len = e->byte_len;
	if (e->flags & IBV_WC_WITH_INV)
		wc->invalidated_rkey = e->imm;
	else
		memcpy(&wc->imm_data, &e->imm, 4); /* network order, as stored */
	wc->qp_num = e->qpn;
	wc->src_qp = e->src_qp;
	wc->wc_flags = e->flags;
	wc->pkey_index = e->pkey_index;
	wc->slid = e->slid;
	wc->sl = e->sl;
	wc->dlid_path_bits = e->dlid_path_bits;
}

/*
 * A program that spins on an empty CQ competes for the CPU with the
 * daemon's engine, which must run for the completion to come: on a host
 * with fewer cores than spinning threads, the scheduler's time slice (a
 * few milliseconds) becomes the latency. After this many empty polls in a
 * row, a poll yields the CPU once; polls that find completions never do.
 */
#define SN_POLLS_BEFORE_YIELD 256

/* sn_poll_cq takes up to n completions. A CQ the daemon marked overrun
 * fails once it is empty, as a kernel CQ in error does, and so does one
 * whose daemon is gone (looked at while the program idles on it). */
int sn_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct sn_cq *cq = sn_container_of(ibcq, struct sn_cq, ibv);
	int got = 0;
	pthread_spin_lock(&cq->lock);
	while (got < n) {
		const uint8_t *e = cq_entry(cq);
		if (!e)
			break;
		struct sn_cq_entry entry;
		memcpy(&entry, e, sizeof(entry));
		decode_wc(&entry, &wc[got++]);
		cq->next++;
	}
	if (got)
		store_release(cq->ring + SN_CQ_CONSUMER, cq->next);
	pthread_spin_unlock(&cq->lock);
	if (got) {
		cq->empty_polls = 0;
		return got;
	}
	return sn_cq_empty(cq) ? -1 : 0;
}

/* sn_cq_empty counts a poll that found cq empty, yielding the CPU at every
 * SN_POLLS_BEFORE_YIELD-th; it returns an errno when no completion will
 * come: the daemon marked the CQ overrun, or is gone. */
int sn_cq_empty(struct sn_cq *cq)
{
	if (load_acquire(cq->ring + SN_CQ_OVERRUN))
		return EIO;
	if (++cq->empty_polls % SN_POLLS_BEFORE_YIELD == 0) {
		/* Ask the socket whether the daemon is gone at every 16th yield
		 * only: a poll() beside each sched_yield doubled an idle
		 * poller's system calls. */
		int look = cq->empty_polls % (16 * SN_POLLS_BEFORE_YIELD) == 0;
		if (sn_daemon_gone(to_ctx(cq->ibv.context), look))
			return EIO; /* nothing more will come */
		sched_yield();
	}
	return 0;
}

/*
 * sn_req_notify_cq arms the CQ. The store is sequentially consistent (a
 * full fence): the daemon publishes an entry and then loads armed, the
 * program stores armed and then polls, so each side must see the other's
 * store or its own load may pass it (store-load reordering, which x86
 * does). With the fence, a completion the program's next poll misses is
 * one the daemon sees armed for, and it writes the channel.
 */
int sn_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct sn_cq *cq = sn_container_of(ibcq, struct sn_cq, ibv);
	__atomic_store_n((uint32_t *)(cq->ring + SN_CQ_ARMED), solicited_only ? SN_ARM_SOLICITED : SN_ARM_NEXT,
			 __ATOMIC_SEQ_CST);
	return 0;
}
