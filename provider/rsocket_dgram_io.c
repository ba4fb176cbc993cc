/*
 * rsocket_dgram_io.c: datagram rsockets' sending and receiving: over
 * UDP until a peer's QPN is known, then over UD; progress by polling the
 * CQs and reading the UDP socket, sleeping on the epoll set.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <rdma/rsocket.h>

#include "rdmacm.h"
#include "rsocket_dgram.h"

/* ds_send_udp sends over the UDP socket, after its header, what iov has
 * (nothing for CTRL). */
static ssize_t ds_send_udp(struct rsock *rs, struct ds_dest *d, const struct iovec *iov, int iovcnt, int flags,
			   uint8_t op)
{
	if (iovcnt > 8)
		return rs_fail(EMSGSIZE);
	const struct ds_wire_hdr *qh = &d->qp->hdr;
	struct ds_wire_udp h = {.tag = htobe32(DS_UDP_TAG),
				.version = qh->version,
				.op = op,
				.length = qh->version == 4 ? DS_UDP4 : DS_UDP6,
				.qpn = htobe32(d->qp->id->qp->qp_num & 0xffffff)};
	if (qh->version == 4)
		h.addr.ipv4 = qh->addr.ipv4;
	else
		memcpy(h.addr.ipv6, qh->addr.ipv6.addr, 16);
	struct iovec v[9] = {{.iov_base = &h, .iov_len = h.length}};
	for (int i = 0; i < iovcnt; i++)
		v[i + 1] = iov[i];
	struct msghdr m = {.msg_name = &d->addr, .msg_namelen = ds_addrlen(&d->addr.sa), .msg_iov = v,
			   .msg_iovlen = iovcnt + 1};
	ssize_t n = sendmsg(rs->fd, &m, (flags & MSG_DONTWAIT) | MSG_NOSIGNAL);
	return n < 0 ? n : n - h.length;
}

void ds_step(const struct rsock *rs, int *i)
{
	if (++*i == rs->rq_size + 1)
		*i = 0;
}

/* ds_queue takes a received datagram (its header first) into the ring,
 * or reports there is no room: then it is dropped, as UDP would. */
static int ds_queue(struct rsock *rs, struct ds_qp *qp, uint32_t offset, uint32_t length, uint8_t *copy)
{
	struct ds_sock *ds = rs->ds;
	if (!ds->rqe_avail)
		return 0;
	ds->rqe_avail--;
	ds->msgs[ds->tail] = (struct ds_msg){.qp = qp, .offset = offset, .length = length, .copy = copy};
	ds_step(rs, &ds->tail);
	return 1;
}

/* ds_poll_cqs takes every QP's completions: receives with a valid header
 * are queued (the others, and those without room, posted again), sends
 * give their slot back. */
static void ds_poll_cqs(struct rsock *rs)
{
	struct ds_sock *ds = rs->ds;
	struct ibv_wc wc[16];
	for (struct ds_qp *qp = ds->qps; qp; qp = qp->next) {
		int n;
		do {
			n = ibv_poll_cq(qp->id->recv_cq, 16, wc);
			for (int i = 0; i < n; i++) {
				if (!(wc[i].wr_id & RS_WR_RECV)) {
					ds->free_slots[ds->nfree++] = (int)wc[i].wr_id;
					continue;
				}
				uint32_t off = (uint32_t)wc[i].wr_id, len = wc[i].byte_len - DS_GRH;
				if (wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len >= DS_GRH &&
				    ds_valid_hdr((const void *)(qp->rbuf + off), len) && ds_queue(rs, qp, off, len, NULL))
					continue;
				if (wc[i].status != IBV_WC_WR_FLUSH_ERR)
					ds_post_recv(rs, qp, off);
			}
		} while (n == 16);
	}
}

/* ds_udp_one takes a datagram the UDP socket received from a peer: it
 * learns the peer's QPN (an address handle to it), answers DATA with
 * CTRL (our QPN), and queues DATA's datagram with the peer's address. */
