/*
 * atomic_write: IBTA 1.5's ATOMIC_WRITE between two devices, and the
 * region a peer's FLUSH targets (TestProviderAtomicWriteFlush). Also the
 * program to run against a Linux rxe peer (see the test's comment).
 *
 * atomic_write server N: registers a 4 KiB region with remote write and
 * FLUSH_GLOBAL and one of 64 bytes with neither, makes N RC QPs allowing
 * remote write and FLUSH_GLOBAL, and prints
 *	"mr ADDR RKEY ADDR2 RKEY2" and "qp I QPN GID" for each QP,
 * reads "peer I QPN GID" for each from stdin and connects it, says
 * "ready" (start the client's requests only then: its unaligned
 * ATOMIC_WRITE takes the QP to ERR), and at the next stdin line checks
 * the region: 64 bytes a peer
 * WROTE (pattern 7) and the 8 bytes an ATOMIC_WRITE wrote after them.
 *
 * atomic_write client: checks ibv_query_device_ex's ATOMIC_WRITE and
 * FLUSH_GLOBAL capabilities (and no FLUSH_PERSISTENT), makes an RC QP
 * with IBV_QP_EX_WITH_ATOMIC_WRITE, prints "qp 0 QPN GID", reads
 * "mr ..." and "peer 0 QPN GID", connects, WRITEs the 64 bytes and
 * ATOMIC_WRITEs the word after them (an IBV_WC_ATOMIC_WRITE completion),
 * then ATOMIC_WRITEs to an unaligned address, which the responder NAKs
 * (IBV_WC_REM_INV_REQ_ERR).
 *
 * GIDs go as 32 hex digits; each side uses its port's IPv4 GID (RoCE v2).
 * The exit status is the number of checks that failed.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#include "checks.h"

/* rdma-core 44's verbs.h has ATOMIC_WRITE but not FLUSH (rdma-core 47);
 * the kernel ABI's values. */
#ifndef IBV_ACCESS_FLUSH_GLOBAL
#define IBV_ACCESS_FLUSH_GLOBAL (1 << 8)
#endif
#define DEVICE_FLUSH_GLOBAL (1ULL << 38)
#define DEVICE_FLUSH_PERSISTENT (1ULL << 39)
#define DEVICE_ATOMIC_WRITE (1ULL << 40)

#define MAXQP 4
#define WORD_OFF 64

static const uint8_t word[8] = {0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18};

static uint8_t pattern(size_t i) { return (uint8_t)(i * 7 + 7); }

/* ipv4_gid finds the port's IPv4-mapped GID (::ffff:a.b.c.d). */
static int ipv4_gid(struct ibv_context *ctx, union ibv_gid *gid)
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	for (int i = 0; i < 16; i++)
		if (!ibv_query_gid(ctx, 1, i, gid) && !memcmp(gid->raw, prefix, 12))
			return i;
	return -1;
}

static void print_gid(const union ibv_gid *g)
{
	for (int i = 0; i < 16; i++)
		printf("%02x", g->raw[i]);
}

static int parse_gid(const char *s, union ibv_gid *g)
{
	for (int i = 0; i < 16; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		g->raw[i] = v;
	}
	return 0;
}

/* rts takes qp to RTS connected to dest_qpn at dgid, allowing remote
 * write and global FLUSHes (which rxe asks of the QP as of the region). */
static int rts(struct ibv_qp *qp, int sgid, uint32_t dest_qpn, const union ibv_gid *dgid)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_FLUSH_GLOBAL};
	int err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (err)
		fprintf(stderr, "atomic_write: QP %u to INIT: %s\n", qp->qp_num, strerror(err));
	else if ((err = qp_rts(qp, sgid, dest_qpn, dgid)))
		fprintf(stderr, "atomic_write: QP %u to RTR and RTS, aimed at %u: failed\n", qp->qp_num, dest_qpn);
	return err;
}

static struct ibv_context *open_first(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		fprintf(stderr, "no device\n");
		exit(101);
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!ctx) {
		perror("ibv_open_device");
		exit(101);
	}
	return ctx;
}

/* read_peer reads "peer I QPN GID". */
static int read_peer(int *i, uint32_t *qpn, union ibv_gid *gid)
{
	char line[128], hex[40];
	if (!fgets(line, sizeof(line), stdin) || sscanf(line, "peer %d %" SCNu32 " %39s", i, qpn, hex) != 3)
		return -1;
	return parse_gid(hex, gid);
}

