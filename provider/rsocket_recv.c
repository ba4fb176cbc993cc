/*
 * rsocket_recv.c: a stream rsocket's receive half (rsocket_int.h).
 * Receives are buffer-less: their immediates queue the byte counts the
 * peer wrote into the receive buffer, which rrecv copies out in order;
 * once half the buffer is free again (or half the receive queue was
 * used) the next half goes to the peer with an SGL message, its credits.
 * The completion loop that sends and receives both wait in (rs_process)
 * is here too: every completion comes on the one CQ, and what a blocked
 * sender waits for, credits, arrives as receives.
 */
#define _GNU_SOURCE
#include <byteswap.h>
#include <errno.h>
#include <time.h>
#include <string.h>
#include <sys/uio.h>

#include <rdma/rsocket.h>

#include "rdmacm.h"
#include "rsocket_int.h"

int rs_post_recv(struct rsock *rs)
{
	struct ibv_recv_wr wr = {.wr_id = RS_WR_RECV}, *bad;
	int err = ibv_post_recv(rs->id->qp, &wr, &bad);
	return err ? rs_fail(err) : 0;
}

static void *rs_ctrl_buf(struct rsock *rs)
{
	return rs->sbuf + rs->sbuf_size + sizeof(struct rs_wire_sge) * (rs->ctrl_seqno & (RS_CTRL_SLOTS - 1));
}

/* rs_send_credits lets the peer send up to rseq_no + rq_size messages,
 * and with a free half of the receive buffer, gives it that half. */
static void rs_send_credits(struct rsock *rs)
{
	uint32_t msg = RS_MSG(RS_OP_SGL, (uint16_t)(rs->rseq_no + rs->rq_size));
	rs->rseq_comp = rs->rseq_no + rs->rq_size / 2;
	if (rs->rbuf_bytes_avail < (int)rs->rbuf_size / 2) {
		rs_post_ctrl(rs, msg);
		return;
	}
	struct rs_wire_sge sge = {
		.addr = (uintptr_t)&rs->rbuf[rs->rbuf_free_offset],
		.key = rs->rmr->rkey,
		.length = rs->rbuf_size / 2,
	};
	if (rs->swap_sgl) {
		sge.addr = bswap_64(sge.addr);
		sge.key = bswap_32(sge.key);
		sge.length = bswap_32(sge.length);
	}
	struct ibv_sge ib = {.addr = (uintptr_t)&sge, .length = sizeof(sge)};
	int flags = IBV_SEND_INLINE;
	if (rs->sq_inline < sizeof(sge)) {
		void *buf = rs_ctrl_buf(rs);
		memcpy(buf, &sge, sizeof(sge));
		ib.addr = (uintptr_t)buf;
		ib.lkey = rs->smr->lkey;
		flags = 0;
	}
	rs->ctrl_seqno++;
	rs_write_msg(rs, &ib, 1, msg, flags, rs->remote_sgl.addr + rs->remote_sge * sizeof(struct rs_wire_sge),
		     rs->remote_sgl.key, msg);
	rs->rbuf_bytes_avail -= rs->rbuf_size / 2;
	rs->rbuf_free_offset += rs->rbuf_size / 2;
	if (rs->rbuf_free_offset >= (int)rs->rbuf_size)
		rs->rbuf_free_offset = 0;
	if (++rs->remote_sge == (int)rs->remote_sgl.length)
		rs->remote_sge = 0;
}

static void rs_update_credits(struct rsock *rs)
{
	if ((rs->rbuf_bytes_avail >= (int)rs->rbuf_size / 2 || (int16_t)(rs->rseq_no - rs->rseq_comp) >= 0) &&
	    rs_ctrl_avail(rs) && (rs->state & RS_CONNECTED))
		rs_send_credits(rs);
}

static void rs_recv_msg(struct rsock *rs, uint32_t msg)
{
	switch (RS_MSG_OP(msg)) {
	case RS_OP_SGL:
		rs->sseq_comp = (uint16_t)RS_MSG_DATA(msg);
		break;
	case RS_OP_IOMAP_SGL:
	case RS_OP_WRITE:
		break; /* the write put the entry in place */
	case RS_OP_CTRL:
		if (RS_MSG_DATA(msg) == RS_CTRL_DISCONNECT)
			rs->state = RS_DISCONNECTED;
		else if (RS_MSG_DATA(msg) == RS_CTRL_SHUTDOWN)
			rs->state = rs->state & RS_WRITABLE ? rs->state & ~RS_READABLE : RS_DISCONNECTED;
		break;
	default:
		rs->rmsg[rs->rmsg_tail].op = RS_MSG_OP(msg);
		rs->rmsg[rs->rmsg_tail].data = RS_MSG_DATA(msg);
		if (++rs->rmsg_tail == rs->rq_size + 1)
			rs->rmsg_tail = 0;
	}
}

