/*
 * aw_flush: IBTA 1.5's ATOMIC_WRITE and FLUSH between two devices
 * (TestInteropAtomicWriteFlush).
 *
 * aw_flush server PORT N is the responder: a 4 KiB region registered with
 * remote write and IBV_ACCESS_FLUSH_GLOBAL (A) and one of 64 bytes without
 * FLUSH access (B). For each of N requesters in turn it makes an RC QP
 * allowing remote write and global FLUSHes, sends "mr ADDR_A RKEY_A
 * ADDR_B RKEY_B" and its "qp 0 QPN GID", reads the requester's, connects,
 * says "ready" and waits for "done". Then it checks the region: the 64
 * bytes a requester WROTE (pattern), the 8 an ATOMIC_WRITE wrote after
 * them, nothing after those, and nothing in B.
 *
 * aw_flush client HOST PORT is a requester: it WRITEs the 64 bytes and
 * ATOMIC_WRITEs the word after them (ibv_wr_atomic_write: an
 * IBV_WC_ATOMIC_WRITE completion), then, where its library has
 * ibv_wr_flush, FLUSHes (global visibility) a range of A and all of A,
 * both IBV_WC_FLUSH successes, and a range of B, which the responder
 * refuses: IBV_WC_REM_ACCESS_ERR. Without ibv_wr_flush (softnic's
 * provider, built on rdma-core 44) it says so and leaves the FLUSHes to
 * another requester (the test's Go client).
 */
#include <stddef.h>

#include "peer.h"

/* rdma-core 47 added FLUSH to libibverbs: struct ibv_qp_ex gained wr_flush
 * after wr_atomic_write, where rdma-core 44's headers end. The values and
 * the layout, declared here for a program built on 44's headers. */
#define QP_EX_WITH_FLUSH (1 << 11)
#define WC_FLUSH 8
#define FLUSH_TYPE_GLOBAL 1
#define FLUSH_LEVEL_RANGE 0
#define FLUSH_LEVEL_MR 1
#ifndef IBV_ACCESS_FLUSH_GLOBAL
#define IBV_ACCESS_FLUSH_GLOBAL (1 << 8)
#endif
#define DEVICE_FLUSH_GLOBAL (1ULL << 38)
#define DEVICE_ATOMIC_WRITE (1ULL << 40)

struct qp_ex47 {
	struct ibv_qp_ex ex;
	void (*wr_flush)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, size_t len, uint8_t type,
			 uint8_t level);
};
_Static_assert(offsetof(struct qp_ex47, wr_flush) == sizeof(struct ibv_qp_ex), "wr_flush follows 44's ibv_qp_ex");

#define WORD_OFF 64
#define MAXREQ 4

static const uint8_t word[8] = {0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18};

static uint8_t pattern(size_t i) { return (uint8_t)(i * 7 + 7); }

static const int qp_access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_FLUSH_GLOBAL;

static void print_caps(struct ibv_context *ctx)
{
	struct ibv_device_attr_ex dx;
	if (ibv_query_device_ex(ctx, NULL, &dx))
		return;
	printf("caps: ATOMIC_WRITE %d FLUSH_GLOBAL %d\n", !!(dx.device_cap_flags_ex & DEVICE_ATOMIC_WRITE),
	       !!(dx.device_cap_flags_ex & DEVICE_FLUSH_GLOBAL));
}

