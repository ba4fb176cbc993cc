/*
 * control.c: the slow path. One SOCK_SEQPACKET connection per context to
 * the daemon's control socket; each command is one packet and its reply
 * one packet, with descriptors as SCM_RIGHTS (docs/HOST-INTERFACE.md).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "provider.h"

/* The daemon's run directory, where DEVICE.sock is. */
static const char *run_dir(void)
{
	const char *d = getenv("SOFTNIC_RUN_DIR");
	return d && *d ? d : "/run/softnic";
}

/* sn_open_socket connects to the control socket of device ibdev_name. */
static int sn_open_socket(const char *ibdev_name)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int n = snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/%s.sock", run_dir(), ibdev_name);
	if (n < 0 || (size_t)n >= sizeof(addr.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* sn_session_new makes a session not yet connected, held once. */
struct sn_session *sn_session_new(void)
{
	struct sn_session *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->refs = 1;
	s->pid = getpid();
	s->sock = s->doorbell_fd = -1;
	s->calls = sn_calls_new();
	if (!s->calls) {
		int err = errno;
		free(s);
		errno = err;
		return NULL;
	}
	pthread_mutex_init(&s->channel_lock, NULL);
	return s;
}

/* sn_session_put drops a context's hold on s; the last one ends the
 * session, and the daemon destroys what it still holds. */
void sn_session_put(struct sn_session *s)
{
	if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	if (s->page)
		munmap(s->page, SN_PAGE_SIZE);
	if (s->doorbell_fd >= 0)
		close(s->doorbell_fd);
	if (s->sock >= 0)
		close(s->sock);
	sn_calls_free(s->calls);
	pthread_mutex_destroy(&s->channel_lock);
	free(s);
}

/* sn_connect opens the session on device ibdev_name's control socket;
 * 0 or an errno. */
int sn_connect(struct sn_context *ctx, const char *ibdev_name)
{
	ctx->s->sock = sn_open_socket(ibdev_name);
	if (ctx->s->sock < 0)
		return errno;
	return sn_hello(ctx);
}

_Static_assert(SN_MAX_SEND_FDS >= SN_HELLO_FDS, "hello's descriptors fit a message's control buffer");

/* hello_call sends hello. It passes, in this order, the process's own
 * /proc/self/mem (read and write) and /proc/self/maps (read), opened here
 * and closed once the call is over: the daemon reaches the program's
 * memory only through that mem descriptor, bound to this address space
 * (dead after an exec), and checks registrations against the maps one. */
static int hello_call(struct sn_context *ctx, int *fds, int max_fds)
{
	uint32_t version = SN_VERSION;
	int mine[SN_HELLO_FDS];
	mine[SN_HELLO_MEM_FD] = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
	mine[SN_HELLO_MAPS_FD] = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	int n = -1;
	if (mine[SN_HELLO_MEM_FD] >= 0 && mine[SN_HELLO_MAPS_FD] >= 0)
		n = sn_call_fds(ctx, SN_OP_HELLO, &version, sizeof(version), mine, SN_HELLO_FDS, &ctx->s->limits,
				sizeof(ctx->s->limits), fds, max_fds);
	int e = errno;
	for (int i = 0; i < SN_HELLO_FDS; i++)
		if (mine[i] >= 0)
			close(mine[i]);
	errno = e;
	return n;
}

/* sn_hello starts the session on ctx's socket: hello, then the session
 * page, the async event pipe and the doorbell eventfd the reply passes; 0
 * or an errno (the daemon's, for a refused hello: EAGAIN over the user's
 * session bound). */
int sn_hello(struct sn_context *ctx)
{
	int fds[3];
	int n = hello_call(ctx, fds, 3);
	if (n < 0)
		return errno;
	if (n != 3) {
		for (int i = 0; i < n; i++)
			close(fds[i]);
		return EPROTO;
	}
	ctx->s->page = sn_map_ring(fds[0], SN_PAGE_SIZE);
	close(fds[0]);
	if (!ctx->s->page) {
		close(fds[1]);
		close(fds[2]);
		return errno;
	}
	ctx->vctx.context.async_fd = fds[1];
	ctx->s->doorbell_fd = fds[2];
	return 0;
}

/* take_fds moves the descriptors of msg's SCM_RIGHTS into fds, up to
 * max_fds; it closes any beyond and says so with -1. */
static int take_fds(struct msghdr *msg, int *fds, int max_fds, int *count)
{
	int extra = 0;
	*count = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
			if (*count < max_fds)
				fds[(*count)++] = fd;
			else {
				close(fd);
				extra = 1;
			}
		}
	}
	return extra ? -1 : 0;
}

