/*
 * peer.h: what the interop test programs here share. Each program runs
 * unchanged on softnic (softnic exec, softnic's provider) and in the rxe
 * guest (rxe0, the guest's libibverbs), built once on the host against
 * Debian 12's libibverbs-dev. Its two sides meet over TCP, as
 * ibv_rc_pingpong's do: "server PORT" accepts one peer at a time,
 * "client HOST PORT" connects, retrying while the server is not up yet
 * (the guest boots slowly). They swap lines ("qp QPN GID", ...) there and
 * say what they checked on stdout, one line each ("ok  " or "FAIL"); the
 * exit status is the number of checks that failed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static int failed;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		failed++;
}

/* A peer: the TCP stream to the other side, as lines. */
struct peer {
	FILE *in, *out;
};

static struct peer peer_of(int fd)
{
	struct peer p = {.in = fdopen(fd, "r"), .out = fdopen(dup(fd), "w")};
	if (!p.in || !p.out) {
		perror("fdopen");
		exit(101);
	}
	return p;
}

/* peer_listen listens on TCP port on every address. */
static int peer_listen(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 4)) {
		perror("listen");
		exit(101);
	}
	return fd;
}

static struct peer peer_accept(int lfd)
{
	int fd = accept(lfd, NULL, NULL);
	if (fd < 0) {
		perror("accept");
		exit(101);
	}
	return peer_of(fd);
}

/* peer_connect connects to host:port, trying every half second for up to
 * five minutes: the other side may be a guest still booting. */
static struct peer peer_connect(const char *host, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
		fprintf(stderr, "bad address %s\n", host);
		exit(102);
	}
	for (int try = 0; try < 600; try++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
			return peer_of(fd);
		if (fd >= 0)
			close(fd);
		usleep(500000);
	}
	fprintf(stderr, "could not connect to %s:%d\n", host, port);
	exit(101);
}

static void say(struct peer *p, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(p->out, fmt, ap);
	va_end(ap);
	fputc('\n', p->out);
	fflush(p->out);
}

/* hear reads the peer's next line into line (without its newline); a peer
 * that hung up ends the program. */
static void hear(struct peer *p, char *line, int size)
{
	if (!fgets(line, size, p->in)) {
		fprintf(stderr, "the peer hung up\n");
		exit(100 + (failed > 0));
	}
	line[strcspn(line, "\n")] = 0;
}

/* expect reads a line and checks it is want. */
static void expect(struct peer *p, const char *want)
{
	char line[256];
	hear(p, line, sizeof(line));
	if (strcmp(line, want)) {
		fprintf(stderr, "heard %s, not %s\n", line, want);
		exit(101);
	}
}

static struct ibv_context *open_first(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = list && n > 0 ? ibv_open_device(list[0]) : NULL;
	if (!ctx) {
		fprintf(stderr, "no device\n");
		exit(101);
	}
	printf("device %s\n", ibv_get_device_name(list[0]));
	ibv_free_device_list(list);
	return ctx;
}

/* ipv4_gid finds the port's IPv4-mapped GID (::ffff:a.b.c.d, RoCE v2). */
static int ipv4_gid(struct ibv_context *ctx, union ibv_gid *gid)
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	for (int i = 0; i < 16; i++)
		if (!ibv_query_gid(ctx, 1, i, gid) && !memcmp(gid->raw, prefix, 12))
			return i;
	fprintf(stderr, "no IPv4 GID\n");
	exit(101);
}

/* A QP's address as the peer needs it. */
struct qpaddr {
	uint32_t qpn;
	union ibv_gid gid;
};

static void say_qp(struct peer *p, int i, uint32_t qpn, const union ibv_gid *g)
{
	char hex[33];
	for (int k = 0; k < 16; k++)
		sprintf(hex + 2 * k, "%02x", g->raw[k]);
	say(p, "qp %d %" PRIu32 " %s", i, qpn, hex);
}

/* hear_qp reads "qp I QPN GID" and checks I. */
static struct qpaddr hear_qp(struct peer *p, int i)
{
	char line[256], hex[40];
	int got;
	struct qpaddr a;
	hear(p, line, sizeof(line));
	if (sscanf(line, "qp %d %" SCNu32 " %39s", &got, &a.qpn, hex) != 3 || got != i || strlen(hex) != 32) {
		fprintf(stderr, "not a qp %d line: %s\n", i, line);
		exit(101);
	}
	for (int k = 0; k < 16; k++) {
		unsigned v;
		sscanf(hex + 2 * k, "%2x", &v);
		a.gid.raw[k] = v;
	}
	return a;
}

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	if (!qp) {
		perror("ibv_create_qp");
		exit(101);
	}
	return qp;
}

/* connect_rc takes an RC QP to RTS aimed at the peer's QP, with the given
 * remote access rights, at path MTU 1024 (rxe's active MTU on eth0 at 1500);
 * 0 or an errno. */
static int connect_rc(struct ibv_qp *qp, int access, int sgid, const struct qpaddr *to)
{
	struct ibv_qp_attr i = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access};
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = to->qpn,
				.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
				.ah_attr = {.is_global = 1, .port_num = 1,
					    .grh = {.dgid = to->gid, .sgid_index = sgid, .hop_limit = 64}}};
	struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
				.max_rd_atomic = 1};
	int err = ibv_modify_qp(qp, &i, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (!err)
		err = ibv_modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
						    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (!err)
		err = ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
						    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	if (err)
		fprintf(stderr, "QP %u to RTS: %s\n", qp->qp_num, strerror(err));
	return err;
}

/* next_wc_within waits up to secs seconds for the CQ's next completion; a
 * timeout gives a completion of status IBV_WC_GENERAL_ERR and wr_id 0. */
static struct ibv_wc next_wc_within(struct ibv_cq *cq, int secs)
{
	struct ibv_wc wc = {.status = IBV_WC_GENERAL_ERR};
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		if (ibv_poll_cq(cq, 1, &wc) > 0)
			return wc;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec >= secs) {
			fprintf(stderr, "no completion in %d s\n", secs);
			wc.status = IBV_WC_GENERAL_ERR;
			wc.wr_id = 0;
			return wc;
		}
	}
}

/* next_wc waits up to 60 s (ample under TCG) for the next completion. */
static struct ibv_wc next_wc(struct ibv_cq *cq) { return next_wc_within(cq, 60); }

/* checked_wc waits for a completion and checks its wr_id, status and,
 * where the status is IBV_WC_SUCCESS, its opcode. */
static struct ibv_wc checked_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status status, int opcode,
				const char *what)
{
	struct ibv_wc wc = next_wc(cq);
	int ok = wc.wr_id == wr_id && wc.status == status && (status != IBV_WC_SUCCESS || (int)wc.opcode == opcode);
	if (!ok)
		fprintf(stderr, "%s: wr_id %" PRIu64 " status %s (%d) opcode %d\n", what, wc.wr_id,
			ibv_wc_status_str(wc.status), wc.status, wc.opcode);
	check(ok, what);
	return wc;
}
