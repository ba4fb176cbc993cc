/*
 * provider_extended: the extended verbs through the provider
 * (TestProviderExtendedVerbs): a CQ made by ibv_create_cq_ex and polled
 * with ibv_start_poll, ibv_next_poll and ibv_end_poll, and an RC QP made by
 * ibv_create_qp_ex whose work requests are built with ibv_wr_*, connected
 * to itself. It checks each opcode's effect and completion, a batch of
 * several requests, ibv_wr_abort, and that a batch with an error (too
 * many SGEs, too much inline data, more requests than the queue holds)
 * posts nothing; and that what softnic lacks (a flow tag in completions,
 * TSO, RDMA on a UD QP) is refused with EOPNOTSUPP. The exit status is the number of
 * checks that failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#include "checks.h"

/* A completion as the ibv_wc_read_* functions give it. */
struct completion {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, qp_num, src_qp;
	unsigned int flags;
	__be32 imm;
};

/* poll_ex_for takes n completions (or fewer, after spins empty polls) the
 * extended way and returns how many it took. */
static int poll_ex_for(struct ibv_cq_ex *cq, struct completion *c, int n, long spins)
{
	int got = 0;
	for (long i = 0; got < n && i < spins; i++) {
		struct ibv_poll_cq_attr attr = {0};
		int err = ibv_start_poll(cq, &attr);
		if (err == ENOENT)
			continue;
		if (err)
			return got;
		do {
			struct completion *one = &c[got++];
			one->wr_id = cq->wr_id;
			one->status = cq->status;
			one->opcode = ibv_wc_read_opcode(cq);
			one->byte_len = ibv_wc_read_byte_len(cq);
			one->qp_num = ibv_wc_read_qp_num(cq);
			one->src_qp = ibv_wc_read_src_qp(cq);
			one->flags = ibv_wc_read_wc_flags(cq);
			one->imm = ibv_wc_read_imm_data(cq);
		} while (got < n && ibv_next_poll(cq) == 0);
		ibv_end_poll(cq);
	}
	return got;
}

static int poll_ex(struct ibv_cq_ex *cq, struct completion *c, int n)
{
	return poll_ex_for(cq, c, n, 100000000);
}

/* nothing_comes says whether the CQ stays empty for a while (a few
 * thousand of the provider's yields). */
static int nothing_comes(struct ibv_cq_ex *cq)
{
	struct completion c;
	return poll_ex_for(cq, &c, 1, 1000000) == 0;
}

static int post_recv(struct ibv_qp *qp, uint64_t id, void *buf, uint32_t len, struct ibv_mr *mr)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad;
	return ibv_post_recv(qp, &wr, &bad);
}