/* send_message sends one message with nfds descriptors as SCM_RIGHTS
 * (at most SN_MAX_SEND_FDS); it returns 0 or an errno. */
static int send_message(int sock, const uint8_t *out, size_t out_len, const int *fds, int nfds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(SN_MAX_SEND_FDS * sizeof(int))];
	} cbuf;
	if (nfds < 0 || nfds > SN_MAX_SEND_FDS)
		return EINVAL;
	struct iovec iov = {.iov_base = (void *)out, .iov_len = out_len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfds > 0) {
		msg.msg_control = cbuf.buf;
		msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	if (sendmsg(sock, &msg, MSG_NOSIGNAL) != (ssize_t)out_len)
		return errno ? errno : EPIPE;
	return 0;
}

/*
 * receive_message receives one message with its descriptors into in,
 * given the send's outcome, err; it returns 0 or an errno. With
 * early_reply, a connection the daemon closed (the send failed, or the
 * receive reports the reset) still gives the message the daemon sent
 * before it closed: a daemon that refuses a connection answers before it
 * reads the hello.
 */
static int receive_message(struct sn_context *ctx, int err, int early_reply, uint8_t *in, size_t *in_len, int *fds,
			   int *nfds)
{
	*nfds = 0;
	int flags = MSG_CMSG_CLOEXEC;
	if (err)
		flags |= MSG_DONTWAIT;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} cbuf;
	struct iovec iov = {.iov_base = in, .iov_len = SN_MAX_MESSAGE};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf, .msg_controllen = sizeof(cbuf)};
	ssize_t n;
	do
		n = recvmsg(ctx->s->sock, &msg, flags);
	while (n < 0 && errno == EINTR);
	/* A daemon that closed with our message unread left ECONNRESET,
	 * which the first receive reports (and clears) before the messages
	 * it queued. */
	if (n < 0 && early_reply && errno == ECONNRESET) {
		err = ECONNRESET;
		n = recvmsg(ctx->s->sock, &msg, flags | MSG_DONTWAIT);
	}
	if (n < 0)
		return err ? err : errno;
	/* Descriptors first: an empty message may carry some too. */
	int extra = take_fds(&msg, fds, 4, nfds);
	if (n == 0)
		return err ? err : ECONNRESET; /* the daemon is gone */
	*in_len = n;
	if (extra < 0 || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
		return EPROTO;
	return 0;
}

/*
 * exchange sends one message (with nsend descriptors) and receives the
 * reply with its descriptors; it returns 0 or an errno (receive_message
 * says what early_reply does). With stale, the lock's last holder died
 * holding it, perhaps with a reply unread, which goes first: a reply not
 * of our seq is dropped once.
 */
static int exchange(struct sn_context *ctx, const uint8_t *out, size_t out_len, const int *send_fds, int nsend,
		    int early_reply, int stale, uint8_t *in, size_t *in_len, int *fds, int *nfds)
{
	int err = send_message(ctx->s->sock, out, out_len, send_fds, nsend);
	if (err && !(early_reply && (err == EPIPE || err == ECONNRESET)))
		return err;
	int got = receive_message(ctx, err, early_reply, in, in_len, fds, nfds);
	struct sn_header r, h;
	memcpy(&h, out, sizeof(h));
	if (got || !stale || *in_len < SN_HEADER_LEN)
		return got;
	memcpy(&r, in, sizeof(r));
	if (r.seq == h.seq)
		return 0;
	for (int i = 0; i < *nfds; i++)
		close(fds[i]);
	return receive_message(ctx, err, early_reply, in, in_len, fds, nfds);
}

