/*
 * provider_hostif: the provider's side of the host interface against a
 * daemon of the test's own (TestProviderHostInterface). It includes the
 * provider's control.c and channel.c and links the rest of the provider's
 * sources, and plays the daemon on a socket in SOFTNIC_RUN_DIR, one thread
 * per case, checking what the provider sends and answering as it likes:
 *
 *   hello: it passes exactly two descriptors, the process's own
 *     /proc/PID/mem (read-write: a pread and a pwrite through it reach the
 *     program's variables) and /proc/PID/maps (read-only), in that order,
 *     and holds neither once the call is over;
 *   a hello refused with op hello, seq 0, -EAGAIN, whether the daemon
 *     closed the connection before the program sent its hello or after,
 *     and a hello answered with another error, is that errno;
 *   errnos of commands reach the caller (ENOMEM from reg_mr, EACCES from
 *     alloc_pd, EMFILE from create_comp_channel);
 *   ibv_destroy_comp_channel: it sends destroy_comp_channel (op 43, u32
 *     handle), keeps the channel (and its pipe) on the daemon's EBUSY, and
 *     closes the pipe once the daemon destroyed it; with a CQ on it the
 *     call is EBUSY and sends nothing.
 *
 * The exit status is the number of checks that failed.
 */
#include "control.c"
#include "channel.c"

#include <dirent.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/wait.h>

#include "checks.h"

#define DEV "softnic_hostif"

static char sock_path[108];

/* A daemon's side of one connection: what it received last. */
struct msg {
	struct sn_header h;
	uint8_t body[SN_MAX_MESSAGE];
	size_t body_len;
	int fds[SN_MAX_SEND_FDS + 1];
	int nfds;
};

static int listen_socket(void)
{
	int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	strcpy(a.sun_path, sock_path);
	unlink(sock_path);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4)) {
		perror("listen");
		exit(100);
	}
	return l;
}

/* receive takes one message with up to SN_MAX_SEND_FDS+1 descriptors. */
static int receive(int c, struct msg *m)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE((SN_MAX_SEND_FDS + 1) * sizeof(int))];
	} cbuf;
	uint8_t in[SN_MAX_MESSAGE];
	struct iovec iov = {.iov_base = in, .iov_len = sizeof(in)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf, .msg_controllen = sizeof(cbuf)};
	ssize_t n = recvmsg(c, &mh, MSG_CMSG_CLOEXEC);
	if (n < (ssize_t)SN_HEADER_LEN)
		return -1;
	memcpy(&m->h, in, SN_HEADER_LEN);
	m->body_len = n - SN_HEADER_LEN;
	memcpy(m->body, in + SN_HEADER_LEN, m->body_len);
	if (take_fds(&mh, m->fds, SN_MAX_SEND_FDS + 1, &m->nfds) < 0)
		return -1;
	return 0;
}

/* answer sends a reply to op with seq, status, body and descriptors. */
static void answer(int c, uint16_t op, uint32_t seq, int32_t status, const void *body, size_t len, const int *fds,
		   int nfds)
{
	uint8_t out[SN_MAX_MESSAGE];
	struct sn_header h = {.op = op, .version = SN_VERSION, .length = SN_HEADER_LEN + len, .seq = seq, .status = status};
	memcpy(out, &h, sizeof(h));
	if (len)
		memcpy(out + SN_HEADER_LEN, body, len);
	if (send_message(c, out, h.length, fds, nfds)) {
		perror("answer");
		exit(100);
	}
}

/* open_session answers a hello as a daemon does: limits, the session page,
 * the async pipe and the doorbell eventfd. */
static void open_session(int c, const struct msg *m)
{
	struct sn_hello_reply r = {.version = SN_VERSION, .max_qp_wr = 1024, .max_sge = 4, .max_cqe = 4096};
	int page = memfd_create("page", MFD_CLOEXEC), p[2], ev = eventfd(0, EFD_CLOEXEC);
	if (page < 0 || ftruncate(page, SN_PAGE_SIZE) || pipe2(p, O_CLOEXEC) || ev < 0)
		exit(100);
	int fds[3] = {page, p[0], ev};
	answer(c, SN_OP_HELLO, m->h.seq, 0, &r, sizeof(r), fds, 3);
	close(page), close(p[0]), close(p[1]), close(ev);
}

