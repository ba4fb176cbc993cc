/*
 * rsocket_send.c: a stream rsocket's send half (rsocket_int.h). Sends
 * write into the part of the peer's receive buffer its credits gave (the
 * target SGL), each an RDMA WRITE WITH IMMEDIATE saying how many bytes,
 * from the send ring or inline. Control messages (CTRL, and the SGL
 * messages that give the peer credits) take one of RS_CTRL_SLOTS send
 * queue entries kept for them rather than the peer's credits.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include <rdma/rsocket.h>

#include "rdmacm.h"
#include "rsocket_int.h"

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

int rs_ctrl_avail(struct rsock *rs)
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

void rs_send_done(struct rsock *rs, const struct ibv_wc *wc)
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

/* The peer has room (credits, buffer, queue) for another message. */
int rs_can_send(struct rsock *rs)
{
	return rs->sqe_avail && rs->sbuf_bytes_avail >= RS_SNDLOWAT && rs->sseq_no != rs->sseq_comp &&
	       rs->target_sgl[rs->target_sge].length != 0;
}

int rs_conn_can_send(struct rsock *rs)
{
	return rs_can_send(rs) || !(rs->state & RS_WRITABLE);
}

/* rs_wait_send waits (or, nonblock, looks once) until the peer has room
 * for another message; 0 when it has, else the error to return. */
int rs_wait_send(struct rsock *rs, int nonblock)
{
	int ret;
	if (rs_can_send(rs))
		return 0;
	if ((ret = rs_process(rs, nonblock, rs_conn_can_send)))
		return ret;
	return rs->state & RS_WRITABLE ? 0 : rs_fail(ECONNRESET);
}

/* rs_next_xfer is the size of the next message of a send with left bytes
 * to go: it starts at RS_OLAP_START and doubles up to RS_MAX_TRANSFER, so
 * that the first bytes reach the peer early, and fits the send buffer. */
uint32_t rs_next_xfer(struct rsock *rs, uint32_t *olen, size_t left)
{
	uint32_t xfer = left > *olen ? *olen : (uint32_t)left;
	if (*olen < RS_MAX_TRANSFER && left > *olen)
		*olen <<= 1;
	if (xfer > (uint32_t)rs->sbuf_bytes_avail)
		xfer = rs->sbuf_bytes_avail;
	return xfer;
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
		if ((ret = rs_wait_send(rs, rs_nonblock(rs, flags))))
			break;
		uint32_t xfer = rs_next_xfer(rs, &olen, len - done);
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
