/*
 * mr_kinds: registered memory of every kind a program may have, reached
 * by a peer through the daemons (TestProviderRegistersEveryMapping).
 *
 *   mr_kinds target KIND GID_INDEX   registers a buffer of KIND, while a
 *                                    thread of its own writes elsewhere in
 *                                    the same pages, and serves the peer
 *   mr_kinds peer GID_INDEX          RDMA WRITEs into the target's buffer,
 *                                    READs from it and SENDs into it
 *
 * KIND: heap (malloc, not page aligned), memalign (posix_memalign), mmap
 * (private anonymous), stack (a buffer in main's frame), shared-file
 * (MAP_SHARED of a temporary file), private-file (MAP_PRIVATE of one),
 * shared-anon (MAP_SHARED anonymous), hugetlb (MAP_HUGETLB, 2 MiB).
 *
 * Each side prints "info QPN GID ADDR RKEY" and reads the other's from
 * stdin (the test relays them); the target then says "connected", and
 * the peer goes. The target checks, after the SEND arrived, every byte of
 * its buffer: the WRITE's and the SEND's where they were aimed, its own
 * elsewhere (the READ took them, which the peer checks), the thread's
 * last words in their places; with a shared file the file holds the
 * remote writes, with a private one it holds none of them. It then says
 * "checked" and waits for a line before it deregisters, so that the peer
 * is done first. The exit status is the number of checks that failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "checks.h"

#define LEN (3 * 4096) /* every kind's buffer but hugetlb's */
#define HUGE_LEN (2 << 20)
#define SPAN 3000 /* bytes of each transfer */
#define GAP 64 /* the thread's words between the regions */
#define W_OFF GAP /* the peer's WRITE lands here */
#define R_OFF (W_OFF + SPAN + GAP) /* the peer READs from here */
#define S_OFF (R_OFF + SPAN + GAP) /* the peer's SEND lands here */
#define REST (S_OFF + SPAN + GAP) /* untouched by anyone from here to the tail */
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* pattern is the byte at offset i of a fill with seed: no short period,
 * so that bytes displaced by any offset show. */
static uint8_t pattern(uint8_t seed, size_t i)
{
	uint32_t x = (uint32_t)i * 2654435761u + seed * 40503u;
	return (uint8_t)(x >> 24 ^ x >> 11);
}

static void fill(uint8_t *p, size_t n, uint8_t seed, size_t from)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pattern(seed, from + i);
}

/* holds says whether n bytes at p are seed's pattern from offset from. */
static int holds(const uint8_t *p, size_t n, uint8_t seed, size_t from)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pattern(seed, from + i))
			return 0;
	return 1;
}

/* The thread's words: 64 bytes before, between and after the regions,
 * and the buffer's last 64 (all in pages the transfers touch). */
static size_t thread_off[5];

struct writer {
	uint8_t *buf;
	int stop;
	uint64_t count; /* passes written */
};

static void *write_loop(void *arg)
{
	struct writer *w = arg;
	for (uint64_t i = 1; !__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE); i++) {
		for (int k = 0; k < 5; k++)
			for (int j = 0; j < GAP / 8; j++)
				__atomic_store_n((uint64_t *)(w->buf + thread_off[k]) + j, i, __ATOMIC_RELAXED);
		__atomic_store_n(&w->count, i, __ATOMIC_RELEASE);
	}
	return NULL;
}

static uint64_t passes(struct writer *w)
{
	return __atomic_load_n(&w->count, __ATOMIC_ACQUIRE);
}

/* wait_passes waits until the thread has written more than n passes. */
static void wait_passes(struct writer *w, uint64_t n)
{
	while (passes(w) <= n)
		sched_yield();
}

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	int gid_index;
};