/* The program's variables the daemon reaches through the mem descriptor. */
static volatile uint64_t probe = 0x1122334455667788ull, target;

/* What the daemon saw of the hello, checked by the main thread. */
struct hello_seen {
	int nfds, version_ok;
	char link[2][128];
	int accmode[2];
	int read_probe, wrote_target, maps_read;
};

/* linked is the path a descriptor is open on. */
static void linked(int fd, char *out, size_t n)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	ssize_t k = readlink(p, out, n - 1);
	out[k < 0 ? 0 : k] = 0;
}

static void *daemon_hello(void *arg)
{
	struct hello_seen *s = arg;
	int l = listen_socket(), c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	struct msg m;
	if (c < 0 || receive(c, &m))
		exit(100);
	uint32_t v = 0;
	memcpy(&v, m.body, m.body_len == 4 ? 4 : 0);
	s->version_ok = m.h.op == SN_OP_HELLO && m.h.version == SN_VERSION && v == SN_VERSION;
	s->nfds = m.nfds;
	for (int i = 0; i < m.nfds && i < 2; i++) {
		linked(m.fds[i], s->link[i], sizeof(s->link[i]));
		s->accmode[i] = fcntl(m.fds[i], F_GETFL) & O_ACCMODE;
	}
	if (m.nfds >= 1) {
		uint64_t got = 0, put = 0xabcdef0102030405ull;
		s->read_probe = pread(m.fds[0], &got, 8, (off_t)(uintptr_t)&probe) == 8 && got == probe;
		s->wrote_target = pwrite(m.fds[0], &put, 8, (off_t)(uintptr_t)&target) == 8;
	}
	if (m.nfds >= 2) {
		char buf[4096];
		ssize_t k = read(m.fds[1], buf, sizeof(buf) - 1);
		buf[k < 0 ? 0 : k] = 0;
		s->maps_read = strstr(buf, "-") != NULL && strstr(buf, " r") != NULL;
	}
	for (int i = 0; i < m.nfds; i++)
		close(m.fds[i]);
	open_session(c, &m);
	/* Then commands, answered with errors as a bounded daemon would. */
	while (receive(c, &m) == 0) {
		int32_t status = m.h.op == SN_OP_REG_MR ? -ENOMEM : m.h.op == SN_OP_ALLOC_PD ? -EACCES
				 : m.h.op == SN_OP_CREATE_COMP_CHANNEL ? -EMFILE : -EPROTO;
		answer(c, m.h.op, m.h.seq, status, NULL, 0, NULL, 0);
	}
	close(c);
	close(l);
	return NULL;
}

/* held counts the program's descriptors open on /proc/PID/mem or maps. */
static int held(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;
	char want[2][64], link[128];
	snprintf(want[0], sizeof(want[0]), "/proc/%d/mem", getpid());
	snprintf(want[1], sizeof(want[1]), "/proc/%d/maps", getpid());
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		linked(atoi(e->d_name), link, sizeof(link));
		n += strcmp(link, want[0]) == 0 || strcmp(link, want[1]) == 0;
	}
	if (d)
		closedir(d);
	return n;
}

static struct sn_verbs_device fake_device = {.ops = &sn_device_ops};

static struct sn_context *new_context(void)
{
	struct sn_context *ctx = calloc(1, sizeof(*ctx));
	ctx->s = sn_session_new();
	ctx->vctx.context.device = &fake_device.device;
	pthread_mutex_init(&ctx->vctx.context.mutex, NULL);
	return ctx;
}

static void end_context(struct sn_context *ctx)
{
	sn_session_put(ctx->s); /* the page, socket and doorbell */
	if (ctx->vctx.context.async_fd > 0)
		close(ctx->vctx.context.async_fd);
	free(ctx);
}

