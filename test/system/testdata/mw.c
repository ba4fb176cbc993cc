/*
 * mw.c: memory windows through the provider, on pairs of QPs of one
 * device connected to each other (loopback), the second binding windows
 * that the first WRITEs through: the device's caps, ibv_alloc_mw of each type, a type 2 window
 * bound by IBV_WR_BIND_MW and reached by a WRITE, ibv_dereg_mr of its
 * region refused while it is bound, IBV_WR_LOCAL_INV, then a WRITE
 * through the dead rkey failing; a type 1 window bound by ibv_bind_mw,
 * used, and deallocated while bound.
 */
#include <errno.h>

#include "checks.h"

static struct ibv_wc poll_one(struct ibv_cq *cq)
{
	struct ibv_wc wc = {.status = IBV_WC_GENERAL_ERR};
	for (long i = 0; i < 200000000; i++)
		if (ibv_poll_cq(cq, 1, &wc) != 0)
			break;
	return wc;
}

static int post_write(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

/* qp_pair makes two RC QPs connected to each other over the port's first
 * GID; 0 or -1. */
static int qp_pair(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_qp **a, struct ibv_qp **b)
{
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	union ibv_gid gid;
	*a = ibv_create_qp(pd, &qa);
	*b = ibv_create_qp(pd, &qa);
	if (!*a || !*b || ibv_query_gid(ctx, 1, 0, &gid))
		return -1;
	return connect_qp(*a, 0, (*b)->qp_num, &gid) || connect_qp(*b, 0, (*a)->qp_num, &gid) ? -1 : 0;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	if (!ctx) {
		printf("FAIL no device\n");
		return 1;
	}
	struct ibv_device_attr da;
	check(ibv_query_device(ctx, &da) == 0 && da.max_mw > 0, "max_mw");
	check((da.device_cap_flags & IBV_DEVICE_MEM_WINDOW) && (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B),
	      "MEM_WINDOW and MEM_WINDOW_TYPE_2B");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	static char buf[8192];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
	check(mr != NULL, "reg_mr with IBV_ACCESS_MW_BIND");
	struct ibv_qp *qp, *peer;
	check(qp_pair(ctx, pd, cq, &peer, &qp) == 0, "two QPs connected to each other");
	if (!mr || !qp)
		return 1;
	errno = 0;
	check(ibv_alloc_mw(pd, 3) == NULL && errno == EINVAL, "ibv_alloc_mw of type 3: EINVAL");

	/* Type 2: bound by a work request, to the QP. */
	struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	check(mw2 != NULL && mw2->type == IBV_MW_TYPE_2, "ibv_alloc_mw of type 2");
	if (!mw2)
		return 1;
	uint32_t rkey2 = ibv_inc_rkey(mw2->rkey);
	struct ibv_send_wr bw = {.wr_id = 1, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED}, *bad;
	bw.bind_mw.mw = mw2;
	bw.bind_mw.rkey = rkey2;
	bw.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = mr, .addr = (uintptr_t)buf + 4096, .length = 4096,
							 .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
	check(ibv_post_send(qp, &bw, &bad) == 0, "post IBV_WR_BIND_MW");
	struct ibv_wc wc = poll_one(cq);
	check(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 1, "IBV_WC_BIND_MW");
	memset(buf, 'w', 64);
	check(post_write(peer, mr, buf, (uintptr_t)buf + 4096 + 100, rkey2) == 0, "post a WRITE through the window");
	wc = poll_one(cq);
	check(wc.status == IBV_WC_SUCCESS && memcmp(buf + 4196, buf, 64) == 0, "the WRITE landed in the window");
	check(ibv_dereg_mr(mr) == EBUSY, "ibv_dereg_mr of a region with a window: EBUSY");
	struct ibv_send_wr iw = {.wr_id = 2, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED};
	iw.invalidate_rkey = rkey2;
	check(ibv_post_send(qp, &iw, &bad) == 0, "post IBV_WR_LOCAL_INV");
	wc = poll_one(cq);
	check(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV, "IBV_WC_LOCAL_INV");
	check(post_write(peer, mr, buf, (uintptr_t)buf + 4096, rkey2) == 0, "post a WRITE through the dead rkey");
	wc = poll_one(cq);
	check(wc.status == IBV_WC_REM_ACCESS_ERR, "IBV_WC_REM_ACCESS_ERR");

	/* Type 1: bound by ibv_bind_mw, on a new pair (the first is in ERR). */
	struct ibv_qp *qp1, *peer1;
	struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	check(qp_pair(ctx, pd, cq, &peer1, &qp1) == 0 && mw1 != NULL, "a second pair and a type 1 window");
	if (!mw1)
		return 1;
	uint32_t before = mw1->rkey;
	struct ibv_mw_bind mb = {.wr_id = 3, .send_flags = IBV_SEND_SIGNALED,
				 .bind_info = {.mr = mr, .addr = (uintptr_t)buf, .length = 4096,
					       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}};
	check(ibv_bind_mw(qp1, mw1, &mb) == 0 && mw1->rkey == ibv_inc_rkey(before), "ibv_bind_mw: mw->rkey incremented");
	do
		wc = poll_one(cq);
	while (wc.status == IBV_WC_WR_FLUSH_ERR); /* the first QP's flushes */
	check(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 3, "type 1 IBV_WC_BIND_MW");
	check(post_write(peer1, mr, buf + 4096, (uintptr_t)buf + 1000, mw1->rkey) == 0 &&
		      poll_one(cq).status == IBV_WC_SUCCESS,
	      "a WRITE through the type 1 window");
	uint32_t rkey1 = mw1->rkey;
	check(ibv_dealloc_mw(mw1) == 0, "ibv_dealloc_mw of a bound window");
	check(post_write(peer1, mr, buf, (uintptr_t)buf, rkey1) == 0 && poll_one(cq).status == IBV_WC_REM_ACCESS_ERR,
	      "a WRITE through the deallocated window: IBV_WC_REM_ACCESS_ERR");
	check(ibv_dealloc_mw(mw2) == 0 && ibv_dereg_mr(mr) == 0, "dealloc, then dereg");
	return failed;
}
