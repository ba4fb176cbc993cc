/*
 * sharemem.c: registered memory the daemon reaches without a system call.
 *
 * The daemon places and takes a region's payloads with process_vm_readv
 * and process_vm_writev, a call per batch of packets, unless the region
 * lies in memory the client shared with it: a sealed memfd both map
 * (share_memory, docs/HOST-INTERFACE.md). reg_mr makes that so where it
 * can without changing what the program sees. A region that covers whole
 * pages of private anonymous memory (a buffer from memalign, posix_memalign
 * or mmap, as perftest and rdma-core's examples allocate them) gets its
 * pages copied into a new memfd, which is then mapped over them with
 * MAP_FIXED: the program's pointers and data stay, and the pages hold
 * nothing but the region, so no other data of the program moves. Anything
 * else (a region sharing a page with other data, file mappings, stacks)
 * is registered as it is.
 *
 * The last deregistration gives the pages back as private anonymous memory
 * with the same bytes, so what the program does with them later (free
 * them to malloc, fork) is as it would have been. Meanwhile they are marked
 * MADV_DONTFORK, as rdma-core's ibv_fork_init marks registered memory: a
 * child would otherwise share them. SOFTNIC_SHARE_MR=0 turns all this off.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "provider.h"

/* The largest region copied into a memfd: the copy briefly doubles the
 * memory it takes, and larger ones are rare enough to go without. */
#define SN_SHARE_MAX (1ULL << 30)

struct sn_share {
	uintptr_t lo, hi; /* the pages, as the program and the daemon see them */
	uint32_t handle; /* the daemon's */
	unsigned regions; /* memory regions registered in it */
	struct sn_share *next;
};

static int share_enabled(void)
{
	const char *v = getenv("SOFTNIC_SHARE_MR");
	return !v || strcmp(v, "0") != 0;
}

/* struct mapping is one line of /proc/self/maps. */
struct mapping {
	char perms[5];
	unsigned long inode;
	int named; /* a path or a [name] other than [heap] */
};

/* find_mapping finds the mapping that holds [lo, hi); 0, or an errno
 * (ENOENT when no single mapping holds it all). */
static int find_mapping(uintptr_t lo, uintptr_t hi, struct mapping *m)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return errno;
	char *line = NULL;
	size_t cap = 0;
	int err = ENOENT;
	while (getline(&line, &cap, f) > 0) {
		unsigned long a, b, off, inode;
		unsigned dmaj, dmin;
		int path = 0;
		if (sscanf(line, "%lx-%lx %4s %lx %x:%x %lu %n", &a, &b, m->perms, &off, &dmaj, &dmin, &inode,
			   &path) < 7)
			continue;
		if (a > lo || b < hi)
			continue;
		m->inode = inode;
		char *name = line + path;
		name[strcspn(name, "\n")] = 0;
		m->named = path > 0 && *name && strcmp(name, "[heap]") != 0;
		err = 0;
		break;
	}
	free(line);
	fclose(f);
	return err;
}

/* copy_pages copies n bytes of pages from src to dst, a new memfd's
 * mapping, but for pages of zeros: those stay holes of the memfd, so that
 * a large buffer the program has not touched yet takes no memory. */
static void copy_pages(uint8_t *dst, const uint8_t *src, size_t n, size_t page)
{
	for (size_t off = 0; off < n; off += page) {
		const uint64_t *w = (const uint64_t *)(src + off);
		size_t i = 0;
		while (i < page / 8 && w[i] == 0)
			i++;
		if (i < page / 8)
			memcpy(dst + off, src + off, page);
	}
}

/* reback gives [lo, hi), private anonymous memory, a sealed memfd's pages
 * with the same contents; the memfd, or -1 with errno. */