static void ds_udp_one(struct rsock *rs, uint8_t *buf, size_t n, const union ds_addr *from)
{
	const struct ds_wire_udp *h = (const void *)buf;
	if (n < DS_UDP4 || be32toh(h->tag) != DS_UDP_TAG || n < h->length)
		return;
	if (!((h->version == 4 && from->sa.sa_family == AF_INET && h->length == DS_UDP4) ||
	      (h->version == 6 && from->sa.sa_family == AF_INET6 && h->length == DS_UDP6)))
		return;
	uint32_t qpn = be32toh(h->qpn) & 0xffffff;
	struct ds_dest *d = ds_get_dest(rs, &from->sa, sizeof(*from));
	if (!d)
		return;
	if (h->op == RS_OP_DATA)
		ds_send_udp(rs, d, NULL, 0, MSG_DONTWAIT, RS_OP_CTRL);
	if (!d->ah || d->qpn != qpn)
		ds_set_ah(d, qpn);
	if (h->op != RS_OP_DATA)
		return;
	struct ds_wire_hdr hdr;
	ds_format_hdr(&hdr, from);
	size_t len = n - h->length;
	uint8_t *copy = malloc(hdr.length + len);
	if (!copy)
		return;
	memcpy(copy, &hdr, hdr.length);
	memcpy(copy + hdr.length, buf + h->length, len);
	if (!ds_queue(rs, NULL, 0, hdr.length + len, copy))
		free(copy);
}

/* ds_udp_input reads what the UDP socket holds, a bounded number. */
static void ds_udp_input(struct rsock *rs)
{
	uint8_t buf[RS_SNDLOWAT + DS_UDP6];
	for (int i = 0; i < 64; i++) {
		union ds_addr from;
		socklen_t flen = sizeof(from);
		ssize_t n = recvfrom(rs->fd, buf, sizeof(buf), MSG_DONTWAIT, &from.sa, &flen);
		if (n < 0)
			return;
		union ds_addr key;
		if (!ds_norm(&from.sa, flen, &key))
			ds_udp_one(rs, buf, n, &key);
	}
}

void ds_progress(struct rsock *rs)
{
	if (rs->state == RS_INIT)
		return;
	ds_poll_cqs(rs);
	ds_udp_input(rs);
}

/* ds_arm_cqs asks each QP's CQ for an event on its next completion. */
void ds_arm_cqs(struct rsock *rs)
{
	for (struct ds_qp *qp = rs->ds->qps; qp; qp = qp->next)
		if (!qp->cq_armed) {
			ibv_req_notify_cq(qp->id->recv_cq, 0);
			qp->cq_armed = 1;
		}
}

/* ds_take_events takes the completion events the epoll set has. */
void ds_take_events_locked(struct rsock *rs)
{
	struct epoll_event ev[8];
	int n = epoll_wait(rs->ds->epfd, ev, 8, 0);
	for (int i = 0; i < n; i++) {
		struct ds_qp *qp = ev[i].data.ptr;
		struct ibv_cq *cq;
		void *ctx;
		if (qp && (ev[i].events & (EPOLLHUP | EPOLLERR)))
			rs->ds->dead = 1;
		if (qp && !ibv_get_cq_event(qp->id->recv_cq_channel, &cq, &ctx)) {
			ibv_ack_cq_events(cq, 1);
			qp->cq_armed = 0;
		}
	}
}

int ds_have_data(struct rsock *rs)
{
	return rs->ds->head != rs->ds->tail;
}

int ds_can_send(struct rsock *rs)
{
	return rs->ds->nfree > 0;
}

int ds_all_sent(struct rsock *rs)
{
	return rs->ds->nfree == rs->sq_size;
}

/* ds_wait makes progress until ready(rs), sleeping (without the lock) on
 * the epoll set unless nonblock. */
int ds_wait(struct rsock *rs, int nonblock, int (*ready)(struct rsock *rs))
{
	struct ds_sock *ds = rs->ds;
	for (;;) {
		ds_progress(rs);
		if (ready(rs))
			return 0;
		if (nonblock)
			return rs_fail(EWOULDBLOCK);
		ds_arm_cqs(rs);
		ds_progress(rs); /* what completed before the CQs were armed */
		if (ready(rs))
			return 0;
		struct pollfd p = {.fd = ds->epfd, .events = POLLIN};
		pthread_mutex_unlock(&ds->lock);
		int n = poll(&p, 1, -1);
		pthread_mutex_lock(&ds->lock);
		if (n < 0 && errno != EINTR)
			return -1;
		ds_take_events_locked(rs);
		if (ds->dead) /* no completion will come: fail rather than spin */
			return rs_fail(EIO);
	}
}

