/*
 * import_objects.c: ibv_import_device and the imported objects, as the
 * kernel's: a context imported from a duplicate of another's command
 * descriptor shares its PD, region and device memory (ibv_import_pd,
 * ibv_import_mr with addr NULL, ibv_import_dm mapping the same bytes),
 * outlives the original, which is closed first, and still runs an RDMA
 * WRITE over them; descriptors that are no softnic context of this
 * process are refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checks.h"

/* write_once posts one signaled RDMA WRITE of n bytes from lkey's addr
 * to rkey's raddr on qp and waits for its completion. */
static int write_once(struct ibv_qp *qp, struct ibv_cq *cq, void *addr, uint32_t lkey, uint32_t n, uint64_t raddr,
		      uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = n, .lkey = lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED, .wr.rdma = {.remote_addr = raddr, .rkey = rkey}}, *bad;
	struct ibv_wc wc = {.status = IBV_WC_GENERAL_ERR};
	int got = 0;
	if (ibv_post_send(qp, &wr, &bad))
		return -1;
	while ((got = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	return got == 1 && wc.status == IBV_WC_SUCCESS ? 0 : -1;
}

/* refusals checks the descriptors ibv_import_device refuses, as
 * libibverbs does for a kernel device: no device (EINVAL), and an open of
 * the device node that is no context of this process (EOPNOTSUPP: another
 * process's would be one too, and is not shareable). */
static void refusals(void)
{
	int p[2];
	check(!pipe(p), "a pipe");
	errno = 0;
	check(!ibv_import_device(p[0]) && errno == EINVAL, "import_device: a pipe is EINVAL");
	close(p[0]), close(p[1]);
	errno = 0;
	check(!ibv_import_device(-1) && errno == EINVAL, "import_device: -1 is EINVAL");
	int stray = open("/dev/null", O_RDWR);
	errno = 0;
	check(!ibv_import_device(stray) && errno == EOPNOTSUPP,
	      "import_device: an open of /dev/null that is no context is EOPNOTSUPP");
	check(fcntl(stray, F_GETFD) >= 0, "the refused descriptor is left open");
	close(stray);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	if (!ctx) {
		printf("FAIL open device\n");
		return 1;
	}
	refusals();
	static char buf[4096];
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), acc) : NULL;
	struct ibv_alloc_dm_attr da = {.length = 8192};
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &da);
	check(pd && mr && dm, "the original context's PD, region and device memory");
	if (!mr || !dm)
		return 1;

	/* A forked child holds the same open file, but the daemon serves the
	 * session to the process that opened it only. */
	pid_t child = fork();
	if (child == 0) {
		errno = 0;
		struct ibv_context *c = ibv_import_device(dup(ctx->cmd_fd));
		_exit(!c && errno == EOPNOTSUPP ? 0 : 1);
	}
	int status = -1;
	check(child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "import_device in a forked child of the parent's cmd_fd is EOPNOTSUPP");

	struct ibv_context *ictx = ibv_import_device(dup(ctx->cmd_fd));
	check(ictx && ictx != ctx && ictx->device == ctx->device, "import_device of a duplicate of cmd_fd");
	if (!ictx)
		return 1;
	struct ibv_context *again = ibv_import_device(dup(ictx->cmd_fd));
	check(again != NULL, "import_device of the imported context's cmd_fd");
	if (again)
		ibv_close_device(again);
	errno = 0;
	check(!ibv_import_pd(ictx, pd->handle + 1000) && errno == ENOENT, "import_pd: a handle of none is ENOENT");
	struct ibv_pd *ipd = ibv_import_pd(ictx, pd->handle);
	check(ipd && ipd->handle == pd->handle && ipd->context == ictx, "import_pd");
	if (!ipd)
		return 1;
	struct ibv_pd *other = ibv_alloc_pd(ictx);
	errno = 0;
	check(other && !ibv_import_mr(other, mr->handle) && errno == EINVAL, "import_mr into another PD is EINVAL");
	ibv_dealloc_pd(other);
	struct ibv_mr *imr = ibv_import_mr(ipd, mr->handle);
	check(imr && imr->lkey == mr->lkey && imr->rkey == mr->rkey && imr->length == sizeof(buf) && !imr->addr &&
		      imr->pd == ipd && imr->handle == mr->handle,
	      "import_mr: the keys and length, addr NULL");
	struct ibv_dm *idm = ibv_import_dm(ictx, dm->handle);
	check(idm && idm->handle == dm->handle, "import_dm");
	if (!imr || !idm)
		return 1;
	uint32_t word = 0x5eed1e55, back = 0;
	check(!ibv_memcpy_to_dm(dm, 4096, &word, 4) && !ibv_memcpy_from_dm(&back, idm, 4096, 4) && back == word,
	      "a word copied into the original DM is read from the imported one");

	/* The original goes first: the session lives on in the import. */
	ibv_close_device(ctx);
	struct ibv_cq *cq = ibv_create_cq(ictx, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = cq ? ibv_create_qp(ipd, &qa) : NULL;
	struct ibv_mr *dmr = ibv_reg_dm_mr(ipd, idm, 0, 8192, acc | IBV_ACCESS_ZERO_BASED);
	check(qp && dmr && !connect_self(ictx, qp),
	      "after the original's close: a QP and a DM region of the imported PD, connected");
	if (!qp || !dmr)
		return 1;
	for (int i = 0; i < 512; i++)
		buf[i] = (char)(i * 5 + 3);
	check(!write_once(qp, cq, buf, imr->lkey, 512, 256, dmr->rkey), "RDMA WRITE from the imported region");
	char got[512];
	check(!ibv_memcpy_from_dm(got, idm, 256, sizeof(got)) && !memcmp(got, buf, sizeof(got)),
	      "its bytes are in the imported device memory");
	check(!write_once(qp, cq, buf, imr->lkey, 64, (uintptr_t)buf + 1024, imr->rkey) &&
		      !memcmp(buf + 1024, buf, 64),
	      "RDMA WRITE into the imported region by its rkey");

	check(!ibv_destroy_qp(qp) && !ibv_destroy_cq(cq) && !ibv_dereg_mr(dmr), "destroy the QP, CQ and DM region");
	check(!ibv_dereg_mr(imr), "dereg_mr of the imported region deregisters it");
	errno = 0;
	check(!ibv_import_mr(ipd, mr->handle) && errno == ENOENT, "import_mr of it again is ENOENT");
	ibv_unimport_dm(idm);
	idm = ibv_import_dm(ictx, dm->handle);
	check(idm != NULL, "unimport_dm left the allocation: it imports again");
	check(idm && !ibv_free_dm(idm), "free_dm through the imported context");
	check(!ibv_dealloc_pd(ipd), "dealloc_pd of the imported PD");
	check(!ibv_close_device(ictx), "close the imported context");
	ibv_free_device_list(list);
	return failed;
}
