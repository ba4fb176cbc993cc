/*
 * provider_sharemem: registered memory that the provider shares with the
 * daemon (provider/sharemem.c), seen from the program
 * (TestProviderSharesRegisteredPages). It registers a page-aligned buffer
 * of whole pages (which the provider re-backs with a memfd) and a buffer
 * that shares its pages with other data (which it must leave alone), and
 * checks that registration changed no byte of either, moves data between
 * them both ways with RDMA WRITE and READ on an RC QP connected to itself,
 * and does it again after deregistering and registering anew. It says
 * "registered" and "deregistered" and waits for a line on stdin at each,
 * while the test looks at the daemon's mappings. With the argument "off"
 * (the test sets SOFTNIC_SHARE_MR=0) no buffer may be re-backed. The exit
 * status is the number of checks that failed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "checks.h"

#define PAGES 4

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

static int filled(const uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (uint8_t)(seed + i * 7))
			return 0;
	return 1;
}

/* rdma moves n bytes between local (in lmr) and remote (in rmr) and waits
 * for the completion; 0 when it succeeded. */
static int rdma(struct ibv_qp *qp, struct ibv_cq *cq, enum ibv_wr_opcode op, void *local, struct ibv_mr *lmr,
		void *remote, struct ibv_mr *rmr, size_t n)
{
	struct ibv_sge sge = {.addr = (uintptr_t)local, .length = n, .lkey = lmr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = (uintptr_t)remote, .rkey = rmr->rkey}},
			   *bad;
	if (ibv_post_send(qp, &wr, &bad))
		return -1;
	struct ibv_wc wc;
	int got;
	for (long spins = 0; (got = ibv_poll_cq(cq, 1, &wc)) == 0 && spins < 100000000; spins++)
		;
	return got == 1 && wc.status == IBV_WC_SUCCESS ? 0 : -1;
}

int main(int argc, char **argv)
{
	int off = argc > 1 && strcmp(argv[1], "off") == 0;
	long page = sysconf(_SC_PAGESIZE);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = cq ? ibv_create_qp(pd, &init) : NULL;
	if (!qp || connect_self(ctx, qp)) {
		perror("setting up a QP connected to itself");
		return 100;
	}

	uint8_t *whole, *part = malloc(3000);
	if (posix_memalign((void **)&whole, page, PAGES * page) || !part)
		return 100;
	fill(whole, PAGES * page, 1);
	memset(whole + 2 * page, 0, page); /* a page of zeros stays a hole of the memfd */
	fill(part, 3000, 2);
	uint8_t *before = malloc(PAGES * page);
	if (!before)
		return 100;
	memcpy(before, whole, PAGES * page);
	struct ibv_mr *wmr = ibv_reg_mr(pd, whole, PAGES * page, access);
	struct ibv_mr *pmr = ibv_reg_mr(pd, part, 3000, access);
	check(wmr && pmr, "ibv_reg_mr of both buffers");
	if (!wmr || !pmr)
		return 100;
	check(memcmp(whole, before, PAGES * page) == 0 && filled(part, 3000, 2), "registration kept every byte");
	check(memfd_backed(whole) == !off, off ? "the whole pages stay as they were" : "the whole pages are shared");
	check(!memfd_backed(part), "the buffer that shares its pages is left alone");
	struct ibv_mr *inner = ibv_reg_mr(pd, whole + page, page, access);
	check(inner != NULL, "a second region inside the shared pages");

	check(rdma(qp, cq, IBV_WR_RDMA_WRITE, part, pmr, whole + 100, wmr, 3000) == 0, "RDMA WRITE into them");
	check(filled(whole + 100, 3000, 2) && filled(whole, 100, 1) && whole[3100] == (uint8_t)(1 + 3100 * 7),
	      "the WRITE's bytes arrived, and only those");
	check(rdma(qp, cq, IBV_WR_RDMA_WRITE, part, pmr, whole + 2 * page + 5, wmr, 3000) == 0 &&
		      filled(whole + 2 * page + 5, 3000, 2) && whole[2 * page + 4] == 0 && whole[2 * page + 3005] == 0,
	      "RDMA WRITE into the page of zeros");
	fill(whole + page, page, 3);
	check(rdma(qp, cq, IBV_WR_RDMA_READ, part, pmr, whole + page, wmr, 3000) == 0, "RDMA READ from them");
	check(filled(part, 3000, 3), "the READ's bytes arrived");
	wait_line("registered");

	check(ibv_dereg_mr(inner) == 0 && ibv_dereg_mr(wmr) == 0, "ibv_dereg_mr");
	check(filled(whole + page, page, 3), "deregistration kept the bytes");
	check(!memfd_backed(whole), "deregistration gave the pages back as private memory");
	wait_line("deregistered");

	fill(whole, PAGES * page, 4);
	wmr = ibv_reg_mr(pd, whole, PAGES * page, access);
	check(wmr != NULL, "registering the same pages again");
	check(wmr && memfd_backed(whole) == !off, "they are shared again as before");
	check(wmr && rdma(qp, cq, IBV_WR_RDMA_WRITE, whole, wmr, part, pmr, 3000) == 0, "RDMA WRITE out of them");
	check(filled(part, 3000, 4), "the WRITE's bytes arrived");
	check(ibv_dereg_mr(wmr) == 0 && ibv_dereg_mr(pmr) == 0, "ibv_dereg_mr of both");
	free(whole);
	free(part);
	free(before);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return failed;
}
