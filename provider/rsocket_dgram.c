/*
 * rsocket_dgram.c: datagram rsockets (SOCK_DGRAM) in rdma-core's protocol
 * (librdmacm/rsocket.c), so that a softnic one talks to one on rxe.
 *
 * The socket's number is a kernel UDP socket's descriptor: it holds the
 * address (bind, connect, getsockname are the kernel's) and carries the
 * first datagrams to a peer whose QP is not known yet. Each local source
 * address gets a UD QP (RDMA_PS_UDP, Q_Key RDMA_UDP_QKEY), and each peer
 * address a ds_dest: the QP it is reached from and, once the peer told
 * its QPN, an address handle. Every datagram starts with a header:
 *  - over UD, struct ds_wire_hdr: the sender's address (version 4 or 6,
 *    the header's length 8 or 24, the UDP port, the IP address), which
 *    the receiver gives as the source of the datagram;
 *  - over UDP, struct ds_wire_udp: tag 0x55555555, version, op (DATA: a
 *    datagram follows; CTRL: only telling the QPN), length 16 or 28, the
 *    sender's UD QPN and IP address. A receiver answers DATA with CTRL,
 *    and makes an address handle to the sender's QPN.
 * rdma-core reads the UDP socket in a service thread and forwards a UDP
 * datagram to the application through its own QP; here the socket is
 * read wherever the rsocket makes progress (send, receive, rpoll; its
 * epoll descriptor, which rpoll sleeps on, holds the UDP socket and
 * every QP's completion channel), and a UDP datagram is queued directly.
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

int ds_socket(int domain, int type, int protocol)
{
	if (protocol && protocol != IPPROTO_UDP)
		return rs_fail(ENOTSUP);
	struct rsock *rs = calloc(1, sizeof(*rs));
	struct ds_sock *ds = calloc(1, sizeof(*ds));
	if (!rs || !ds) {
		free(rs);
		free(ds);
		return rs_fail(ENOMEM);
	}
	rs->ds = ds;
	rs->fd = socket(domain, SOCK_DGRAM | (type & SOCK_CLOEXEC), 0);
	rs->fs_flags = type & SOCK_NONBLOCK ? O_NONBLOCK : 0;
	rs->sbuf_size = rs->rbuf_size = DS_DEF_MEM;
	rs->sq_size = rs->rq_size = DS_DEF_QSIZE;
	rs->sq_inline = DS_DEF_INLINE;
	pthread_mutex_init(&ds->lock, NULL);
	ds->epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	int err = rs->fd < 0 || ds->epfd < 0 || epoll_ctl(ds->epfd, EPOLL_CTL_ADD, rs->fd, &ev) ? errno : 0;
	if (!err && rs_table_set(rs->fd, rs))
		err = ENOMEM;
	if (err) {
		if (rs->fd >= 0)
			close(rs->fd);
		if (ds->epfd >= 0)
			close(ds->epfd);
		free(ds);
		free(rs);
		return rs_fail(err);
	}
	return rs->fd;
}

int ds_bind(struct rsock *rs, const struct sockaddr *addr, socklen_t len)
{
	pthread_mutex_lock(&rs->ds->lock);
	int ret = ds_init_ep(rs);
	if (!ret)
		ret = bind(rs->fd, addr, len);
	pthread_mutex_unlock(&rs->ds->lock);
	return ret;
}

/* ds_connect fixes the peer of rsend and rrecv's source (the kernel's
 * connect filters what the UDP socket takes), and makes its QP now. */
int ds_connect(struct rsock *rs, const struct sockaddr *addr, socklen_t len)
{
	pthread_mutex_lock(&rs->ds->lock);
	int ret = ds_init_ep(rs);
	if (!ret)
		ret = connect(rs->fd, addr, len);
	if (!ret && !(rs->ds->conn = ds_get_dest(rs, addr, len)))
		ret = -1;
	pthread_mutex_unlock(&rs->ds->lock);
	return ret;
}

int ds_shutdown(struct rsock *rs, int how)
{
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return rs_fail(EINVAL);
	if (how != SHUT_WR)
		rs->state &= ~RS_READABLE;
	if (how != SHUT_RD)
		rs->state &= ~RS_WRITABLE;
	return 0;
}

/* ds_close lets the sends posted complete (their slots are registered
 * memory), then frees the peers, the QPs and the sockets. */
