/*
 * rsocket_poll.c: rpoll, rselect and rfcntl. An rsocket is ready as its
 * state and completions say (data queued, credits for a send, peer gone);
 * while none is, rpoll sleeps in poll(2) on each connected rsocket's
 * completion channel (its CQ armed), each listener's and connecting
 * socket's event channel and the program's other descriptors.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>

#include <rdma/rsocket.h>

#include "rdmacm.h"
#include "rsocket_int.h"

static int rs_ready_any(struct rsock *rs)
{
	(void)rs;
	return 1;
}

/* rs_revents: what rs has of events, after taking its completions. */
static short rs_revents(struct rsock *rs, short events)
{
	short r = 0;
	if (rs->ds)
		return ds_revents(rs, events);
	if ((rs->state & RS_OPENING) && rs_do_connect(rs) && errno == EINPROGRESS)
		return 0; /* its CM event has not come */
	if (rs->state == RS_LISTENING) {
		struct pollfd p = {.fd = rs->fd, .events = POLLIN};
		poll(&p, 1, 0);
		return p.revents & events & POLLIN;
	}
	if (rs->state & (RS_CONNECTED | RS_DISCONNECTED | RS_ERROR)) {
		if (rs->state & RS_CONNECTED)
			rs_process(rs, 1, rs_ready_any);
		if ((events & POLLIN) && rs_conn_have_data(rs))
			r |= POLLIN;
		if ((events & POLLOUT) && (rs->state & RS_CONNECTED) && rs_can_send(rs))
			r |= POLLOUT;
		if (rs->state == RS_DISCONNECTED) {
			if (!rs_have_data(rs))
				r |= POLLHUP; /* once what came before is read */
		} else if (!(rs->state & RS_CONNECTED))
			r |= POLLERR;
		return r;
	}
	if (rs->state == RS_CONNECT_ERROR)
		return (events & (POLLIN | POLLOUT)) | POLLERR;
	return 0;
}

static int rs_check(struct pollfd *fds, nfds_t nfds)
{
	int n = 0;
	for (nfds_t i = 0; i < nfds; i++) {
		struct rsock *rs = rs_get(fds[i].fd);
		if (rs)
			fds[i].revents = rs_revents(rs, fds[i].events);
		else {
			struct pollfd p = {.fd = fds[i].fd, .events = fds[i].events};
			poll(&p, 1, 0);
			fds[i].revents = p.revents;
		}
		n += fds[i].revents != 0;
	}
	return n;
}

/* rs_arm fills what to sleep on; for a connected rsocket its completion
 * channel, with the CQ armed (0 when it is ready meanwhile). */
static int rs_arm(struct pollfd *w, const struct pollfd *fds, nfds_t nfds)
{
	for (nfds_t i = 0; i < nfds; i++) {
		struct rsock *rs = rs_get(fds[i].fd);
		w[i] = (struct pollfd){.fd = fds[i].fd, .events = fds[i].events};
		if (!rs)
			continue;
		if (rs->ds) { /* its epoll set: the UDP socket and the CQs' channels */
			if ((w[i].fd = ds_arm(rs, fds[i].events)) < 0)
				return 0;
			w[i].events = POLLIN;
			continue;
		}
		if (rs->state == RS_LISTENING || (rs->state & RS_OPENING)) {
			w[i].events = POLLIN; /* the CM channel: a request, a step's event */
			continue;
		}
		if (!(rs->state & RS_CONNECTED)) {
			w[i].fd = -1;
			continue;
		}
		pthread_mutex_lock(&rs->cq_lock);
		if (!rs->cq_armed) {
			ibv_req_notify_cq(rs->id->recv_cq, 0);
			rs->cq_armed = 1;
		}
		pthread_mutex_unlock(&rs->cq_lock);
		if (rs_revents(rs, fds[i].events))
			return 0;
		w[i].fd = rs->id->recv_cq_channel->fd;
		w[i].events = POLLIN;
	}
	return 1;
}

