/*
 * mw_peer: memory windows between two devices (TestInteropMemoryWindow).
 *
 * mw_peer server PORT owns the windows: a region registered with
 * IBV_ACCESS_MW_BIND, four RC QPs, and one window per round, each round
 * on its own QP pair (the denied access at its end takes both QPs of the
 * pair to ERR):
 *   0: a type 2 window bound by IBV_WR_BIND_MW, invalidated by the
 *      owner's IBV_WR_LOCAL_INV;
 *   1: a type 2 window bound by IBV_WR_BIND_MW, invalidated by the peer's
 *      IBV_WR_SEND_WITH_INV (the owner's receive carries the rkey and says
 *      it was invalidated: see with_inv_flag for rxe's way of saying so);
 *   2: a type 1 window bound by ibv_bind_mw, ended by ibv_dealloc_mw;
 *   3: a type 2 window bound by ibv_wr_bind_mw, invalidated by
 *      ibv_wr_local_inv (the ibv_wr_* API, on a QP made by
 *      ibv_create_qp_ex).
 * It sends "mw R ADDR RKEY" for each; the client WRITEs 64 bytes through
 * the window and READs them back and READs 64 bytes the owner put there,
 * checking both; the owner checks the WRITE landed and ends the window;
 * then the client's access through the old rkey must fail with
 * IBV_WC_REM_ACCESS_ERR (a READ in round 1, a WRITE in the others, which
 * the owner checks wrote nothing).
 *
 * mw_peer client HOST PORT is the peer that uses the windows.
 */
#include "peer.h"

#define ROUNDS 4
#define WIN 4096
#define WOFF 256  /* where the client WRITEs, in the window */
#define DOFF 1024 /* where the denied WRITE would land */
#define ROFF 2048 /* what the owner put there for the client to READ */

static uint8_t owner_byte(int r, int i) { return (uint8_t)(r * 31 + i * 3 + 1); }
static uint8_t client_byte(int r, int i) { return (uint8_t)(r * 17 + i * 5 + 0x80); }

static const char *round_name[ROUNDS] = {"type 2, LOCAL_INV", "type 2, the peer's SEND_WITH_INV",
					 "type 1, ibv_dealloc_mw", "type 2, ibv_wr_bind_mw and ibv_wr_local_inv"};

static void checkf(int ok, const char *fmt, int r)
{
	char what[160];
	snprintf(what, sizeof(what), fmt, round_name[r]);
	check(ok, what);
}

struct side;
static struct ibv_qp *rc_qp_wr(struct side *s);

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp[ROUNDS];
	int sgid;
};

/* rc_qp_wr makes an RC QP whose work requests the ibv_wr_* API builds:
 * WRITE and READ for the peer, BIND_MW and LOCAL_INV for the owner. */
