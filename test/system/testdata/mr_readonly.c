/*
 * mr_readonly: registrations of read-only mappings
 * (TestProviderReadOnlyMapping). Write access needs a writable mapping,
 * as the kernel's ibv_reg_mr: for each read-only mapping (anonymous
 * memory made read-only with mprotect, a file opened read-only and mapped
 * shared, and one mapped private), a registration with LOCAL_WRITE, with
 * REMOTE_WRITE or with REMOTE_ATOMIC fails with EFAULT; one with
 * REMOTE_READ only (and one with no right at all) works, an RDMA READ
 * from it (on an RC QP connected to itself) brings its bytes, and an RDMA
 * WRITE out of it too. The exit status is the number of checks that
 * failed.
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

#include "checks.h"

#define LEN (2 * 4096)

static uint8_t pattern(uint8_t seed, size_t i)
{
	uint32_t x = (uint32_t)i * 2654435761u + seed * 40503u;
	return (uint8_t)(x >> 24 ^ x >> 11);
}

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pattern(seed, i);
}

static int holds(const uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pattern(seed, i))
			return 0;
	return 1;
}

/* rdma posts one signaled op between local (in lmr) and remote (in rmr)
 * and waits for its completion; 0 once it succeeded. */
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
	while ((got = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	return got == 1 && wc.status == IBV_WC_SUCCESS ? 0 : -1;
}

/* refused checks that a registration with access fails with EFAULT. */
static void refused(struct ibv_pd *pd, uint8_t *ro, const char *kind, int access, const char *right)
{
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(pd, ro, LEN, access);
	int e = errno;
	char what[160];
	snprintf(what, sizeof(what), "%s: %s is refused with EFAULT (%s)", kind, right,
		 mr ? "it was registered" : strerror(e));
	check(!mr && e == EFAULT, what);
	if (mr)
		ibv_dereg_mr(mr);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
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
	uint8_t *rw = malloc(LEN);
	struct ibv_mr *rwmr = rw ? ibv_reg_mr(pd, rw, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	check(rwmr != NULL, "ibv_reg_mr of a writable buffer");
	if (!rwmr)
		return 100;

	/* A file of the pattern, for the file mappings. */
	const char *dir = getenv("TMPDIR");
	char path[4096];
	snprintf(path, sizeof(path), "%s/softnic-ro-XXXXXX", dir && *dir ? dir : "/tmp");
	int wfd = mkstemp(path);
	fill(rw, LEN, 1);
	int rfd = wfd >= 0 && pwrite(wfd, rw, LEN, 0) == LEN ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	if (wfd >= 0) {
		unlink(path);
		close(wfd);
	}
	check(rfd >= 0, "a file opened read-only");

	const char *kinds[] = {"anonymous, mprotect PROT_READ", "file opened O_RDONLY, MAP_SHARED",
			       "file opened O_RDONLY, MAP_PRIVATE"};
	for (int k = 0; k < 3; k++) {
		uint8_t *ro;
		if (k == 0) {
			ro = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (ro != MAP_FAILED) {
				fill(ro, LEN, 1);
				if (mprotect(ro, LEN, PROT_READ)) {
					munmap(ro, LEN);
					ro = MAP_FAILED;
				}
			}
		} else {
			ro = rfd < 0 ? MAP_FAILED : mmap(NULL, LEN, PROT_READ, k == 1 ? MAP_SHARED : MAP_PRIVATE, rfd, 0);
		}
		check(ro != MAP_FAILED && holds(ro, LEN, 1), kinds[k]);
		if (ro == MAP_FAILED)
			continue;
		refused(pd, ro, kinds[k], IBV_ACCESS_LOCAL_WRITE, "LOCAL_WRITE");
		refused(pd, ro, kinds[k], IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, "REMOTE_WRITE");
		refused(pd, ro, kinds[k], IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC, "REMOTE_ATOMIC");
		struct ibv_mr *rmr = ibv_reg_mr(pd, ro, LEN, IBV_ACCESS_REMOTE_READ);
		struct ibv_mr *lmr = ibv_reg_mr(pd, ro, LEN, 0);
		char what[160];
		snprintf(what, sizeof(what), "%s: REMOTE_READ and no right at all are registered", kinds[k]);
		check(rmr && lmr, what);
		if (rmr && lmr) {
			memset(rw, 0, LEN);
			snprintf(what, sizeof(what), "%s: an RDMA READ from it brings its bytes", kinds[k]);
			check(rdma(qp, cq, IBV_WR_RDMA_READ, rw, rwmr, ro, rmr, LEN) == 0 && holds(rw, LEN, 1), what);
			memset(rw, 0, LEN);
			snprintf(what, sizeof(what), "%s: an RDMA WRITE out of it too", kinds[k]);
			check(rdma(qp, cq, IBV_WR_RDMA_WRITE, ro, lmr, rw, rwmr, LEN) == 0 && holds(rw, LEN, 1), what);
		}
		if (rmr)
			ibv_dereg_mr(rmr);
		if (lmr)
			ibv_dereg_mr(lmr);
		munmap(ro, LEN);
	}
	check(ibv_dereg_mr(rwmr) == 0, "ibv_dereg_mr");
	check(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0 &&
		      ibv_close_device(ctx) == 0,
	      "the context closes");
	ibv_free_device_list(list);
	return failed;
}