struct sn_calls *sn_calls_new(void)
{
	struct sn_calls *c = mmap(NULL, sizeof(*c), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (c == MAP_FAILED)
		return NULL;
	pthread_mutexattr_t a;
	int err = pthread_mutexattr_init(&a);
	if (!err)
		err = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	if (!err)
		err = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	if (!err)
		err = pthread_mutex_init(&c->lock, &a);
	pthread_mutexattr_destroy(&a);
	if (err) {
		munmap(c, sizeof(*c));
		errno = err;
		return NULL;
	}
	c->seq = 0;
	return c;
}

void sn_calls_free(struct sn_calls *calls)
{
	if (!calls)
		return;
	/* A forked child may use it still: only this process's mapping goes. */
	munmap(calls, sizeof(*calls));
}

/*
 * call_lock takes the lock of the context's commands, which the
 * processes sharing the context share (struct sn_calls); it reports
 * whether the last holder died holding it.
 */
static int call_lock(struct sn_context *ctx)
{
	int r = pthread_mutex_lock(&ctx->s->calls->lock);
	if (r == EOWNERDEAD) {
		pthread_mutex_consistent(&ctx->s->calls->lock);
		return 1;
	}
	return 0;
}

/* errno_of is a reply's status as an errno. */
static int errno_of(int32_t status)
{
	return status < 0 && status > -4096 ? -status : EPROTO;
}

/* check_reply checks the reply's header against the request's and copies
 * its body, which must be reply_len bytes; it returns 0 or an errno. A
 * hello reply with an error is the error whatever its seq and version:
 * the daemon refuses a connection (EAGAIN over the user's session bound)
 * with a hello reply of seq 0 before it reads anything. */
static int check_reply(const uint8_t *in, size_t in_len, const struct sn_header *req, void *reply, size_t reply_len)
{
	struct sn_header r;
	if (in_len < SN_HEADER_LEN)
		return EPROTO;
	memcpy(&r, in, sizeof(r));
	if (req->op == SN_OP_HELLO && r.op == SN_OP_HELLO && r.length == in_len && r.status != 0)
		return errno_of(r.status);
	if (r.version != SN_VERSION || r.length != in_len || r.op != req->op || r.seq != req->seq)
		return EPROTO;
	if (r.status != 0)
		return errno_of(r.status);
	if (in_len != SN_HEADER_LEN + reply_len)
		return EPROTO;
	if (reply_len)
		memcpy(reply, in + SN_HEADER_LEN, reply_len);
	return 0;
}

/*
 * sn_call sends op with its request body and waits for the reply, whose
 * body must be reply_len bytes. It returns the number of descriptors the
 * reply passed (stored in fds, at most max_fds), or -1 with errno: the
 * daemon's errno, ECONNRESET once the daemon is gone, or EPROTO for a
 * reply that breaks the protocol.
 */
int sn_call(struct sn_context *ctx, enum sn_op op, const void *req, size_t req_len, void *reply, size_t reply_len,
	    int *fds, int max_fds)
{
	return sn_call_fds(ctx, op, req, req_len, NULL, 0, reply, reply_len, fds, max_fds);
}

/* sn_call_fds is sn_call with nsend descriptors (at most SN_MAX_SEND_FDS)
 * passed along with the request as one SCM_RIGHTS, in their order. */
int sn_call_fds(struct sn_context *ctx, enum sn_op op, const void *req, size_t req_len, const int *send_fds,
		int nsend, void *reply, size_t reply_len, int *fds, int max_fds)
{
	uint8_t out[SN_MAX_MESSAGE], in[SN_MAX_MESSAGE];
	if (SN_HEADER_LEN + req_len > sizeof(out) || reply_len > sizeof(in) - SN_HEADER_LEN) {
		errno = EINVAL;
		return -1;
	}
	int stale = call_lock(ctx);
	struct sn_header h = {
		.op = op, .version = SN_VERSION, .length = SN_HEADER_LEN + req_len, .seq = ++ctx->s->calls->seq};
	memcpy(out, &h, sizeof(h));
	if (req_len)
		memcpy(out + SN_HEADER_LEN, req, req_len);
	size_t in_len = 0;
	int got[4], n = 0;
	int err = exchange(ctx, out, h.length, send_fds, nsend, op == SN_OP_HELLO, stale, in, &in_len, got, &n);
	pthread_mutex_unlock(&ctx->s->calls->lock);
	if (err == ECONNRESET || err == EPIPE)
		__atomic_store_n(&ctx->s->gone, 1, __ATOMIC_RELAXED);
	if (!err)
		err = check_reply(in, in_len, &h, reply, reply_len);
	if (!err && n > max_fds)
		err = EPROTO;
	for (int i = 0; i < n; i++) {
		if (err)
			close(got[i]);
		else
			fds[i] = got[i];
	}
	if (err) {
		errno = err;
		return -1;
	}
	return n;
}

/* sn_map_ring maps a ring the daemon passed, shared; NULL with errno. A
 * file shorter than the reply said would fault on first touch: EPROTO. */
void *sn_map_ring(int fd, size_t size)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return NULL;
	if (st.st_size < 0 || (uint64_t)st.st_size < size) {
		errno = EPROTO;
		return NULL;
	}
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	return p == MAP_FAILED ? NULL : p;
}