static int open_side(struct side *s, int gid_index)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	s->gid_index = gid_index;
	s->ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	if (list)
		ibv_free_device_list(list);
	s->pd = s->ctx ? ibv_alloc_pd(s->ctx) : NULL;
	s->cq = s->pd ? ibv_create_cq(s->ctx, 16, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr init = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	s->qp = s->cq ? ibv_create_qp(s->pd, &init) : NULL;
	return s->qp ? qp_init(s->qp) : -1;
}

static void close_side(struct side *s)
{
	check(ibv_destroy_qp(s->qp) == 0 && ibv_destroy_cq(s->cq) == 0 && ibv_dealloc_pd(s->pd) == 0 &&
		      ibv_close_device(s->ctx) == 0,
	      "the context closes");
}

/* The peer's QP and memory, as the other side told them. */
struct remote {
	uint32_t qpn, rkey;
	union ibv_gid gid;
	uint64_t addr;
};

/* say_info prints this side's line. */
static int say_info(struct side *s, void *addr, struct ibv_mr *mr)
{
	union ibv_gid gid;
	if (ibv_query_gid(s->ctx, 1, s->gid_index, &gid))
		return -1;
	printf("info %u ", s->qp->qp_num);
	for (int i = 0; i < 16; i++)
		printf("%02x", gid.raw[i]);
	printf(" %llx %x\n", (unsigned long long)(uintptr_t)addr, mr->rkey);
	fflush(stdout);
	return 0;
}

/* read_info reads the other side's line and connects the QP (in INIT) to
 * it. */
static int read_info(struct side *s, struct remote *r)
{
	char line[256], gid[33];
	unsigned long long addr;
	if (!fgets(line, sizeof(line), stdin) ||
	    sscanf(line, "info %u %32s %llx %x", &r->qpn, gid, &addr, &r->rkey) != 4 || strlen(gid) != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		unsigned b;
		if (sscanf(gid + 2 * i, "%2x", &b) != 1)
			return -1;
		r->gid.raw[i] = b;
	}
	r->addr = addr;
	return qp_rts(s->qp, s->gid_index, r->qpn, &r->gid);
}

/* poll_n takes n completions into wc within 30 s; how many it took. */
static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	time_t deadline = time(NULL) + 30;
	int got = 0;
	while (got < n && time(NULL) < deadline) {
		int k = ibv_poll_cq(cq, n - got, wc + got);
		if (k < 0)
			return got;
		got += k;
	}
	return got;
}

/* A temporary file of n bytes holding seed 0's pattern, unlinked. */
static int temp_file(size_t n)
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
	fill(b, n, 0, 0);
	ssize_t w = pwrite(fd, b, n, 0);
	free(b);
	return w == (ssize_t)n ? fd : -1;
}

/* file_holds checks n bytes of the file at off against seed's pattern
 * from offset from. */
static int file_holds(int fd, size_t off, size_t n, uint8_t seed, size_t from)
{
	uint8_t b[SPAN];
	return n <= sizeof(b) && pread(fd, b, n, off) == (ssize_t)n && holds(b, n, seed, from);
}

