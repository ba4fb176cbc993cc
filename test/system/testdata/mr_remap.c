/*
 * mr_remap: deregistering memory the program changed under its region
 * (TestProviderDeregAfterUnmap), as UCX's `ucx_info -d` does (it frees a
 * registered buffer before ibv_dereg_mr). The argument picks the case:
 *
 *   munmap      an mmap'd buffer (the first four pages of a mapping of
 *               five) unmapped with the whole mapping, then deregistered
 *   free        a 151,552-byte posix_memalign buffer (UCX's) freed, then
 *               deregistered (glibc gives it back with munmap)
 *   mremap      the mapping moved elsewhere with mremap, then deregistered
 *   remap-anon  unmapped, the buffer's range mapped again (anonymous,
 *               MAP_FIXED) and filled with new data, then deregistered
 *   remap-file  the same with a MAP_SHARED mapping of a temporary file
 *   remap-part  unmapped, its first half mapped again with new data and
 *               the second half left unmapped
 *
 * ibv_dereg_mr must return (0 or an error: it is the call after the
 * program's own unmap, not a crash), the new data must be intact byte for
 * byte afterwards, a file's mapping must still be the file's (writes reach
 * it both ways), and the context must still register, move and
 * deregister memory. The exit status is the number of checks that failed.
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

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* pattern is the byte at offset i of a fill with seed: no short period,
 * so that bytes displaced by any offset show. */
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

static int filled(const uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pattern(seed, i))
			return 0;
	return 1;
}

/* deregistered checks that ibv_dereg_mr returned and says what with. */
static void deregistered(struct ibv_mr *mr)
{
	int r = ibv_dereg_mr(mr);
	char what[96];
	snprintf(what, sizeof(what), "ibv_dereg_mr returned (%d%s%s)", r, r ? ": " : "", r ? strerror(r) : "");
	check(1, what);
}

/* temp_file makes an unlinked temporary file of n bytes filled with seed. */
static int temp_file(size_t n, uint8_t seed)
{
	const char *dir = getenv("TMPDIR");
	char path[4096];
	snprintf(path, sizeof(path), "%s/softnic-mr-XXXXXX", dir && *dir ? dir : "/tmp");
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	unlink(path);
	uint8_t *b = malloc(n);
	if (!b)
		return -1;
	fill(b, n, seed);
	ssize_t w = pwrite(fd, b, n, 0);
	free(b);
	return w == (ssize_t)n ? fd : -1;
}

/* file_holds says whether the file's n bytes from offset 0 are seed's. */
static int file_holds(int fd, size_t n, uint8_t seed)
{
	uint8_t *b = malloc(n);
	int ok = b && pread(fd, b, n, 0) == (ssize_t)n && filled(b, n, seed);
	free(b);
	return ok;
}

/* rdma_self moves n bytes from src (in smr) to dst (in dmr) with an RDMA
 * WRITE on qp, connected to itself; 0 once it completed successfully. */
static int rdma_self(struct ibv_qp *qp, struct ibv_cq *cq, void *src, struct ibv_mr *smr, void *dst,
		     struct ibv_mr *dmr, size_t n)
{
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = n, .lkey = smr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = (uintptr_t)dst, .rkey = dmr->rkey}},
			   *bad;
	if (ibv_post_send(qp, &wr, &bad))
		return -1;
	struct ibv_wc wc;
	int got;
	while ((got = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	return got == 1 && wc.status == IBV_WC_SUCCESS ? 0 : -1;
}

int main(int argc, char **argv)
{
	const char *kase = argc > 1 ? argv[1] : "";
	setvbuf(stdout, NULL, _IOLBF, 0);
	size_t page = sysconf(_SC_PAGESIZE), n = 4 * page, map_len = 5 * page;
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

	uint8_t *buf;
	if (strcmp(kase, "free") == 0) {
		n = 151552;
		if (posix_memalign((void **)&buf, page, n))
			return 100;
	} else {
		buf = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (buf == MAP_FAILED)
			return 100;
	}
	fill(buf, n, 1);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, n, ACCESS);
	check(mr != NULL, "ibv_reg_mr of the buffer");
	if (!mr)
		return 100;
	check(filled(buf, n, 1), "registration kept every byte");

	uint8_t *now = NULL; /* the memory the program has after its change, if any */
	size_t now_len = 0;
	int fd = -1;
	if (strcmp(kase, "munmap") == 0) {
		check(munmap(buf, map_len) == 0, "munmap of the registered buffer");
	} else if (strcmp(kase, "free") == 0) {
		free(buf);
		check(1, "free of the registered buffer");
	} else if (strcmp(kase, "mremap") == 0) {
		/* Moved for certain: onto a range reserved for it. */
		uint8_t *to = mmap(NULL, map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		now = to == MAP_FAILED ? MAP_FAILED : mremap(buf, map_len, map_len, MREMAP_MAYMOVE | MREMAP_FIXED, to);
		check(now == to && now != MAP_FAILED, "mremap moved the registered buffer");
		if (now == MAP_FAILED)
			return 100;
		now_len = n;
		check(filled(now, n, 1), "the moved buffer holds its bytes");
		fill(now, n, 2);
	} else if (strcmp(kase, "remap-anon") == 0 || strcmp(kase, "remap-part") == 0) {
		now_len = strcmp(kase, "remap-part") == 0 ? n / 2 : n;
		check(munmap(buf, map_len) == 0, "munmap of the registered buffer");
		now = mmap(buf, now_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		check(now == buf, "the range mapped again");
		if (now != buf)
			return 100;
		fill(now, now_len, 2);
	} else if (strcmp(kase, "remap-file") == 0) {
		now_len = n;
		fd = temp_file(n, 2);
		check(fd >= 0, "a temporary file");
		check(munmap(buf, map_len) == 0, "munmap of the registered buffer");
		now = fd < 0 ? MAP_FAILED : mmap(buf, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
		check(now == buf, "the range mapped again, shared, from the file");
		if (now != buf)
			return 100;
	} else {
		fprintf(stderr, "no case %s\n", kase);
		return 100;
	}

	deregistered(mr);
	if (now) {
		check(filled(now, now_len, 2), "the new data is intact after ibv_dereg_mr");
		if (fd >= 0) {
			fill(now, n, 3);
			check(file_holds(fd, n, 3), "the program's writes still reach its file");
			uint8_t *b = malloc(n);
			if (!b)
				return 100;
			fill(b, n, 4);
			check(pwrite(fd, b, n, 0) == (ssize_t)n && filled(now, n, 4), "the file's writes still reach the program");
			free(b);
		}
	}

	/* The session goes on: new buffers register and move data. */
	uint8_t *a = malloc(3000), *b = malloc(3000);
	struct ibv_mr *amr = a ? ibv_reg_mr(pd, a, 3000, ACCESS) : NULL, *bmr = b ? ibv_reg_mr(pd, b, 3000, ACCESS) : NULL;
	check(amr && bmr, "new registrations");
	if (!amr || !bmr)
		return 100;
	fill(a, 3000, 5);
	check(rdma_self(qp, cq, a, amr, b, bmr, 3000) == 0 && filled(b, 3000, 5), "an RDMA WRITE between them");
	check(ibv_dereg_mr(amr) == 0 && ibv_dereg_mr(bmr) == 0, "their ibv_dereg_mr");
	if (now)
		check(filled(now, now_len, strcmp(kase, "remap-file") == 0 ? 4 : 2), "the new data is still intact");
	check(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0 &&
		      ibv_close_device(ctx) == 0,
	      "the context closes");
	ibv_free_device_list(list);
	return failed;
}