/*
 * sn_ring_doorbell tells the daemon that work was posted: the doorbell
 * word always; the eventfd only if the daemon sleeps. The sequentially
 * consistent add and load are full fences, so either the daemon sees the
 * doorbell before it sleeps or we see it sleeping.
 */
void sn_ring_doorbell(struct sn_context *ctx)
{
	__atomic_fetch_add((uint32_t *)(ctx->s->page + SN_PAGE_DOORBELL), 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n((uint32_t *)(ctx->s->page + SN_PAGE_SLEEPING), __ATOMIC_SEQ_CST)) {
		uint64_t one = 1;
		if (write(ctx->s->doorbell_fd, &one, sizeof(one)) < 0) {
			/* EAGAIN: the counter is full, the daemon will wake anyway */
		}
	}
}

/*
 * sn_destroy_handle sends a destroy command (op) for handle: 0 or an
 * errno. A session whose daemon is gone lost every object with it, so
 * there the destroy has happened and succeeds, and the program can free
 * its side (rdma-core takes EIO from a destroy on a disassociated device
 * as success for the same reason).
 */
int sn_destroy_handle(struct sn_context *ctx, enum sn_op op, uint32_t handle)
{
	struct sn_handle req = {handle};
	if (sn_call(ctx, op, &req, sizeof(req), NULL, 0, NULL, 0) >= 0)
		return 0;
	return sn_daemon_gone(ctx, 0) ? 0 : errno;
}

/*
 * sn_daemon_gone reports whether the daemon closed the session's socket
 * (stopped or killed: every object of the session is gone with it). With
 * look, it asks the socket (poll, no wait) when it does not know yet; the
 * data path looks only while it idles.
 */
int sn_daemon_gone(struct sn_context *ctx, int look)
{
	if (__atomic_load_n(&ctx->s->gone, __ATOMIC_RELAXED))
		return 1;
	if (!look)
		return 0;
	struct pollfd p = {.fd = ctx->s->sock, .events = POLLIN};
	if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR))) {
		__atomic_store_n(&ctx->s->gone, 1, __ATOMIC_RELAXED);
		return 1;
	}
	return 0;
}