/* serve is the target's work on buf (len bytes; fd its file, or -1). */
static int serve(struct side *s, const char *kind, uint8_t *buf, size_t len, int fd)
{
	thread_off[0] = 0;
	thread_off[1] = W_OFF + SPAN;
	thread_off[2] = R_OFF + SPAN;
	thread_off[3] = S_OFF + SPAN;
	thread_off[4] = len - GAP;
	if (fd < 0)
		fill(buf, len, 0, 0);
	else
		check(holds(buf, len, 0, 0), "the mapping shows the file's bytes");
	struct writer w = {.buf = buf};
	pthread_t th;
	if (pthread_create(&th, NULL, write_loop, &w))
		return 100;
	wait_passes(&w, 0);

	struct ibv_mr *mr = ibv_reg_mr(s->pd, buf, len, ACCESS);
	char what[128];
	snprintf(what, sizeof(what), "ibv_reg_mr of the %s buffer (%zu bytes at %p)%s%s", kind, len, (void *)buf,
		 mr ? "" : ": ", mr ? "" : strerror(errno));
	check(mr != NULL, what);
	if (!mr)
		return 100;
	check(holds(buf + W_OFF, SPAN, 0, W_OFF) && holds(buf + R_OFF, SPAN, 0, R_OFF) &&
		      holds(buf + S_OFF, SPAN, 0, S_OFF) && holds(buf + REST, len - GAP - REST, 0, REST),
	      "registration kept every byte");
	struct ibv_sge sge = {.addr = (uintptr_t)(buf + S_OFF), .length = SPAN, .lkey = mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1}, *rbad;
	check(ibv_post_recv(s->qp, &rwr, &rbad) == 0, "a receive into the buffer");
	struct remote peer;
	if (say_info(s, buf, mr) || read_info(s, &peer)) {
		perror("connecting to the peer");
		return 100;
	}
	printf("connected\n");
	fflush(stdout);

	struct ibv_wc wc;
	check(poll_n(s->cq, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 7 && wc.byte_len == SPAN,
	      "the peer's SEND arrived");
	/* The thread went on writing through the transfers and after them. */
	wait_passes(&w, passes(&w) + 1);
	__atomic_store_n(&w.stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);

	check(holds(buf + W_OFF, SPAN, 2, 0), "the peer's RDMA WRITE is in place, byte for byte");
	check(holds(buf + S_OFF, SPAN, 3, 0), "the peer's SEND is in place, byte for byte");
	check(holds(buf + R_OFF, SPAN, 0, R_OFF) && holds(buf + REST, len - GAP - REST, 0, REST),
	      "the bytes no one wrote are as they were");
	int kept = 1;
	for (int k = 0; k < 5; k++)
		for (int j = 0; j < GAP / 8; j++)
			kept = kept && ((uint64_t *)(buf + thread_off[k]))[j] == w.count;
	snprintf(what, sizeof(what), "the thread's last words are in their places (%llu passes)",
		 (unsigned long long)w.count);
	check(kept, what);
	if (fd >= 0 && strcmp(kind, "shared-file") == 0) {
		check(file_holds(fd, W_OFF, SPAN, 2, 0) && file_holds(fd, S_OFF, SPAN, 3, 0),
		      "the file holds the WRITE's and the SEND's bytes");
		check(file_holds(fd, R_OFF, SPAN, 0, R_OFF), "and its own elsewhere");
	} else if (fd >= 0) {
		check(file_holds(fd, W_OFF, SPAN, 0, W_OFF) && file_holds(fd, S_OFF, SPAN, 0, S_OFF),
		      "the file holds none of the private mapping's remote writes");
	}
	wait_line("checked");
	check(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	close_side(s);
	return failed;
}

static int target(const char *kind, int gid_index)
{
	struct side s;
	if (open_side(&s, gid_index)) {
		perror("opening the device");
		return 100;
	}
	size_t page = sysconf(_SC_PAGESIZE), len = LEN;
	uint8_t *buf = NULL, *heap = NULL;
	int fd = -1;
	if (strcmp(kind, "heap") == 0) {
		heap = malloc(LEN + 16);
		buf = heap && (uintptr_t)heap % page == 0 ? heap + 16 : heap;
		check(buf && (uintptr_t)buf % page != 0, "the heap buffer is not page aligned");
	} else if (strcmp(kind, "memalign") == 0) {
		if (posix_memalign((void **)&heap, page, LEN))
			heap = NULL;
		buf = heap;
	} else if (strcmp(kind, "stack") == 0) {
		uint8_t frame[LEN] __attribute__((aligned(64)));
		return serve(&s, kind, frame, LEN, -1);
	} else if (strcmp(kind, "mmap") == 0 || strcmp(kind, "shared-anon") == 0 || strcmp(kind, "hugetlb") == 0) {
		int flags = MAP_ANONYMOUS | (strcmp(kind, "shared-anon") == 0 ? MAP_SHARED : MAP_PRIVATE);
		if (strcmp(kind, "hugetlb") == 0) {
			flags |= MAP_HUGETLB;
			len = HUGE_LEN;
		}
		buf = mmap(NULL, len, PROT_READ | PROT_WRITE, flags, -1, 0);
		if (buf == MAP_FAILED) {
			fprintf(stderr, "mmap of %zu bytes: %s\n", len, strerror(errno));
			buf = NULL;
		}
	} else if (strcmp(kind, "shared-file") == 0 || strcmp(kind, "private-file") == 0) {
		fd = temp_file(LEN);
		int flags = strcmp(kind, "shared-file") == 0 ? MAP_SHARED : MAP_PRIVATE;
		buf = fd < 0 ? MAP_FAILED : mmap(NULL, LEN, PROT_READ | PROT_WRITE, flags, fd, 0);
		if (buf == MAP_FAILED)
			buf = NULL;
	} else {
		fprintf(stderr, "no kind %s\n", kind);
		return 100;
	}
	check(buf != NULL, "the buffer is allocated");
	if (!buf)
		return 100;
	int r = serve(&s, kind, buf, len, fd);
	free(heap);
	return r;
}

static int peer(int gid_index)
{
	struct side s;
	if (open_side(&s, gid_index)) {
		perror("opening the device");
		return 100;
	}
	uint8_t *local = calloc(1, LEN);
	struct ibv_mr *mr = local ? ibv_reg_mr(s.pd, local, LEN, IBV_ACCESS_LOCAL_WRITE) : NULL;
	check(mr != NULL, "ibv_reg_mr of the peer's buffer");
	if (!mr)
		return 100;
	fill(local, SPAN, 2, 0);
	fill(local + 2 * 4096, SPAN, 3, 0);
	struct remote t;
	if (say_info(&s, local, mr) || read_info(&s, &t)) {
		perror("connecting to the target");
		return 100;
	}
	struct ibv_sge sge[3] = {{.addr = (uintptr_t)local, .length = SPAN, .lkey = mr->lkey},
				 {.addr = (uintptr_t)(local + 4096), .length = SPAN, .lkey = mr->lkey},
				 {.addr = (uintptr_t)(local + 2 * 4096), .length = SPAN, .lkey = mr->lkey}};
	struct ibv_send_wr wr[3] = {
		{.wr_id = 1, .sg_list = &sge[0], .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
		 .wr.rdma = {.remote_addr = t.addr + W_OFF, .rkey = t.rkey}, .next = &wr[1]},
		{.wr_id = 2, .sg_list = &sge[1], .num_sge = 1, .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
		 .wr.rdma = {.remote_addr = t.addr + R_OFF, .rkey = t.rkey}, .next = &wr[2]},
		{.wr_id = 3, .sg_list = &sge[2], .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
	};
	struct ibv_send_wr *bad;
	check(ibv_post_send(s.qp, wr, &bad) == 0, "WRITE, READ and SEND posted");
	struct ibv_wc wc[3];
	int got = poll_n(s.cq, wc, 3), ok = got == 3;
	for (int i = 0; i < got; i++) {
		if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != (uint64_t)i + 1) {
			fprintf(stderr, "completion %d: wr_id %llu, %s\n", i, (unsigned long long)wc[i].wr_id,
				ibv_wc_status_str(wc[i].status));
			ok = 0;
		}
	}
	check(ok, "the three completed successfully");
	check(holds(local + 4096, SPAN, 0, R_OFF), "the READ brought the target's bytes, byte for byte");
	check(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	close_side(&s);
	free(local);
	return failed;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && strcmp(argv[1], "target") == 0)
		return target(argv[2], atoi(argv[3]));
	if (argc == 3 && strcmp(argv[1], "peer") == 0)
		return peer(atoi(argv[2]));
	fprintf(stderr, "usage: mr_kinds target KIND GID_INDEX | peer GID_INDEX\n");
	return 100;
}