/* rs_take_events takes the completion events poll woke on. */
static void rs_take_events(struct pollfd *w, const struct pollfd *fds, nfds_t nfds)
{
	for (nfds_t i = 0; i < nfds; i++) {
		struct rsock *rs = rs_get(fds[i].fd);
		if (rs && rs->ds && w[i].revents)
			ds_take_events(rs);
		if (!rs || rs->ds || !(rs->state & RS_CONNECTED) || !w[i].revents)
			continue;
		if (pthread_mutex_trylock(&rs->wait_lock))
			continue; /* a thread in rrecv or rsend takes it */
		int fl = fcntl(w[i].fd, F_GETFL);
		fcntl(w[i].fd, F_SETFL, fl | O_NONBLOCK);
		rs_take_cq_event(rs);
		fcntl(w[i].fd, F_SETFL, fl);
		pthread_mutex_unlock(&rs->wait_lock);
	}
}

static long long rs_now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

CM_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	struct pollfd *w = calloc(nfds ? nfds : 1, sizeof(*w));
	if (!w)
		return rs_fail(ENOMEM);
	long long end = timeout > 0 ? rs_now_ms() + timeout : 0;
	int n;
	for (;;) {
		if ((n = rs_check(fds, nfds)) || timeout == 0)
			break;
		if (!rs_arm(w, fds, nfds))
			continue;
		int left = timeout < 0 ? -1 : (int)(end - rs_now_ms());
		if (timeout > 0 && left <= 0) {
			n = rs_check(fds, nfds);
			break;
		}
		if ((n = poll(w, nfds, left)) < 0)
			break;
		rs_take_events(w, fds, nfds);
	}
	free(w);
	return n;
}

/* rselect is rpoll over the sets' descriptors. */
CM_EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
	struct pollfd *p = calloc(nfds > 0 ? nfds : 1, sizeof(*p));
	if (!p)
		return rs_fail(ENOMEM);
	int n = 0;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = (readfds && FD_ISSET(fd, readfds) ? POLLIN : 0) |
			   (writefds && FD_ISSET(fd, writefds) ? POLLOUT : 0) |
			   (exceptfds && FD_ISSET(fd, exceptfds) ? POLLPRI : 0);
		if (ev)
			p[n++] = (struct pollfd){.fd = fd, .events = ev};
	}
	int to = timeout ? (int)(timeout->tv_sec * 1000 + (timeout->tv_usec + 999) / 1000) : -1;
	int ret = rpoll(p, n, to);
	if (ret >= 0) {
		if (readfds)
			FD_ZERO(readfds);
		if (writefds)
			FD_ZERO(writefds);
		if (exceptfds)
			FD_ZERO(exceptfds);
		ret = 0;
		for (int i = 0; i < n; i++) {
			short r = p[i].revents;
			if (readfds && (r & (POLLIN | POLLHUP | POLLERR)) && (p[i].events & POLLIN)) {
				FD_SET(p[i].fd, readfds);
				ret++;
			}
			if (writefds && (r & (POLLOUT | POLLERR)) && (p[i].events & POLLOUT)) {
				FD_SET(p[i].fd, writefds);
				ret++;
			}
			if (exceptfds && (r & POLLPRI)) {
				FD_SET(p[i].fd, exceptfds);
				ret++;
			}
		}
	}
	free(p);
	return ret;
}

/* rfcntl keeps the file status flags (O_NONBLOCK) on the rsocket; the
 * descriptor flags are the channel descriptor's. */
CM_EXPORT int rfcntl(int socket, int cmd, ...)
{
	struct rsock *rs = rs_get(socket);
	if (!rs)
		return rs_fail(EBADF);
	va_list ap;
	va_start(ap, cmd);
	int arg = cmd == F_SETFL || cmd == F_SETFD ? va_arg(ap, int) : 0;
	va_end(ap);
	switch (cmd) {
	case F_GETFL:
		return rs->fs_flags | O_RDWR;
	case F_SETFL:
		rs->fs_flags = arg & O_NONBLOCK;
		return 0;
	case F_GETFD:
	case F_SETFD:
		return fcntl(socket, cmd, arg);
	default:
		return rs_fail(ENOTSUP);
	}
}
