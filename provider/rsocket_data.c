/*
 * rsocket_data.c: an rsocket's data path (rsocket_int.h). Sends write
 * into the part of the peer's receive buffer its credits gave (the target
 * SGL), each an RDMA WRITE WITH IMMEDIATE saying how many bytes; receives
 * are buffer-less, their immediates queue the byte counts, which rrecv
 * copies out of the receive buffer in order; once half the buffer is
 * free again (or half the receive queue was used) the next half goes to
 * the peer with an SGL message.
 */
#define _GNU_SOURCE
#include <byteswap.h>
#include <errno.h>
#include <time.h>
#include <stdlib.h>
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

/* rs_write_msg posts an RDMA WRITE WITH IMMEDIATE msg; its completion
 * is known by wr_data. */
int rs_write_msg(struct rsock *rs, struct ibv_sge *sgl, int nsge, uint32_t msg, int flags, uint64_t addr,
		 uint32_t rkey, uint32_t wr_data)
{
	struct ibv_send_wr wr = {
		.wr_id = wr_data,
		.sg_list = sgl,
		.num_sge = nsge,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = flags,
		.imm_data = htobe32(msg),
		.wr.rdma = {.remote_addr = addr, .rkey = rkey},
	}, *bad;
	int err = ibv_post_send(rs->id->qp, &wr, &bad);
	return err ? rs_fail(err) : 0;
}

/* rs_post_ctrl sends a zero-length control message (CTRL, or an SGL
 * message that gives no buffer). */