static size_t ds_iov_len(const struct iovec *iov, int iovcnt)
{
	size_t n = 0;
	for (int i = 0; i < iovcnt; i++)
		n += iov[i].iov_len;
	return n;
}

/* ds_send sends one datagram to d: over UDP until the peer's QPN is
 * known, then in a send slot, after our header, over UD. */
static ssize_t ds_send(struct rsock *rs, struct ds_dest *d, const struct iovec *iov, int iovcnt, int flags)
{
	struct ds_sock *ds = rs->ds;
	size_t len = ds_iov_len(iov, iovcnt);
	uint32_t hl = d->qp->hdr.length;
	if (len + hl > RS_SNDLOWAT)
		return rs_fail(EMSGSIZE);
	if (!d->ah)
		ds_udp_input(rs); /* the peer's QPN may be waiting there */
	if (!d->ah)
		return ds_send_udp(rs, d, iov, iovcnt, flags, RS_OP_DATA);
	if (!ds_can_send(rs) && ds_wait(rs, rs_nonblock(rs, flags), ds_can_send))
		return -1;
	int slot = ds->free_slots[--ds->nfree];
	uint8_t *p = ds->sbuf + (size_t)slot * RS_SNDLOWAT;
	memcpy(p, &d->qp->hdr, hl);
	for (int i = 0, off = hl; i < iovcnt; off += iov[i].iov_len, i++)
		memcpy(p + off, iov[i].iov_base, iov[i].iov_len);
	struct ibv_sge sge = {.addr = (uintptr_t)p, .length = hl + len, .lkey = d->qp->smr->lkey};
	struct ibv_send_wr wr = {
		.wr_id = slot,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = sge.length <= rs->sq_inline ? IBV_SEND_INLINE : 0,
		.wr.ud = {.ah = d->ah, .remote_qpn = d->qpn, .remote_qkey = RDMA_UDP_QKEY},
	}, *bad;
	int err = ibv_post_send(d->qp->id->qp, &wr, &bad);
	if (err) {
		ds->free_slots[ds->nfree++] = slot;
		return rs_fail(err);
	}
	return len;
}

ssize_t ds_sendv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags, const struct sockaddr *to,
		 socklen_t tolen)
{
	struct ds_sock *ds = rs->ds;
	if (!to && !ds->conn)
		return rs_fail(EDESTADDRREQ);
	if (!(rs->state & RS_WRITABLE) && rs->state != RS_INIT)
		return rs_fail(EPIPE);
	pthread_mutex_lock(&ds->lock);
	ssize_t ret = ds_init_ep(rs);
	struct ds_dest *d = ds->conn;
	if (!ret && to && !(d = ds_get_dest(rs, to, tolen)))
		ret = -1;
	if (!ret)
		ret = ds_send(rs, d, iov, iovcnt, flags);
	pthread_mutex_unlock(&ds->lock);
	return ret;
}

/* ds_recvfrom gives the next datagram, cut to len. */
ssize_t ds_recvfrom(struct rsock *rs, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *srclen)
{
	struct ds_sock *ds = rs->ds;
	if (!(rs->state & RS_READABLE))
		return rs_fail(EINVAL);
	pthread_mutex_lock(&ds->lock);
	if (!ds_have_data(rs) && ds_wait(rs, rs_nonblock(rs, flags), ds_have_data)) {
		pthread_mutex_unlock(&ds->lock);
		return -1;
	}
	struct ds_msg *m = &ds->msgs[ds->head];
	const uint8_t *p = m->copy ? m->copy : m->qp->rbuf + m->offset;
	const struct ds_wire_hdr *h = (const void *)p;
	size_t n = m->length - h->length;
	if (n > len)
		n = len;
	memcpy(buf, p + h->length, n);
	if (src && srclen)
		ds_set_src(h, src, srclen);
	if (!(flags & MSG_PEEK)) {
		if (m->copy)
			free(m->copy);
		else
			ds_post_recv(rs, m->qp, m->offset);
		ds_step(rs, &ds->head);
		ds->rqe_avail++;
	}
	pthread_mutex_unlock(&ds->lock);
	return n;
}