static int server(int nqp)
{
	struct ibv_context *ctx = open_first();
	union ibv_gid gid;
	int sgid = ipv4_gid(ctx, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	static uint8_t buf[4096] __attribute__((aligned(4096))), other[64] __attribute__((aligned(64)));
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_FLUSH_GLOBAL);
	struct ibv_mr *mr2 = ibv_reg_mr(pd, other, sizeof(other), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	check(sgid >= 0 && pd && cq && mr && mr2, "server: an IPv4 GID, a region with FLUSH_GLOBAL, one without");
	if (sgid < 0 || !mr || !mr2)
		return failed;
	printf("mr %" PRIu64 " %" PRIu32 " %" PRIu64 " %" PRIu32 "\n", (uint64_t)(uintptr_t)buf, mr->rkey,
	       (uint64_t)(uintptr_t)other, mr2->rkey);
	struct ibv_qp *qps[MAXQP];
	for (int i = 0; i < nqp; i++) {
		struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
		qps[i] = ibv_create_qp(pd, &qa);
		if (!qps[i]) {
			check(0, "server: create QP");
			return failed;
		}
		printf("qp %d %" PRIu32 " ", i, qps[i]->qp_num);
		print_gid(&gid);
		printf("\n");
	}
	fflush(stdout);
	for (int k = 0; k < nqp; k++) {
		int i;
		uint32_t qpn;
		union ibv_gid pg;
		if (read_peer(&i, &qpn, &pg) || i < 0 || i >= nqp) {
			check(0, "server: a peer line");
			return failed;
		}
		check(!rts(qps[i], sgid, qpn, &pg), "server: QP connected, allowing remote write and FLUSH_GLOBAL");
	}
	wait_line("ready");
	int same = 1;
	for (size_t i = 0; i < WORD_OFF; i++)
		same &= buf[i] == pattern(i);
	check(same, "server: the WRITE's 64 bytes landed");
	check(!memcmp(buf + WORD_OFF, word, 8), "server: the ATOMIC_WRITE's 8 bytes landed after them, as sent");
	uint8_t zero[8] = {0};
	check(!memcmp(buf + WORD_OFF + 8, zero, 8) && !memcmp(other, zero, 8),
	      "server: the refused requests wrote nothing");
	return failed;
}

/* complete posts nothing: it waits for the one completion of the QP's
 * last request and returns it. */
static struct ibv_wc complete(struct ibv_cq *cq)
{
	struct ibv_wc wc = {.status = IBV_WC_GENERAL_ERR};
	for (long spins = 0; spins < 2000000000L; spins++)
		if (ibv_poll_cq(cq, 1, &wc))
			break;
	return wc;
}

static int client(void)
{
	struct ibv_context *ctx = open_first();
	struct ibv_device_attr_ex dx;
	int qerr = ibv_query_device_ex(ctx, NULL, &dx);
	check(!qerr && (dx.device_cap_flags_ex & DEVICE_ATOMIC_WRITE) && (dx.device_cap_flags_ex & DEVICE_FLUSH_GLOBAL) &&
		      !(dx.device_cap_flags_ex & DEVICE_FLUSH_PERSISTENT),
	      "client: ATOMIC_WRITE and FLUSH_GLOBAL capabilities, no FLUSH_PERSISTENT");
	union ibv_gid gid;
	int sgid = ipv4_gid(ctx, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	static uint8_t buf[64];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = pattern(i);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr_ex qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = pd,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_ATOMIC_WRITE,
					 .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &qa);
	struct ibv_qp_ex *x = qp ? ibv_qp_to_qp_ex(qp) : NULL;
	check(sgid >= 0 && mr && x, "client: an RC QP with IBV_QP_EX_WITH_ATOMIC_WRITE");
	if (sgid < 0 || !mr || !x)
		return failed;
	printf("qp 0 %" PRIu32 " ", qp->qp_num);
	print_gid(&gid);
	printf("\n");
	fflush(stdout);
	char line[128];
	uint64_t raddr, raddr2;
	uint32_t rkey, rkey2, qpn;
	int i;
	union ibv_gid pg;
	if (!fgets(line, sizeof(line), stdin) ||
	    sscanf(line, "mr %" SCNu64 " %" SCNu32 " %" SCNu64 " %" SCNu32, &raddr, &rkey, &raddr2, &rkey2) != 4 ||
	    read_peer(&i, &qpn, &pg)) {
		check(0, "client: the server's lines");
		return failed;
	}
	check(!rts(qp, sgid, qpn, &pg), "client: QP connected");

	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = 0;
	ibv_wr_rdma_write(x, rkey, raddr);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf, sizeof(buf));
	x->wr_id = 2;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(x, rkey, raddr + WORD_OFF, word);
	check(!ibv_wr_complete(x), "client: a WRITE and an ATOMIC_WRITE posted");
	struct ibv_wc wc = complete(cq);
	check(wc.status == IBV_WC_SUCCESS && wc.wr_id == 2 && wc.opcode == IBV_WC_ATOMIC_WRITE,
	      "client: the ATOMIC_WRITE completed (IBV_WC_ATOMIC_WRITE)");

	ibv_wr_start(x);
	x->wr_id = 3;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(x, rkey, raddr + WORD_OFF + 12, word);
	check(!ibv_wr_complete(x), "client: an unaligned ATOMIC_WRITE posted");
	wc = complete(cq);
	check(wc.status == IBV_WC_REM_INV_REQ_ERR && wc.wr_id == 3,
	      "client: the unaligned ATOMIC_WRITE NAKed (IBV_WC_REM_INV_REQ_ERR)");
	return failed;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "server"))
		return server(atoi(argv[2]) > MAXQP ? MAXQP : atoi(argv[2]));
	if (argc == 2 && !strcmp(argv[1], "client"))
		return client();
	fprintf(stderr, "usage: atomic_write server NQP | client\n");
	return 102;
}
