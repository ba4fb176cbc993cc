/*
 * attacker.c is an unprivileged user's libibverbs program (run through
 * `softnic exec`) that tries to keep a session's reach into a process's
 * memory after that process exec'd a setuid-root program
 * (TestExecOfSetuidProgramEndsAccess):
 *
 * 1. It opens the device, a PD, a CQ and two RC QPs, maps a page of its own
 *    at ADDR, registers it for remote read and write, and says
 *    "attacker pid=P qpn=Q1,Q2 rkey=R gid=I".
 * 2. It reads "peer QPN1 QPN2 GIDHEX" on stdin, connects its QPs to the
 *    peer's and says "connected"; the peer then checks the page is
 *    reachable.
 * 3. On "fork" it forks. The parent execs HELPER (setuid root), which maps
 *    its own secret page at ADDR and inherits stdin and stdout. The child
 *    keeps the session, unmaps its copy of ADDR (from then on only the
 *    helper has memory there), says "child pid=C", and runs the commands
 *    of FIFO: "reg ADDR LEN ACCESS" answers "reg ADDR ok rkey=R" or
 *    "reg ADDR err=ERRNO"; "quit" ends it.
 *
 * stdin is read a byte at a time, so that nothing meant for the helper is
 * taken before the exec.
 *
 * usage: attacker HELPER ADDR FIFO
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define PAGE 4096

static void die(const char *what)
{
	printf("attacker: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* read_line reads one line of fd, without its newline, a byte at a time;
 * 0 at the end of the input. */
static int read_line(int fd, char *buf, size_t n)
{
	size_t i = 0;
	char c;
	for (;;) {
		ssize_t k = read(fd, &c, 1);
		if (k <= 0)
			return i > 0;
		if (c == '\n')
			break;
		if (i + 1 < n)
			buf[i++] = c;
	}
	buf[i] = 0;
	return 1;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *dgid, int sgid)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
				.port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify_qp INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 100;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = sgid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify_qp RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 12;
	a.retry_cnt = 3;
	a.rnr_retry = 7;
	a.sq_psn = 100;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				  IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify_qp RTS");
}

/* ipv4_gid returns the index of the port's IPv4-mapped GID. */
static int ipv4_gid(struct ibv_context *ctx)
{
	struct ibv_port_attr port;
	if (ibv_query_port(ctx, 1, &port))
		die("query_port");
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	for (int i = 0; i < port.gid_tbl_len; i++) {
		union ibv_gid g;
		if (ibv_query_gid(ctx, 1, i, &g) == 0 && memcmp(g.raw, prefix, sizeof(prefix)) == 0)
			return i;
	}
	errno = ENOENT;
	die("no IPv4 GID");
	return -1;
}

/* child runs the FIFO's commands on the session it inherited. */
static void child(struct ibv_pd *pd, uintptr_t addr, const char *fifo)
{
	if (munmap((void *)addr, PAGE))
		die("munmap");
	printf("child pid=%d\n", getpid());
	int fd = open(fifo, O_RDONLY);
	if (fd < 0)
		die("open fifo");
	char line[256];
	while (read_line(fd, line, sizeof(line))) {
		unsigned long a, len;
		int access;
		if (strcmp(line, "quit") == 0)
			break;
		if (sscanf(line, "reg %lx %lu %d", &a, &len, &access) != 3) {
			printf("attacker: bad command %s\n", line);
			continue;
		}
		struct ibv_mr *mr = ibv_reg_mr(pd, (void *)a, len, access);
		if (mr)
			printf("reg %#lx ok rkey=%u\n", a, mr->rkey);
		else
			printf("reg %#lx err=%d\n", a, errno);
	}
	_exit(0);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 4) {
		fprintf(stderr, "usage: attacker HELPER ADDR FIFO\n");
		return 2;
	}
	uintptr_t addr = strtoull(argv[2], NULL, 0);
	int n;
	struct ibv_device **devs = ibv_get_device_list(&n);
	if (!devs || n < 1)
		die("no device");
	struct ibv_context *ctx = ibv_open_device(devs[0]);
	if (!ctx)
		die("open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("alloc_pd");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq)
		die("create_cq");
	struct ibv_qp *qps[2];
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr ia = {.send_cq = cq,
					      .recv_cq = cq,
					      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
					      .qp_type = IBV_QPT_RC};
		if (!(qps[i] = ibv_create_qp(pd, &ia)))
			die("create_qp");
	}
	char *page = mmap((void *)addr, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (page != (void *)addr)
		die("mmap at the fixed address");
	static const char mine[] = "attacker page ";
	for (size_t i = 0; i < PAGE; i++)
		page[i] = mine[i % (sizeof(mine) - 1)];
	struct ibv_mr *mr =
		ibv_reg_mr(pd, page, PAGE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		die("reg_mr");
	int sgid = ipv4_gid(ctx);
	printf("attacker pid=%d qpn=%u,%u rkey=%u gid=%d\n", getpid(), qps[0]->qp_num, qps[1]->qp_num, mr->rkey, sgid);

	char line[256], hex[33];
	unsigned q1, q2;
	if (!read_line(0, line, sizeof(line)) || sscanf(line, "peer %u %u %32s", &q1, &q2, hex) != 3 || strlen(hex) != 32) {
		errno = EINVAL;
		die("peer line");
	}
	union ibv_gid dgid;
	for (int i = 0; i < 16; i++)
		sscanf(hex + 2 * i, "%2hhx", &dgid.raw[i]);
	connect_qp(qps[0], q1, &dgid, sgid);
	connect_qp(qps[1], q2, &dgid, sgid);
	printf("connected\n");

	if (!read_line(0, line, sizeof(line)) || strcmp(line, "fork") != 0) {
		errno = EINVAL;
		die("fork line");
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0)
		child(pd, addr, argv[3]);
	char *hargv[] = {argv[1], argv[2], NULL};
	char *henv[] = {NULL};
	execve(argv[1], hargv, henv);
	die("exec helper");
	return 1;
}