static void test_hello(void)
{
	struct hello_seen s = {0};
	pthread_t th;
	pthread_create(&th, NULL, daemon_hello, &s);
	struct sn_context *ctx = new_context();
	int err;
	do /* until the daemon thread listens */
		err = sn_connect(ctx, DEV);
	while ((err == ENOENT || err == ECONNREFUSED) && (usleep(1000), 1));
	check(err == 0, "hello: the session opens");
	check(s.version_ok, "hello: the header and body say the provider's version");
	char want_mem[64], want_maps[64], what[400];
	snprintf(want_mem, sizeof(want_mem), "/proc/%d/mem", getpid());
	snprintf(want_maps, sizeof(want_maps), "/proc/%d/maps", getpid());
	snprintf(what, sizeof(what), "hello passes two descriptors, mem then maps (%d: %s, %s)", s.nfds, s.link[0],
		 s.link[1]);
	check(s.nfds == 2 && strcmp(s.link[0], want_mem) == 0 && strcmp(s.link[1], want_maps) == 0, what);
	check(s.accmode[0] == O_RDWR && s.accmode[1] == O_RDONLY, "mem is open read-write, maps read-only");
	check(s.read_probe && s.wrote_target && target == 0xabcdef0102030405ull && s.maps_read,
	      "the daemon reads and writes the program's variables through mem, and reads maps");
	check(held() == 0, "the program holds no mem or maps descriptor after hello");

	struct sn_pd pd = {.ibv = {.context = &ctx->vctx.context}};
	errno = 0;
	check(sn_alloc_pd(&ctx->vctx.context) == NULL && errno == EACCES, "a command's EACCES reaches errno");
	char buf[64];
	errno = 0;
	check(sn_reg_mr(&pd.ibv, buf, sizeof(buf), (uintptr_t)buf, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == ENOMEM,
	      "reg_mr's ENOMEM reaches errno");
	errno = 0;
	check(ibv_create_comp_channel(&ctx->vctx.context) == NULL && errno == EMFILE,
	      "create_comp_channel's EMFILE reaches errno");
	close(ctx->s->sock);
	ctx->s->sock = -1;
	pthread_join(th, NULL);
	end_context(ctx);
}

/* A daemon that refuses the connection: before it reads anything (after
 * the hello came, with after), it answers op hello, seq 0, -EAGAIN and
 * closes. */
struct refusal {
	int after;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int closed;
};

static void *daemon_refuses(void *arg)
{
	struct refusal *r = arg;
	int l = listen_socket(), c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	if (c < 0)
		exit(100);
	if (r->after) {
		struct pollfd p = {.fd = c, .events = POLLIN};
		poll(&p, 1, -1); /* the hello is there, unread */
	}
	answer(c, SN_OP_HELLO, 0, -EAGAIN, NULL, 0, NULL, 0);
	close(c);
	close(l);
	pthread_mutex_lock(&r->lock);
	r->closed = 1;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

static void test_refused(int after)
{
	struct refusal r = {.after = after, .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
	pthread_t th;
	pthread_create(&th, NULL, daemon_refuses, &r);
	struct sn_context *ctx = new_context();
	do
		ctx->s->sock = sn_open_socket(DEV);
	while (ctx->s->sock < 0 && (usleep(1000), 1));
	if (!after) { /* the daemon has closed before the hello is sent */
		pthread_mutex_lock(&r.lock);
		while (!r.closed)
			pthread_cond_wait(&r.cond, &r.lock);
		pthread_mutex_unlock(&r.lock);
	}
	int err = sn_hello(ctx);
	char what[128];
	snprintf(what, sizeof(what), "a hello refused with seq 0, %s the daemon closed, is EAGAIN (%s)",
		 after ? "after it came and" : "before it was sent, and", strerror(err));
	check(err == EAGAIN, what);
	check(held() == 0, "and the program holds no mem or maps descriptor");
	pthread_join(th, NULL);
	end_context(ctx);
}

static void *daemon_no_version(void *arg)
{
	(void)arg;
	int l = listen_socket(), c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	struct msg m;
	if (c < 0 || receive(c, &m))
		exit(100);
	for (int i = 0; i < m.nfds; i++)
		close(m.fds[i]);
	answer(c, SN_OP_HELLO, m.h.seq, -EPROTONOSUPPORT, NULL, 0, NULL, 0);
	receive(c, &m);
	close(c);
	close(l);
	return NULL;
}

static void test_hello_error(void)
{
	pthread_t th;
	pthread_create(&th, NULL, daemon_no_version, NULL);
	struct sn_context *ctx = new_context();
	int err;
	do
		err = sn_connect(ctx, DEV);
	while ((err == ENOENT || err == ECONNREFUSED) && (usleep(1000), 1));
	check(err == EPROTONOSUPPORT, "a hello answered with an error is that errno");
	close(ctx->s->sock);
	ctx->s->sock = -1;
	pthread_join(th, NULL);
	end_context(ctx);
}

/* A daemon that makes a channel (handle 7) and answers destroy_comp_channel
 * with EBUSY, then with success; it counts the destroys it got. */
static int destroys, destroy_handle_ok = 1;

static void *daemon_channels(void *arg)
{
	(void)arg;
	int l = listen_socket(), c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	struct msg m;
	if (c < 0 || receive(c, &m))
		exit(100);
	for (int i = 0; i < m.nfds; i++)
		close(m.fds[i]);
	open_session(c, &m);
	while (receive(c, &m) == 0) {
		if (m.h.op == SN_OP_CREATE_COMP_CHANNEL) {
			int p[2];
			if (pipe2(p, O_CLOEXEC))
				exit(100);
			struct sn_handle r = {7};
			answer(c, m.h.op, m.h.seq, 0, &r, sizeof(r), &p[0], 1);
			close(p[0]), close(p[1]);
		} else if (m.h.op == SN_OP_DESTROY_COMP_CHANNEL) {
			struct sn_handle h = {0};
			memcpy(&h, m.body, m.body_len == sizeof(h) ? sizeof(h) : 0);
			destroy_handle_ok = destroy_handle_ok && h.handle == 7;
			answer(c, m.h.op, m.h.seq, destroys++ == 0 ? -EBUSY : 0, NULL, 0, NULL, 0);
		} else {
			answer(c, m.h.op, m.h.seq, -EPROTO, NULL, 0, NULL, 0);
		}
	}
	close(c);
	close(l);
	return NULL;
}

static void test_destroy_channel(void)
{
	pthread_t th;
	pthread_create(&th, NULL, daemon_channels, NULL);
	struct sn_context *ctx = new_context();
	int err;
	do
		err = sn_connect(ctx, DEV);
	while ((err == ENOENT || err == ECONNREFUSED) && (usleep(1000), 1));
	struct ibv_comp_channel *ch = err ? NULL : ibv_create_comp_channel(&ctx->vctx.context);
	check(ch != NULL, "ibv_create_comp_channel");
	if (!ch)
		exit(100);
	int fd = ch->fd;
	ch->refcnt = 1; /* a CQ uses it */
	check(ibv_destroy_comp_channel(ch) == EBUSY && destroys == 0 && fcntl(fd, F_GETFD) >= 0,
	      "with a CQ on it: EBUSY, nothing sent, the pipe open");
	ch->refcnt = 0;
	int r = ibv_destroy_comp_channel(ch);
	check(r == EBUSY && destroys == 1 && fcntl(fd, F_GETFD) >= 0 && sn_channel_handle(ctx, ch) == 7,
	      "the daemon's EBUSY: the call says so and the channel stays, pipe and all");
	r = ibv_destroy_comp_channel(ch);
	check(r == 0 && destroys == 2 && destroy_handle_ok && fcntl(fd, F_GETFD) < 0,
	      "destroy_comp_channel (op 43, the channel's handle), then the pipe is closed");
	close(ctx->s->sock);
	ctx->s->sock = -1;
	pthread_join(th, NULL);
	end_context(ctx);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *dir = getenv("SOFTNIC_RUN_DIR");
	if (!dir || snprintf(sock_path, sizeof(sock_path), "%s/%s.sock", dir, DEV) >= (int)sizeof(sock_path)) {
		fprintf(stderr, "SOFTNIC_RUN_DIR: a short directory\n");
		return 100;
	}
	printf("version %d\n", SN_VERSION);
	test_hello();
	test_refused(0);
	test_refused(1);
	test_hello_error();
	test_destroy_channel();
	unlink(sock_path);
	return failed;
}