static int server(int port, int n)
{
	struct ibv_context *ctx = open_first();
	print_caps(ctx);
	union ibv_gid gid;
	int sgid = ipv4_gid(ctx, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	static uint8_t a[4096] __attribute__((aligned(4096))), b[64] __attribute__((aligned(64)));
	struct ibv_mr *mra = pd ? ibv_reg_mr(pd, a, sizeof(a),
					     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_FLUSH_GLOBAL)
				: NULL;
	struct ibv_mr *mrb = pd ? ibv_reg_mr(pd, b, sizeof(b), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	check(cq && mra && mrb, "a region with IBV_ACCESS_FLUSH_GLOBAL, one without");
	if (!cq || !mra || !mrb)
		return failed;
	int lfd = peer_listen(port);
	for (int k = 0; k < n; k++) {
		struct peer p = peer_accept(lfd);
		struct ibv_qp *qp = rc_qp(pd, cq);
		say(&p, "mr %" PRIu64 " %" PRIu32 " %" PRIu64 " %" PRIu32, (uint64_t)(uintptr_t)a, mra->rkey,
		    (uint64_t)(uintptr_t)b, mrb->rkey);
		say_qp(&p, 0, qp->qp_num, &gid);
		struct qpaddr to = hear_qp(&p, 0);
		check(!connect_rc(qp, qp_access, sgid, &to), "a QP allowing remote write and FLUSH_GLOBAL connected");
		say(&p, "ready");
		expect(&p, "done");
		printf("requester %d done\n", k);
		fclose(p.in);
		fclose(p.out);
	}
	int same = 1;
	for (size_t i = 0; i < WORD_OFF; i++)
		same &= a[i] == pattern(i);
	check(same, "the WRITE's 64 bytes landed");
	check(!memcmp(a + WORD_OFF, word, 8), "the ATOMIC_WRITE's 8 bytes landed after them, as sent");
	static const uint8_t zero[64];
	check(!memcmp(a + WORD_OFF + 8, zero, 64) && !memcmp(b, zero, sizeof(b)), "nothing else was written");
	return failed;
}

/* flushes FLUSHes a range of A and all of A (successes) and a range of B
 * (refused). */
static void flushes(struct ibv_qp_ex *x, struct ibv_cq *cq, uint64_t aa, uint32_t ka, uint64_t ab, uint32_t kb)
{
	struct qp_ex47 *x47 = (struct qp_ex47 *)x;
	struct {
		uint64_t addr;
		uint32_t rkey;
		size_t len;
		uint8_t level;
		enum ibv_wc_status want;
		const char *what;
	} f[] = {
		{aa, ka, WORD_OFF + 8, FLUSH_LEVEL_RANGE, IBV_WC_SUCCESS, "a FLUSH (global, range) of A: IBV_WC_FLUSH"},
		{aa, ka, 0, FLUSH_LEVEL_MR, IBV_WC_SUCCESS, "a FLUSH (global, the whole region) of A: IBV_WC_FLUSH"},
		{ab, kb, 8, FLUSH_LEVEL_RANGE, IBV_WC_REM_ACCESS_ERR,
		 "a FLUSH of B, registered without FLUSH access: IBV_WC_REM_ACCESS_ERR"},
	};
	for (int i = 0; i < 3; i++) {
		ibv_wr_start(x);
		x->wr_id = 10 + i;
		x->wr_flags = IBV_SEND_SIGNALED;
		x47->wr_flush(x, f[i].rkey, f[i].addr, f[i].len, FLUSH_TYPE_GLOBAL, f[i].level);
		if (ibv_wr_complete(x)) {
			check(0, f[i].what);
			continue;
		}
		/* 20 s: a FLUSH the responder never answers (see
		 * TestInteropAtomicWriteFlush on rxe's) ends the checks early. */
		struct ibv_wc wc = next_wc_within(cq, 20);
		int ok = wc.wr_id == 10 + (uint64_t)i && wc.status == f[i].want &&
			 (f[i].want != IBV_WC_SUCCESS || wc.opcode == WC_FLUSH);
		if (!ok)
			fprintf(stderr, "%s: wr_id %" PRIu64 " status %s (%d) opcode %d\n", f[i].what, wc.wr_id,
				ibv_wc_status_str(wc.status), wc.status, wc.opcode);
		check(ok, f[i].what);
		if (!ok)
			break; /* the QP is in ERR, or the responder is gone */
	}
}

static int client(const char *host, int port)
{
	struct ibv_context *ctx = open_first();
	print_caps(ctx);
	union ibv_gid gid;
	int sgid = ipv4_gid(ctx, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	static uint8_t buf[64];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = pattern(i);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!cq || !mr)
		return 101;
	/* A provider that takes IBV_QP_EX_WITH_FLUSH was built on rdma-core 47
	 * or later (rxe's, softnic's and mlx5's refuse flags they do not
	 * know), so its ibv_qp_ex has wr_flush. */
	struct ibv_qp_init_attr_ex qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = pd,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_ATOMIC_WRITE |
							   QP_EX_WITH_FLUSH,
					 .cap = {.max_send_wr = 8, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &qa);
	int can_flush = qp != NULL;
	if (!qp) {
		printf("note: the provider takes no IBV_QP_EX_WITH_FLUSH (%s): no FLUSH from this side\n",
		       strerror(errno));
		qa.send_ops_flags &= ~QP_EX_WITH_FLUSH;
		qp = ibv_create_qp_ex(ctx, &qa);
	}
	struct ibv_qp_ex *x = qp ? ibv_qp_to_qp_ex(qp) : NULL;
	check(x != NULL, "an RC QP with IBV_QP_EX_WITH_ATOMIC_WRITE");
	if (!x)
		return failed;
	if (can_flush)
		check(((struct qp_ex47 *)x)->wr_flush != NULL, "the QP has ibv_wr_flush (IBV_QP_EX_WITH_FLUSH)");
	struct peer p = peer_connect(host, port);
	char line[256];
	uint64_t aa, ab;
	uint32_t ka, kb;
	hear(&p, line, sizeof(line));
	if (sscanf(line, "mr %" SCNu64 " %" SCNu32 " %" SCNu64 " %" SCNu32, &aa, &ka, &ab, &kb) != 4) {
		fprintf(stderr, "not an mr line: %s\n", line);
		return 101;
	}
	struct qpaddr to = hear_qp(&p, 0);
	say_qp(&p, 0, qp->qp_num, &gid);
	check(!connect_rc(qp, 0, sgid, &to), "the QP connected");
	expect(&p, "ready");

	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = 0;
	ibv_wr_rdma_write(x, ka, aa);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf, sizeof(buf));
	x->wr_id = 2;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(x, ka, aa + WORD_OFF, word);
	check(!ibv_wr_complete(x), "a WRITE and an ATOMIC_WRITE posted");
	checked_wc(cq, 2, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE, "the ATOMIC_WRITE completed: IBV_WC_ATOMIC_WRITE");
	if (can_flush && ((struct qp_ex47 *)x)->wr_flush)
		flushes(x, cq, aa, ka, ab, kb);
	say(&p, "done");
	return failed;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && !strcmp(argv[1], "server")) {
		int n = atoi(argv[3]);
		return server(atoi(argv[2]), n < 1 ? 1 : n > MAXREQ ? MAXREQ : n);
	}
	if (argc == 4 && !strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]));
	fprintf(stderr, "usage: aw_flush server PORT N | client HOST PORT\n");
	return 102;
}
