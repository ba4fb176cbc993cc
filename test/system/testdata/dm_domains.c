/*
 * dm_domains.c: device memory and parent domains through the provider, on
 * one device, each check as rdma-core's mlx5 behaves: max_dm_size, the
 * allocation's and the copies' refusals, a zero-based region over device
 * memory written by an RDMA WRITE of a QP connected to itself, which lives
 * in a parent domain with a thread domain, and the holds a parent domain
 * keeps on its PD and TD.
 */
#include <errno.h>

#include "checks.h"

static void *never_alloc(struct ibv_pd *pd, void *ctx, size_t size, size_t align, uint64_t type)
{
	(void)pd, (void)ctx, (void)size, (void)align, (void)type;
	return IBV_ALLOCATOR_USE_DEFAULT;
}

static void never_free(struct ibv_pd *pd, void *ctx, void *ptr, uint64_t type)
{
	(void)pd, (void)ctx, (void)ptr, (void)type;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	if (!ctx) {
		printf("FAIL open device\n");
		return 1;
	}
	struct ibv_device_attr_ex dev;
	check(!ibv_query_device_ex(ctx, NULL, &dev) && dev.max_dm_size == 256 << 10, "max_dm_size is 256 KiB");

	/* Device memory's refusals. */
	struct ibv_alloc_dm_attr bad = {.length = 64, .comp_mask = 1};
	check(!ibv_alloc_dm(ctx, &bad) && errno == EINVAL, "alloc_dm: comp_mask 1 is EINVAL");
	bad = (struct ibv_alloc_dm_attr){.length = dev.max_dm_size + 1};
	check(!ibv_alloc_dm(ctx, &bad), "alloc_dm: past max_dm_size fails");
	struct ibv_alloc_dm_attr da = {.length = 4096, .log_align_req = 6};
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &da);
	check(dm != NULL, "alloc_dm of 4096 bytes");
	if (!dm)
		return 1;
	uint32_t words[4] = {1, 2, 3, 4};
	check(ibv_memcpy_to_dm(dm, 2, words, 8) == EINVAL, "memcpy_to_dm: an offset off 4 bytes is EINVAL");
	check(ibv_memcpy_to_dm(dm, 4092, words, 8) == EFAULT, "memcpy_to_dm: past the end is EFAULT");
	check(ibv_memcpy_from_dm(words, dm, 0, 6) == EINVAL, "memcpy_from_dm: a length off 4 bytes is EINVAL");

	/* A parent domain with a thread domain. */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_td_init_attr tda = {.comp_mask = 1};
	check(!ibv_alloc_td(ctx, &tda) && errno == EINVAL, "alloc_td: comp_mask 1 is EINVAL");
	tda.comp_mask = 0;
	struct ibv_td *td = ibv_alloc_td(ctx, &tda);
	check(td != NULL, "alloc_td");
	struct ibv_parent_domain_init_attr pa = {.pd = NULL, .td = td};
	check(!ibv_alloc_parent_domain(ctx, &pa) && errno == EINVAL, "alloc_parent_domain without a PD is EINVAL");
	pa = (struct ibv_parent_domain_init_attr){.pd = pd, .td = td, .comp_mask = 1 << 7};
	check(!ibv_alloc_parent_domain(ctx, &pa) && errno == EINVAL, "alloc_parent_domain: an unknown comp_mask is EINVAL");
	pa.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
	pa.alloc = never_alloc, pa.free = never_free, pa.pd_context = &pa;
	struct ibv_pd *parent = ibv_alloc_parent_domain(ctx, &pa);
	check(parent != NULL, "alloc_parent_domain with allocators and a TD");
	if (!parent)
		return 1;
	check(ibv_dealloc_pd(pd) == EBUSY, "dealloc_pd: EBUSY while a parent domain holds the PD");
	check(ibv_dealloc_td(td) == EBUSY, "dealloc_td: EBUSY while a parent domain holds the TD");

	struct ibv_cq_init_attr_ex cqa = {.cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS,
					  .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = pd};
	check(!ibv_create_cq_ex(ctx, &cqa) && errno == EINVAL, "create_cq_ex: MASK_PD with a plain PD is EINVAL");
	cqa.parent_domain = parent;
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &cqa);
	check(cqx != NULL, "create_cq_ex with the parent domain");
	struct ibv_cq *cq = ibv_cq_ex_to_cq(cqx);

	/* A region over device memory, in the parent domain. */
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	check(!ibv_reg_dm_mr(parent, dm, 0, 4096, acc) && errno == EINVAL, "reg_dm_mr without ZERO_BASED is EINVAL");
	check(!ibv_reg_dm_mr(parent, dm, 8, 4096, acc | IBV_ACCESS_ZERO_BASED), "reg_dm_mr past the end fails");
	struct ibv_mr *dmr = ibv_reg_dm_mr(parent, dm, 1024, 2048, acc | IBV_ACCESS_ZERO_BASED);
	check(dmr && dmr->addr == NULL, "reg_dm_mr: a zero-based region, addr NULL");
	check(ibv_free_dm(dm) == EBUSY, "free_dm: EBUSY while a region is in it");
	static char src[2048];
	for (int i = 0; i < 2048; i++)
		src[i] = (char)(i * 7 + 1);
	struct ibv_mr *smr = ibv_reg_mr(parent, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(parent, &qa);
	check(smr && qp && !connect_self(ctx, qp), "a QP of the parent domain, connected to itself");
	if (!dmr || !smr || !qp)
		return 1;
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = 1000, .lkey = smr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED, .wr.rdma = {.remote_addr = 100, .rkey = dmr->rkey}}, *badwr;
	struct ibv_wc wc = {.status = IBV_WC_GENERAL_ERR};
	int n = 0;
	if (!ibv_post_send(qp, &wr, &badwr))
		while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
			;
	check(n == 1 && wc.status == IBV_WC_SUCCESS, "RDMA WRITE to offset 100 of the DM region");
	char got[1000];
	check(!ibv_memcpy_from_dm(got, dm, 1024 + 100, sizeof(got)) && !memcmp(got, src, sizeof(got)),
	      "the bytes are at 1124 of the device memory");

	check(!ibv_destroy_qp(qp) && !ibv_dereg_mr(smr) && !ibv_dereg_mr(dmr) && !ibv_free_dm(dm),
	      "destroy QP, deregister, free_dm");
	check(!ibv_destroy_cq(cq) && !ibv_dealloc_pd(parent) && !ibv_dealloc_td(td) && !ibv_dealloc_pd(pd),
	      "dealloc the parent domain, then its TD and PD");
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return failed;
}