void ds_close(struct rsock *rs)
{
	struct ds_sock *ds = rs->ds;
	pthread_mutex_lock(&ds->lock);
	if (rs->state != RS_INIT)
		ds_wait(rs, 0, ds_all_sent);
	rs->state = RS_INIT;
	while (ds->head != ds->tail) {
		free(ds->msgs[ds->head].copy);
		ds_step(rs, &ds->head);
	}
	tdestroy(ds->dests, ds_free_dest);
	while (ds->qps) {
		struct ds_qp *qp = ds->qps;
		ds->qps = qp->next;
		ds_free_qp(rs, qp);
	}
	pthread_mutex_unlock(&ds->lock);
	rs_table_set(rs->fd, NULL);
	close(ds->epfd);
	close(rs->fd);
	free(ds->sbuf);
	free(ds->free_slots);
	free(ds->msgs);
	pthread_mutex_destroy(&ds->lock);
	free(ds);
	free(rs);
}

/* ds_revents: POLLIN with a datagram queued, POLLOUT with a free send
 * slot (or before the first send makes them), POLLERR once the daemon
 * is gone. */
short ds_revents(struct rsock *rs, short events)
{
	short r = 0;
	pthread_mutex_lock(&rs->ds->lock);
	ds_progress(rs);
	if ((events & POLLIN) && ds_have_data(rs))
		r |= POLLIN;
	if ((events & POLLOUT) && (rs->state == RS_INIT || ds_can_send(rs)))
		r |= POLLOUT;
	if (rs->ds->dead)
		r |= POLLERR;
	pthread_mutex_unlock(&rs->ds->lock);
	return r;
}

/* ds_arm readies rpoll's sleep: the descriptor to sleep on (the epoll
 * set, every CQ armed), or -1 when rs is ready meanwhile. */
int ds_arm(struct rsock *rs, short events)
{
	pthread_mutex_lock(&rs->ds->lock);
	ds_arm_cqs(rs);
	pthread_mutex_unlock(&rs->ds->lock);
	return ds_revents(rs, events) ? -1 : rs->ds->epfd;
}

void ds_take_events(struct rsock *rs)
{
	pthread_mutex_lock(&rs->ds->lock);
	ds_take_events_locked(rs);
	pthread_mutex_unlock(&rs->ds->lock);
}

/* ds_setsockopt: levels but SOL_RDMA go to the UDP socket first, as in
 * rdma-core; the sizes count until the first bind, connect or send. */
int ds_setsockopt(struct rsock *rs, int level, int name, const void *val, socklen_t len)
{
	if (level != SOL_RDMA && setsockopt(rs->fd, level, name, val, len))
		return -1;
	uint32_t v = *(const uint32_t *)val; /* rsetsockopt checked its length */
	if (level == SOL_SOCKET && (name == SO_RCVBUF || name == SO_SNDBUF)) {
		if (rs->state == RS_INIT)
			*(name == SO_RCVBUF ? &rs->rbuf_size : &rs->sbuf_size) = v << 1;
		return 0;
	}
	if (level != SOL_RDMA)
		return 0;
	if (rs->state != RS_INIT)
		return rs_fail(EINVAL);
	if (v > RS_QP_MAX)
		v = RS_QP_MAX;
	switch (name) {
	case RDMA_SQSIZE:
		rs->sq_size = v;
		return 0;
	case RDMA_RQSIZE:
		rs->rq_size = v;
		return 0;
	case RDMA_INLINE:
		rs->sq_inline = v;
		return 0;
	default:
		return rs_fail(ENOTSUP);
	}
}

int ds_getsockopt(struct rsock *rs, int level, int name, void *val, socklen_t *len)
{
	int v;
	if (level == SOL_SOCKET && name == SO_RCVBUF)
		v = rs->rbuf_size;
	else if (level == SOL_SOCKET && name == SO_SNDBUF)
		v = rs->sbuf_size;
	else if (level == SOL_RDMA && name == RDMA_SQSIZE)
		v = rs->sq_size;
	else if (level == SOL_RDMA && name == RDMA_RQSIZE)
		v = rs->rq_size;
	else if (level == SOL_RDMA && name == RDMA_INLINE)
		v = rs->sq_inline;
	else if (level == SOL_RDMA)
		return rs_fail(ENOTSUP);
	else
		return getsockopt(rs->fd, level, name, val, len);
	socklen_t n = *len < sizeof(v) ? *len : sizeof(v);
	memcpy(val, &v, n);
	*len = n;
	return 0;
}