static struct ibv_qp *rc_qp_wr(struct side *s)
{
	struct ibv_qp_init_attr_ex qa = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC, .pd = s->pd,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
							   IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV,
					 .cap = {.max_send_wr = 8, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp_ex(s->ctx, &qa);
	if (!qp || !ibv_qp_to_qp_ex(qp)) {
		perror("ibv_create_qp_ex with IBV_QP_EX_WITH_BIND_MW");
		exit(101);
	}
	return qp;
}

/* setup makes the side's QPs, swaps their addresses with the peer's
 * (the server's first) and connects them. */
static struct side setup(struct peer *p, int server)
{
	struct side s = {.ctx = open_first()};
	union ibv_gid gid;
	s.sgid = ipv4_gid(s.ctx, &gid);
	s.pd = ibv_alloc_pd(s.ctx);
	s.cq = ibv_create_cq(s.ctx, 32, NULL, NULL, 0);
	if (!s.pd || !s.cq) {
		fprintf(stderr, "PD or CQ\n");
		exit(101);
	}
	for (int r = 0; r < ROUNDS; r++)
		s.qp[r] = r == 3 ? rc_qp_wr(&s) : rc_qp(s.pd, s.cq);
	struct qpaddr to[ROUNDS];
	for (int r = 0; r < ROUNDS; r++) {
		if (server) {
			say_qp(p, r, s.qp[r]->qp_num, &gid);
			to[r] = hear_qp(p, r);
		} else {
			to[r] = hear_qp(p, r);
			say_qp(p, r, s.qp[r]->qp_num, &gid);
		}
	}
	int ok = 1;
	for (int r = 0; r < ROUNDS; r++)
		ok &= !connect_rc(s.qp[r], IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, s.sgid, &to[r]);
	check(ok, "the RC QPs connected to the peer's");
	if (!ok)
		exit(failed);
	return s;
}

/* bind_window binds a window of round r over win, reporting its rkey. */
static struct ibv_mw *bind_window(struct side *s, int r, struct ibv_mr *mr, uint8_t *win, uint32_t *rkey)
{
	enum ibv_mw_type type = r == 2 ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2;
	struct ibv_mw *mw = ibv_alloc_mw(s->pd, type);
	checkf(mw && mw->type == type, "ibv_alloc_mw (%s)", r);
	if (!mw)
		exit(failed);
	struct ibv_mw_bind_info info = {.mr = mr, .addr = (uintptr_t)win, .length = WIN,
					.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
	int err;
	if (r == 3) {
		struct ibv_qp_ex *x = ibv_qp_to_qp_ex(s->qp[r]);
		*rkey = ibv_inc_rkey(mw->rkey);
		ibv_wr_start(x);
		x->wr_id = 10 + r;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_bind_mw(x, mw, *rkey, &info);
		err = ibv_wr_complete(x);
	} else if (type == IBV_MW_TYPE_2) {
		struct ibv_send_wr wr = {.wr_id = 10 + r, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED},
				   *bad;
		wr.bind_mw.mw = mw;
		wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
		wr.bind_mw.bind_info = info;
		err = ibv_post_send(s->qp[r], &wr, &bad);
		*rkey = wr.bind_mw.rkey;
	} else {
		struct ibv_mw_bind mb = {.wr_id = 10 + r, .send_flags = IBV_SEND_SIGNALED, .bind_info = info};
		uint32_t before = mw->rkey;
		err = ibv_bind_mw(s->qp[r], mw, &mb);
		*rkey = mw->rkey;
		checkf(!err && mw->rkey != before, "ibv_bind_mw gave the window a new rkey (%s)", r);
	}
	checkf(!err, "bind posted (%s)", r);
	checked_wc(s->cq, 10 + r, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "the bind completed: IBV_WC_BIND_MW");
	return mw;
}

/* rxe (Linux's rxe_resp.c do_complete, to this day) writes the kernel's
 * IB_WC_WITH_INVALIDATE, 1 << 2, into the completion userspace reads, and
 * rdma-core's rxe provider copies it as it is: libibverbs' IBV_WC_WITH_INV
 * is 1 << 3, and 1 << 2 is IBV_WC_IP_CSUM_OK. So on rxe that is the flag
 * to expect; everywhere else IBV_WC_WITH_INV. */
#define RXE_WC_WITH_INVALIDATE (1 << 2)

static unsigned with_inv_flag(struct ibv_context *ctx)
{
	return strncmp(ibv_get_device_name(ctx->device), "rxe", 3) ? IBV_WC_WITH_INV : RXE_WC_WITH_INVALIDATE;
}

/* end_window ends round r's window: LOCAL_INV, the peer's SEND_WITH_INV
 * (whose receive was posted before the rkey went out), dealloc, or
 * ibv_wr_local_inv. */
static void end_window(struct side *s, struct peer *p, int r, struct ibv_mw *mw, uint32_t rkey)
{
	if (r == 0) {
		struct ibv_send_wr wr = {.wr_id = 20, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED}, *bad;
		wr.invalidate_rkey = rkey;
		check(!ibv_post_send(s->qp[r], &wr, &bad), "IBV_WR_LOCAL_INV posted");
		checked_wc(s->cq, 20, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV, "IBV_WR_LOCAL_INV completed: IBV_WC_LOCAL_INV");
		check(!ibv_dealloc_mw(mw), "ibv_dealloc_mw of the invalidated window");
	} else if (r == 1) {
		say(p, "invalidate %d %" PRIu32, r, rkey);
		struct ibv_wc wc = checked_wc(s->cq, 30, IBV_WC_SUCCESS, IBV_WC_RECV, "the SEND_WITH_INV received");
		printf("the receive: wc_flags %#x invalidated_rkey %#x\n", wc.wc_flags, wc.invalidated_rkey);
		check(wc.invalidated_rkey == rkey, "the receive carries the window's rkey");
		check(wc.wc_flags & with_inv_flag(s->ctx), "the receive says the rkey was invalidated");
		check(!ibv_dealloc_mw(mw), "ibv_dealloc_mw of the invalidated window");
	} else if (r == 2) {
		check(!ibv_dealloc_mw(mw), "ibv_dealloc_mw of the bound type 1 window");
	} else {
		struct ibv_qp_ex *x = ibv_qp_to_qp_ex(s->qp[r]);
		ibv_wr_start(x);
		x->wr_id = 21;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_local_inv(x, rkey);
		check(!ibv_wr_complete(x), "ibv_wr_local_inv posted");
		checked_wc(s->cq, 21, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV, "ibv_wr_local_inv completed: IBV_WC_LOCAL_INV");
		check(!ibv_dealloc_mw(mw), "ibv_dealloc_mw of the invalidated window");
	}
}

static int server(int port)
{
	int lfd = peer_listen(port);
	struct peer p = peer_accept(lfd);
	struct side s = setup(&p, 1);
	static uint8_t buf[ROUNDS * WIN] __attribute__((aligned(4096))), msg[64];
	struct ibv_mr *mr = ibv_reg_mr(s.pd, buf, sizeof(buf),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					       IBV_ACCESS_MW_BIND);
	struct ibv_mr *mmr = ibv_reg_mr(s.pd, msg, sizeof(msg), IBV_ACCESS_LOCAL_WRITE);
	check(mr && mmr, "ibv_reg_mr with IBV_ACCESS_MW_BIND");
	if (!mr || !mmr)
		return failed;
	for (int r = 0; r < ROUNDS; r++) {
		uint8_t *win = buf + r * WIN;
		for (int i = 0; i < WIN; i++)
			win[i] = owner_byte(r, i);
		if (r == 1) {
			struct ibv_sge sge = {.addr = (uintptr_t)msg, .length = sizeof(msg), .lkey = mmr->lkey};
			struct ibv_recv_wr rw = {.wr_id = 30, .sg_list = &sge, .num_sge = 1}, *bad;
			check(!ibv_post_recv(s.qp[r], &rw, &bad), "a receive posted for the SEND_WITH_INV");
		}
		uint32_t rkey;
		struct ibv_mw *mw = bind_window(&s, r, mr, win, &rkey);
		say(&p, "mw %d %" PRIu64 " %" PRIu32, r, (uint64_t)(uintptr_t)win, rkey);
		expect(&p, "used");
		int same = 1;
		for (int i = 0; i < 64; i++)
			same &= win[WOFF + i] == client_byte(r, i);
		checkf(same, "the peer's WRITE through the window landed (%s)", r);
		end_window(&s, &p, r, mw, rkey);
		say(&p, "ended %d", r);
		expect(&p, "denied");
		if (r == 1)
			continue; /* that round's denied access is a READ */
		same = 1;
		for (int i = 0; i < 64; i++)
			same &= win[DOFF + i] == owner_byte(r, DOFF + i);
		checkf(same, "the WRITE through the dead rkey changed nothing (%s)", r);
	}
	check(!ibv_dereg_mr(mr), "ibv_dereg_mr once no window is bound");
	say(&p, "bye");
	return failed;
}

/* rdma posts a WRITE or READ of 64 bytes at buf through rkey and waits for
 * its completion's status. */
static struct ibv_wc rdma(struct side *s, int r, enum ibv_wr_opcode op, struct ibv_mr *mr, uint8_t *buf,
			  uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 40, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(s->qp[r], &wr, &bad)) {
		struct ibv_wc wc = {.status = IBV_WC_GENERAL_ERR};
		fprintf(stderr, "ibv_post_send failed\n");
		return wc;
	}
	return next_wc(s->cq);
}

static int client(const char *host, int port)
{
	struct peer p = peer_connect(host, port);
	struct side s = setup(&p, 0);
	static uint8_t wbuf[64], rbuf[64];
	struct ibv_mr *mr = ibv_reg_mr(s.pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *wmr = ibv_reg_mr(s.pd, wbuf, sizeof(wbuf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr || !wmr)
		return 101;
	for (int r = 0; r < ROUNDS; r++) {
		char line[256];
		int got;
		uint64_t addr;
		uint32_t rkey;
		hear(&p, line, sizeof(line));
		if (sscanf(line, "mw %d %" SCNu64 " %" SCNu32, &got, &addr, &rkey) != 3 || got != r) {
			fprintf(stderr, "not an mw %d line: %s\n", r, line);
			return 101;
		}
		for (int i = 0; i < 64; i++)
			wbuf[i] = client_byte(r, i);
		struct ibv_wc wc = rdma(&s, r, IBV_WR_RDMA_WRITE, wmr, wbuf, addr + WOFF, rkey);
		checkf(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE, "a WRITE through the window (%s)", r);
		wc = rdma(&s, r, IBV_WR_RDMA_READ, mr, rbuf, addr + WOFF, rkey);
		checkf(wc.status == IBV_WC_SUCCESS && !memcmp(rbuf, wbuf, 64), "a READ of it back through the window (%s)", r);
		wc = rdma(&s, r, IBV_WR_RDMA_READ, mr, rbuf, addr + ROFF, rkey);
		int same = wc.status == IBV_WC_SUCCESS;
		for (int i = 0; i < 64; i++)
			same &= rbuf[i] == owner_byte(r, ROFF + i);
		checkf(same, "a READ of the owner's bytes through the window (%s)", r);
		say(&p, "used");
		if (r == 1) {
			uint32_t inv;
			hear(&p, line, sizeof(line));
			if (sscanf(line, "invalidate 1 %" SCNu32, &inv) != 1 || inv != rkey) {
				fprintf(stderr, "not an invalidate line: %s\n", line);
				return 101;
			}
			struct ibv_sge sge = {.addr = (uintptr_t)wbuf, .length = 8, .lkey = wmr->lkey};
			struct ibv_send_wr wr = {.wr_id = 50, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
						 .send_flags = IBV_SEND_SIGNALED},
					   *bad;
			wr.invalidate_rkey = rkey;
			check(!ibv_post_send(s.qp[r], &wr, &bad), "IBV_WR_SEND_WITH_INV posted");
			checked_wc(s.cq, 50, IBV_WC_SUCCESS, IBV_WC_SEND, "the SEND_WITH_INV completed");
		}
		char want[32];
		snprintf(want, sizeof(want), "ended %d", r);
		expect(&p, want);
		/* Round 1 tries a READ, the others a WRITE. */
		enum ibv_wr_opcode op = r == 1 ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
		wc = rdma(&s, r, op, r == 1 ? mr : wmr, r == 1 ? rbuf : wbuf, addr + DOFF, rkey);
		if (wc.status != IBV_WC_REM_ACCESS_ERR)
			fprintf(stderr, "the access through the dead rkey: %s (%d)\n", ibv_wc_status_str(wc.status),
				wc.status);
		checkf(wc.status == IBV_WC_REM_ACCESS_ERR, "an access through the dead rkey: IBV_WC_REM_ACCESS_ERR (%s)", r);
		say(&p, "denied");
	}
	expect(&p, "bye");
	return failed;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "server"))
		return server(atoi(argv[2]));
	if (argc == 4 && !strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]));
	fprintf(stderr, "usage: mw_peer server PORT | client HOST PORT\n");
	return 102;
}