static int reback(uintptr_t lo, uintptr_t hi, size_t page)
{
	size_t n = hi - lo;
	int fd = memfd_create("softnic-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -1;
	void *tmp = MAP_FAILED;
	if (ftruncate(fd, n) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
		goto fail;
	tmp = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (tmp == MAP_FAILED)
		goto fail;
	copy_pages(tmp, (const uint8_t *)lo, n, page);
	munmap(tmp, n);
	/* MAP_FIXED replaces the old pages only if it succeeds. */
	if (mmap((void *)lo, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
		goto fail;
	madvise((void *)lo, n, MADV_DONTFORK);
	return fd;
fail:;
	int e = errno;
	close(fd);
	errno = e;
	return -1;
}

/* restore gives s's pages back as private anonymous memory with the same
 * bytes; if it cannot, they stay shared (and correct). */
static void restore(struct sn_share *s)
{
	size_t n = s->hi - s->lo;
	void *tmp = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (tmp == MAP_FAILED)
		return;
	memcpy(tmp, (void *)s->lo, n);
	if (mremap(tmp, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)s->lo) == MAP_FAILED)
		munmap(tmp, n);
}

static int share_with_daemon(struct sn_context *ctx, struct sn_share *s, int fd)
{
	struct sn_share_memory_req req = {.addr = s->lo, .length = s->hi - s->lo};
	struct sn_handle r;
	if (sn_call_fd(ctx, SN_OP_SHARE_MEMORY, &req, sizeof(req), fd, &r, sizeof(r), NULL, 0) < 0)
		return -1;
	s->handle = r.handle;
	return 0;
}

/* new_share re-backs [lo, hi), if it is private anonymous memory, and
 * shares it with the daemon. */
static struct sn_share *new_share(struct sn_context *ctx, uintptr_t lo, uintptr_t hi, size_t page)
{
	struct mapping m;
	if (find_mapping(lo, hi, &m) != 0 || strcmp(m.perms, "rw-p") != 0 || m.inode != 0 || m.named)
		return NULL;
	struct sn_share *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->lo = lo, s->hi = hi;
	int fd = reback(lo, hi, page);
	if (fd < 0) {
		free(s);
		return NULL;
	}
	int err = share_with_daemon(ctx, s, fd);
	close(fd); /* the mappings keep the memfd */
	if (err) {
		restore(s);
		free(s);
		return NULL;
	}
	s->next = ctx->shares;
	ctx->shares = s;
	return s;
}

/*
 * sn_share_region makes [addr, addr+length) memory the daemon maps, if it
 * can, before reg_mr registers it there; it returns the share to release
 * with sn_unshare_region at dereg_mr, or NULL where the region stays as it
 * is (never an error: process_vm serves it).
 */
struct sn_share *sn_share_region(struct sn_context *ctx, void *addr, size_t length)
{
	long page = sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)addr, hi = lo + length;
	if (!share_enabled() || length == 0 || length > SN_SHARE_MAX || hi < lo || lo % page || hi % page)
		return NULL;
	pthread_mutex_lock(&ctx->share_lock);
	struct sn_share *s = ctx->shares;
	while (s && !(lo < s->hi && s->lo < hi))
		s = s->next;
	if (!s)
		s = new_share(ctx, lo, hi, page);
	else if (!(s->lo <= lo && hi <= s->hi))
		s = NULL; /* overlaps a share without lying in it */
	if (s)
		s->regions++;
	pthread_mutex_unlock(&ctx->share_lock);
	return s;
}

/* drop_share unshares s with the daemon and gives its pages back. */
static void drop_share(struct sn_context *ctx, struct sn_share *s)
{
	for (struct sn_share **p = &ctx->shares; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	struct sn_handle h = {s->handle};
	sn_call(ctx, SN_OP_UNSHARE_MEMORY, &h, sizeof(h), NULL, 0, NULL, 0); /* fails only once the daemon is gone */
	restore(s);
	free(s);
}

/* sn_unshare_region releases a region's share; the last region's release
 * ends it. */
void sn_unshare_region(struct sn_context *ctx, struct sn_share *s)
{
	pthread_mutex_lock(&ctx->share_lock);
	if (--s->regions == 0)
		drop_share(ctx, s);
	pthread_mutex_unlock(&ctx->share_lock);
}

/* sn_free_shares ends what regions the program left registered when it
 * closes the device. */
void sn_free_shares(struct sn_context *ctx)
{
	while (ctx->shares)
		drop_share(ctx, ctx->shares);
}