/* rs_poll_cq takes every completion and reposts the receives used. */
static int rs_poll_cq(struct rsock *rs)
{
	struct ibv_wc wc;
	int n, used = 0;
	while ((n = ibv_poll_cq(rs->id->recv_cq, 1, &wc)) > 0) {
		if (!(wc.wr_id & RS_WR_RECV)) {
			rs_send_done(rs, &wc);
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS)
			continue; /* flushed: the connection is going */
		used++;
		if (wc.wc_flags & IBV_WC_WITH_IMM)
			rs_recv_msg(rs, be32toh(wc.imm_data));
		if (rs->state == RS_DISCONNECTED)
			return 0;
	}
	if (n < 0)
		return rs_fail(EIO);
	int ret = 0;
	while ((rs->state & RS_CONNECTED) && !ret && used--)
		if ((ret = rs_post_recv(rs))) {
			rs->state = RS_ERROR;
			rs->err = errno;
		}
	return ret;
}

/* rs_take_cq_event takes the channel's event for the armed CQ. */
int rs_take_cq_event(struct rsock *rs)
{
	struct ibv_cq *cq;
	void *ctx;
	if (!rs->cq_armed)
		return 0;
	if (ibv_get_cq_event(rs->id->recv_cq_channel, &cq, &ctx)) {
		if (errno != EAGAIN && errno != EINTR)
			rs->state = RS_ERROR;
		return -1;
	}
	rs->cq_armed = 0;
	if (++rs->unack_cqe >= rs->sq_size + rs->rq_size) {
		ibv_ack_cq_events(rs->id->recv_cq, rs->unack_cqe);
		rs->unack_cqe = 0;
	}
	return 0;
}

/* rs_process_cq takes completions until ready says so; without nonblock it
 * sleeps on the completion channel, one thread at a time (a send waiting
 * for credits must not keep a receive from seeing them arrive). */
static int rs_process_cq(struct rsock *rs, int nonblock, int (*ready)(struct rsock *rs))
{
	int ret;
	pthread_mutex_lock(&rs->cq_lock);
	for (;;) {
		rs_update_credits(rs);
		ret = rs_poll_cq(rs);
		if (ready(rs)) {
			ret = 0;
			break;
		}
		if (ret)
			break;
		if (nonblock) {
			ret = rs_fail(EWOULDBLOCK);
			break;
		}
		if (!rs->cq_armed) {
			ibv_req_notify_cq(rs->id->recv_cq, 0);
			rs->cq_armed = 1;
			continue; /* what came before arming */
		}
		rs_update_credits(rs);
		pthread_mutex_lock(&rs->wait_lock);
		pthread_mutex_unlock(&rs->cq_lock);
		ret = rs_take_cq_event(rs);
		pthread_mutex_unlock(&rs->wait_lock);
		pthread_mutex_lock(&rs->cq_lock);
		if (ret && errno != EINTR && errno != EAGAIN)
			break;
	}
	rs_update_credits(rs);
	pthread_mutex_unlock(&rs->cq_lock);
	return ret;
}

static uint64_t rs_now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000 + (uint64_t)t.tv_nsec / 1000;
}

/* rs_process takes completions until ready says so; a blocking call polls
 * for polling_time µs (/etc/rdma/rsocket) before it sleeps on the CQ's
 * channel, as rdma-core's rs_get_comp: a reply that comes within it costs
 * no sleep and wake-up. */
int rs_process(struct rsock *rs, int nonblock, int (*ready)(struct rsock *rs))
{
	uint64_t start = 0;
	for (;;) {
		int ret = rs_process_cq(rs, 1, ready);
		if (!ret || nonblock || errno != EWOULDBLOCK)
			return ret;
		uint64_t now = rs_now_us();
		if (!start)
			start = now;
		if (now - start > rs_conf.polling_time)
			return rs_process_cq(rs, 0, ready);
	}
}