int rs_post_ctrl(struct rsock *rs, uint32_t msg)
{
	rs->ctrl_seqno++;
	return rs_write_msg(rs, NULL, 0, msg, 0, 0, 0, msg);
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

static int rs_ctrl_avail(struct rsock *rs)
{
	return rs->ctrl_seqno != rs->ctrl_max_seqno;
}

/* rs_send_keepalive sends CTRL KEEPALIVE when connected with a control
 * slot free (else there is traffic already to find a dead peer). */
int rs_send_keepalive(struct rsock *rs)
{
	int ret = 0;
	pthread_mutex_lock(&rs->cq_lock);
	if ((rs->state & RS_CONNECTED) && rs_ctrl_avail(rs))
		ret = rs_post_ctrl(rs, RS_MSG(RS_OP_CTRL, RS_CTRL_KEEPALIVE));
	pthread_mutex_unlock(&rs->cq_lock);
	return ret;
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

static void rs_send_done(struct rsock *rs, const struct ibv_wc *wc)
{
	uint32_t d = (uint32_t)wc->wr_id;
	switch (RS_MSG_OP(d)) {
	case RS_OP_SGL:
		rs->ctrl_max_seqno++;
		break;
	case RS_OP_CTRL:
		rs->ctrl_max_seqno++;
		if (RS_MSG_DATA(d) == RS_CTRL_DISCONNECT)
			rs->state = RS_DISCONNECTED;
		break;
	case RS_OP_IOMAP_SGL:
		rs->sqe_avail++;
		rs->sbuf_bytes_avail += sizeof(struct rs_wire_iomap);
		break;
	default: /* DATA and WRITE: their byte count */
		rs->sqe_avail++;
		rs->sbuf_bytes_avail += RS_MSG_DATA(d);
	}
	if (wc->status != IBV_WC_SUCCESS && (rs->state & RS_CONNECTED)) {
		rs->state = RS_ERROR;
		rs->err = EIO;
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

/* rs_process takes completions until ready says so; without nonblock it
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

/* The peer has room (credits, buffer, queue) for another message. */
int rs_can_send(struct rsock *rs)
{
	return rs->sqe_avail && rs->sbuf_bytes_avail >= RS_SNDLOWAT && rs->sseq_no != rs->sseq_comp &&
	       rs->target_sgl[rs->target_sge].length != 0;
}

int rs_have_data(struct rsock *rs)
{
	return rs->rmsg_head != rs->rmsg_tail;
}

int rs_conn_have_data(struct rsock *rs)
{
	return rs_have_data(rs) || !(rs->state & RS_READABLE);
}

int rs_conn_can_send(struct rsock *rs)
{
	return rs_can_send(rs) || !(rs->state & RS_WRITABLE);
}

int rs_conn_can_ctrl(struct rsock *rs)
{
	return rs_ctrl_avail(rs) || !(rs->state & RS_CONNECTED);
}

int rs_all_sends_done(struct rsock *rs)
{
	return (int)(rs->ctrl_max_seqno - rs->ctrl_seqno) + rs->sqe_avail == rs->sq_size ||
	       !(rs->state & RS_CONNECTED);
}

/* rs_take_target takes len bytes of the current target SGE: where the
 * next DATA message goes. */
static void rs_take_target(struct rsock *rs, uint32_t len, uint64_t *addr, uint32_t *key)
{
	volatile struct rs_wire_sge *t = &rs->target_sgl[rs->target_sge];
	*addr = t->addr;
	*key = t->key;
	t->addr += len;
	t->length -= len;
	if (!t->length && ++rs->target_sge == RS_SGL_ENTRIES)
		rs->target_sge = 0;
}

static uint32_t rs_sbuf_left(struct rsock *rs)
{
	return (uint32_t)((uintptr_t)&rs->sbuf[rs->sbuf_size] - rs->ssgl[0].addr);
}

/* rs_stage makes the gather list for len bytes of buf: inline (buf
 * itself, within the inline size), or copied into the send ring, in two
 * pieces where it wraps. It returns the number of SGEs in sgl. */
int rs_stage(struct rsock *rs, const void *buf, uint32_t len, struct ibv_sge *sgl, int *flags)
{
	const uint8_t *b = buf;
	*flags = 0;
	if (len <= rs->sq_inline) {
		*sgl = (struct ibv_sge){.addr = (uintptr_t)b, .length = len};
		*flags = IBV_SEND_INLINE;
		return 1;
	}
	uint32_t left = rs_sbuf_left(rs);
	uint32_t lkey = rs->smr->lkey;
	if (len <= left) {
		memcpy((void *)(uintptr_t)rs->ssgl[0].addr, b, len);
		sgl[0] = (struct ibv_sge){.addr = rs->ssgl[0].addr, .length = len, .lkey = lkey};
		rs->ssgl[0].addr = len < left ? rs->ssgl[0].addr + len : (uintptr_t)rs->sbuf;
		return 1;
	}
	memcpy((void *)(uintptr_t)rs->ssgl[0].addr, b, left);
	memcpy(rs->sbuf, b + left, len - left);
	sgl[0] = (struct ibv_sge){.addr = rs->ssgl[0].addr, .length = left, .lkey = lkey};
	sgl[1] = (struct ibv_sge){.addr = (uintptr_t)rs->sbuf, .length = len - left, .lkey = lkey};
	rs->ssgl[0].addr = (uintptr_t)rs->sbuf + (len - left);
	return 2;
}

/* rs_send_one sends xfer bytes of buf as a DATA message. */
static int rs_send_one(struct rsock *rs, const uint8_t *buf, uint32_t xfer)
{
	struct ibv_sge sgl[2];
	int flags, n = rs_stage(rs, buf, xfer, sgl, &flags);
	uint64_t addr;
	uint32_t key;
	rs_take_target(rs, xfer, &addr, &key);
	rs->sseq_no++;
	rs->sqe_avail--;
	rs->sbuf_bytes_avail -= xfer;
	uint32_t msg = RS_MSG(RS_OP_DATA, xfer);
	return rs_write_msg(rs, sgl, n, msg, flags, addr, key, msg);
}

/* rs_sendv sends the bytes of iov, in messages that start at 2 KiB and
 * double up to 64 KiB, as the peer's buffer and credits allow. */
static ssize_t rs_sendv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags)
{
	size_t len = 0, done = 0;
	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	if (rs_opened(rs))
		return -1;
	if (!(rs->state & RS_CONNECTED))
		return rs_fail(rs->state == RS_DISCONNECTED ? EPIPE : ENOTCONN);
	int ret = 0, vi = 0;
	size_t voff = 0;
	uint32_t olen = RS_OLAP_START;
	uint8_t *tmp = NULL;
	pthread_mutex_lock(&rs->slock);
	if (rs->iomap_pending && (ret = rs_send_iomaps(rs, rs_nonblock(rs, flags))))
		goto out;
	while (done < len) {
		if (!rs_can_send(rs)) {
			if ((ret = rs_process(rs, rs_nonblock(rs, flags), rs_conn_can_send)))
				break;
			if (!(rs->state & RS_WRITABLE)) {
				ret = rs_fail(ECONNRESET);
				break;
			}
		}
		uint32_t xfer = len - done > olen ? olen : len - done;
		if (olen < RS_MAX_TRANSFER && len - done > olen)
			olen <<= 1;
		if (xfer > (uint32_t)rs->sbuf_bytes_avail)
			xfer = rs->sbuf_bytes_avail;
		if (xfer > rs->target_sgl[rs->target_sge].length)
			xfer = rs->target_sgl[rs->target_sge].length;
		const uint8_t *src;
		if (iov[vi].iov_len - voff >= xfer) {
			src = (const uint8_t *)iov[vi].iov_base + voff;
			voff += xfer;
		} else { /* gather across vectors */
			if (!tmp && !(tmp = malloc(RS_MAX_TRANSFER > rs->sbuf_size ? RS_MAX_TRANSFER : rs->sbuf_size))) {
				ret = rs_fail(ENOMEM);
				break;
			}
			for (uint32_t got = 0; got < xfer;) {
				size_t n = iov[vi].iov_len - voff;
				if (n > xfer - got)
					n = xfer - got;
				memcpy(tmp + got, (const uint8_t *)iov[vi].iov_base + voff, n);
				got += n;
				voff += n;
				if (voff == iov[vi].iov_len && got < xfer) {
					vi++;
					voff = 0;
				}
			}
			src = tmp;
		}
		while (vi < iovcnt - 1 && voff == iov[vi].iov_len) {
			vi++;
			voff = 0;
		}
		if ((ret = rs_send_one(rs, src, xfer)))
			break;
		done += xfer;
	}
out:
	pthread_mutex_unlock(&rs->slock);
	free(tmp);
	return ret && !done ? ret : (ssize_t)done;
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

CM_EXPORT ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
	struct rsock *rs = rs_get(socket);
	struct iovec v = {.iov_base = (void *)buf, .iov_len = len};
	if (rs && rs->ds)
		return ds_sendv(rs, &v, 1, flags, NULL, 0);
	return rs ? rs_sendv(rs, &v, 1, flags) : rs_fail(EBADF);
}

CM_EXPORT ssize_t rsendto(int socket, const void *buf, size_t len, int flags, const struct sockaddr *dest_addr,
			  socklen_t addrlen)
{
	struct rsock *rs = rs_get(socket);
	if (!rs)
		return rs_fail(EBADF);
	if (rs->ds) {
		struct iovec v = {.iov_base = (void *)buf, .iov_len = len};
		return ds_sendv(rs, &v, 1, flags, dest_addr, addrlen);
	}
	if (dest_addr)
		return rs_fail(EISCONN);
	return rsend(socket, buf, len, flags);
}

CM_EXPORT ssize_t rwrite(int socket, const void *buf, size_t count)
{
	return rsend(socket, buf, count, 0);
}

CM_EXPORT ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
	struct rsock *rs = rs_get(socket);
	if (rs && rs->ds)
		return ds_sendv(rs, iov, iovcnt, 0, NULL, 0);
	return rs ? rs_sendv(rs, iov, iovcnt, 0) : rs_fail(EBADF);
}

CM_EXPORT ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen)
		return rs_fail(ENOTSUP);
	struct rsock *rs = rs_get(socket);
	if (rs && rs->ds)
		return ds_sendv(rs, msg->msg_iov, msg->msg_iovlen, flags, msg->msg_name, msg->msg_namelen);
	return rs ? rs_sendv(rs, msg->msg_iov, msg->msg_iovlen, flags) : rs_fail(EBADF);
}