int main(void)
{
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		     IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	if (!pd) {
		perror("opening the device");
		return 100;
	}
	const uint64_t wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
				  IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
				  IBV_WC_EX_WITH_DLID_PATH_BITS;
	struct ibv_cq_init_attr_ex cattr = {.cqe = 32, .wc_flags = wc_flags};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &cattr);
	check(cq != NULL, "ibv_create_cq_ex with every field rdma_rxe has");
	struct ibv_cq_init_attr_ex tattr = {.cqe = 4, .wc_flags = IBV_WC_EX_WITH_FLOW_TAG};
	errno = 0;
	check(!ibv_create_cq_ex(ctx, &tattr) && errno == EOPNOTSUPP, "a CQ with a flow tag field: EOPNOTSUPP");
	if (!cq)
		return 100;
	struct ibv_poll_cq_attr pattr = {0};
	check(ibv_start_poll(cq, &pattr) == ENOENT, "ibv_start_poll of an empty CQ: ENOENT");

	struct ibv_qp_init_attr_ex qattr = {
		.send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq), .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2, .max_recv_sge = 1, .max_inline_data = 64},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
				  IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
				  IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &qattr);
	struct ibv_qp_ex *qpx = qp ? ibv_qp_to_qp_ex(qp) : NULL;
	check(qpx != NULL, "ibv_create_qp_ex with every RC opcode, and its ibv_qp_ex");
	uint32_t depth = qattr.cap.max_send_wr;
	struct ibv_qp_init_attr_ex bad = qattr;
	bad.send_ops_flags |= IBV_QP_EX_WITH_TSO;
	errno = 0;
	check(!ibv_create_qp_ex(ctx, &bad) && errno == EOPNOTSUPP, "a QP with TSO: EOPNOTSUPP");
	bad = qattr;
	bad.qp_type = IBV_QPT_UD;
	errno = 0;
	check(!ibv_create_qp_ex(ctx, &bad) && errno == EOPNOTSUPP, "a UD QP with RDMA WRITE: EOPNOTSUPP");
	if (!qpx || connect_self(ctx, qp)) {
		perror("setting up a QP connected to itself");
		return 100;
	}

	uint8_t *buf = calloc(1, 8192);
	struct ibv_mr *mr = buf ? ibv_reg_mr(pd, buf, 8192, access) : NULL;
	if (!mr)
		return 100;
	uint8_t *a = buf, *b = buf + 1024, *c = buf + 2048, *in = buf + 3072;
	uint64_t *counter = (uint64_t *)(buf + 4096), *old = (uint64_t *)(buf + 4104);
	for (int i = 0; i < 1024; i++)
		a[i] = (uint8_t)(i * 3 + 1);
	check(post_recv(qp, 100, in, 1024, mr) == 0 && post_recv(qp, 101, in, 1024, mr) == 0, "two receives");

	/* One batch: a WRITE of two SGEs, a SEND with immediate of inline
	 * data, and a READ. */
	ibv_wr_start(qpx);
	qpx->wr_id = 1;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qpx, mr->rkey, (uintptr_t)b);
	struct ibv_sge two[2] = {{(uintptr_t)a, 300, mr->lkey}, {(uintptr_t)a + 300, 212, mr->lkey}};
	ibv_wr_set_sge_list(qpx, 2, two);
	qpx->wr_id = 2;
	ibv_wr_send_imm(qpx, htonl(0xabcd1234));
	ibv_wr_set_inline_data(qpx, "inline hello", 12);
	qpx->wr_id = 3;
	ibv_wr_rdma_read(qpx, mr->rkey, (uintptr_t)a + 512);
	ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)c, 256);
	check(ibv_wr_complete(qpx) == 0, "ibv_wr_complete of WRITE, SEND with immediate and READ");
	struct completion got[8] = {0};
	int n = poll_ex(cq, got, 4);
	check(n == 4, "four completions polled the extended way");
	int write = 0, send = 0, read = 0, recv = 0;
	for (int i = 0; i < n; i++) {
		struct completion *e = &got[i];
		if (e->status != IBV_WC_SUCCESS || e->qp_num != qp->qp_num)
			continue;
		write += e->wr_id == 1 && e->opcode == IBV_WC_RDMA_WRITE;
		send += e->wr_id == 2 && e->opcode == IBV_WC_SEND;
		read += e->wr_id == 3 && e->opcode == IBV_WC_RDMA_READ && e->byte_len == 256;
		recv += e->wr_id == 100 && e->opcode == IBV_WC_RECV && e->byte_len == 12 &&
			(e->flags & IBV_WC_WITH_IMM) && e->imm == htonl(0xabcd1234) && e->src_qp == qp->qp_num;
	}
	check(write == 1 && send == 1 && read == 1, "each send's completion: opcode, wr_id, status, QP");
	check(recv == 1, "the receive's completion: length, immediate data, flags, source QP");
	check(memcmp(b, a, 512) == 0, "the WRITE's two SGEs arrived in order");
	check(memcmp(in, "inline hello", 12) == 0, "the SEND's inline data arrived");
	check(memcmp(c, a + 512, 256) == 0, "the READ's bytes arrived");

	/* Atomics and a WRITE with immediate. */
	*counter = 40;
	ibv_wr_start(qpx);
	qpx->wr_id = 4;
	ibv_wr_atomic_fetch_add(qpx, mr->rkey, (uintptr_t)counter, 2);
	ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)old, 8);
	check(ibv_wr_complete(qpx) == 0 && poll_ex(cq, got, 1) == 1 && got[0].wr_id == 4 &&
		      got[0].opcode == IBV_WC_FETCH_ADD && got[0].status == IBV_WC_SUCCESS,
	      "ibv_wr_atomic_fetch_add completes");
	check(*old == 40 && *counter == 42, "fetch and add: the old value back, the sum in place");
	ibv_wr_start(qpx);
	qpx->wr_id = 5;
	ibv_wr_atomic_cmp_swp(qpx, mr->rkey, (uintptr_t)counter, 42, 7);
	ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)old, 8);
	qpx->wr_id = 6;
	ibv_wr_rdma_write_imm(qpx, mr->rkey, (uintptr_t)b, htonl(77));
	ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)a, 64);
	n = ibv_wr_complete(qpx) == 0 ? poll_ex(cq, got, 3) : 0;
	int cas = 0, wimm = 0, rimm = 0;
	for (int i = 0; i < n; i++) {
		cas += got[i].wr_id == 5 && got[i].opcode == IBV_WC_COMP_SWAP;
		wimm += got[i].wr_id == 6 && got[i].opcode == IBV_WC_RDMA_WRITE;
		rimm += got[i].wr_id == 101 && got[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM && got[i].imm == htonl(77);
	}
	check(n == 3 && cas == 1 && wimm == 1 && rimm == 1,
	      "compare and swap, WRITE with immediate, and its receive completion");
	check(*old == 42 && *counter == 7, "compare and swap: the old value back, the new one in place");

	/* Aborted and failed batches post nothing. */
	ibv_wr_start(qpx);
	qpx->wr_id = 7;
	ibv_wr_rdma_write(qpx, mr->rkey, (uintptr_t)c);
	ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)b, 16);
	ibv_wr_abort(qpx);
	check(nothing_comes(cq), "ibv_wr_abort: nothing is sent");
	struct ibv_sge three[3] = {{(uintptr_t)a, 1, mr->lkey}, {(uintptr_t)a, 1, mr->lkey}, {(uintptr_t)a, 1, mr->lkey}};
	ibv_wr_start(qpx);
	qpx->wr_id = 8;
	ibv_wr_rdma_write(qpx, mr->rkey, (uintptr_t)c);
	ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)b, 16);
	qpx->wr_id = 9;
	ibv_wr_rdma_write(qpx, mr->rkey, (uintptr_t)c);
	ibv_wr_set_sge_list(qpx, 3, three);
	check(ibv_wr_complete(qpx) == EINVAL && nothing_comes(cq), "more SGEs than the QP's: EINVAL, nothing sent");
	char big[200] = {0};
	ibv_wr_start(qpx);
	qpx->wr_id = 10;
	ibv_wr_rdma_write(qpx, mr->rkey, (uintptr_t)c);
	ibv_wr_set_inline_data(qpx, big, sizeof(big));
	check(ibv_wr_complete(qpx) == EINVAL && nothing_comes(cq), "more inline data than the QP's: EINVAL, nothing sent");
	ibv_wr_start(qpx);
	for (uint32_t i = 0; i <= depth; i++) {
		qpx->wr_id = 20 + i;
		ibv_wr_rdma_write(qpx, mr->rkey, (uintptr_t)c);
		ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)a, 8);
	}
	check(ibv_wr_complete(qpx) == ENOMEM && nothing_comes(cq), "more requests than the queue holds: ENOMEM, nothing sent");

	/* The queue works on after all that. */
	memset(c, 0, 64);
	ibv_wr_start(qpx);
	qpx->wr_id = 11;
	ibv_wr_rdma_write(qpx, mr->rkey, (uintptr_t)c);
	ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)a, 64);
	check(ibv_wr_complete(qpx) == 0 && poll_ex(cq, got, 1) == 1 && got[0].wr_id == 11 &&
		      got[0].status == IBV_WC_SUCCESS && memcmp(c, a, 64) == 0,
	      "a WRITE after the failed batches");

	check(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "destroying the QP and the CQ");
	ibv_dereg_mr(mr);
	free(buf);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return failed;
}