int rs_have_data(struct rsock *rs)
{
	return rs->rmsg_head != rs->rmsg_tail;
}

int rs_conn_have_data(struct rsock *rs)
{
	return rs_have_data(rs) || !(rs->state & RS_READABLE);
}

/* rs_copy_out copies up to len received bytes, in order, and frees their
 * room; peek leaves them. */
static size_t rs_copy_out(struct rsock *rs, uint8_t *buf, size_t len, int peek)
{
	int head = rs->rmsg_head, off = rs->rbuf_offset;
	size_t left = len;
	while (left && head != rs->rmsg_tail) {
		uint32_t n = rs->rmsg[head].data;
		int whole = left >= n;
		if (!whole)
			n = left;
		for (uint32_t c = n; c;) {
			uint32_t end = rs->rbuf_size - off, k = c < end ? c : end;
			memcpy(buf, &rs->rbuf[off], k);
			buf += k;
			c -= k;
			off = (off + k) % rs->rbuf_size;
			if (!peek)
				rs->rbuf_bytes_avail += k;
		}
		left -= n;
		if (peek) {
			if (whole && ++head == rs->rq_size + 1)
				head = 0;
			continue;
		}
		if (whole) {
			rs->rseq_no++;
			if (++head == rs->rq_size + 1)
				head = 0;
		} else
			rs->rmsg[head].data -= n;
	}
	if (!peek) {
		rs->rmsg_head = head;
		rs->rbuf_offset = off;
	}
	return len - left;
}

/* rs_recv gives what was received; 0 once the peer shut down and all was
 * read (the data queued before still comes). */
static ssize_t rs_recv(struct rsock *rs, void *buf, size_t len, int flags)
{
	if (rs_opened(rs))
		return -1;
	if (!(rs->state & (RS_CONNECTED | RS_DISCONNECTED | RS_ERROR)))
		return rs_fail(ENOTCONN);
	size_t got = 0;
	int ret = 0;
	pthread_mutex_lock(&rs->rlock);
	do {
		if (!rs_have_data(rs) && (ret = rs_process(rs, rs_nonblock(rs, flags), rs_conn_have_data)))
			break;
		if (flags & MSG_PEEK) {
			got = rs_copy_out(rs, buf, len, 1);
			break;
		}
		pthread_mutex_lock(&rs->cq_lock);
		got += rs_copy_out(rs, (uint8_t *)buf + got, len - got, 0);
		pthread_mutex_unlock(&rs->cq_lock);
	} while (got < len && (flags & MSG_WAITALL) && (rs->state & RS_READABLE));
	pthread_mutex_unlock(&rs->rlock);
	if (ret && !got)
		return rs->state == RS_ERROR && errno != EWOULDBLOCK ? rs_fail(rs->err ? rs->err : EIO) : ret;
	return got;
}

CM_EXPORT ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	struct rsock *rs = rs_get(socket);
	if (rs && rs->ds)
		return ds_recvfrom(rs, buf, len, flags, NULL, NULL);
	return rs ? rs_recv(rs, buf, len, flags) : rs_fail(EBADF);
}

CM_EXPORT ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags, struct sockaddr *src_addr, socklen_t *addrlen)
{
	struct rsock *rs = rs_get(socket);
	if (rs && rs->ds)
		return ds_recvfrom(rs, buf, len, flags, src_addr, addrlen);
	ssize_t n = rrecv(socket, buf, len, flags);
	if (n > 0 && src_addr)
		rgetpeername(socket, src_addr, addrlen);
	return n;
}

CM_EXPORT ssize_t rread(int socket, void *buf, size_t count)
{
	return rrecv(socket, buf, count, 0);
}

/* Vectors are filled in turn until one is left short. */
static ssize_t rs_recvv(int socket, const struct iovec *iov, int iovcnt, int flags)
{
	ssize_t total = 0;
	for (int i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_len)
			continue;
		ssize_t n = rrecv(socket, iov[i].iov_base, iov[i].iov_len, total ? flags | MSG_DONTWAIT : flags);
		if (n < 0)
			return total ? total : n;
		total += n;
		if ((size_t)n < iov[i].iov_len)
			break;
	}
	return total;
}

CM_EXPORT ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
	return rs_recvv(socket, iov, iovcnt, 0);
}

CM_EXPORT ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen)
		return rs_fail(ENOTSUP);
	return rs_recvv(socket, msg->msg_iov, msg->msg_iovlen, flags);
}
