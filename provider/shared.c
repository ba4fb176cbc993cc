/*
 * shared.c: memory the provider makes for softnic's librdmacm and shares
 * with the daemon (share_memory): a sealed memfd both map, so that the
 * engine reaches a region registered in it with plain copies rather than
 * through the process's memory file. librdmacm keeps its rsockets'
 * buffers there, which it alone allocates and frees; what a program
 * registers stays its own memory as it is.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "provider.h"

/* sn_alloc_shared maps len bytes (whole pages) of zeros shared with the
 * daemon and returns them, with the handle that unshares them; NULL with
 * errno (the daemon's: ENOMEM past the user's --max-shared-bytes). */
void *sn_alloc_shared(struct ibv_context *context, size_t len, uint32_t *handle)
{
	long page = sysconf(_SC_PAGESIZE);
	if (!sn_is_softnic(context) || !len || len % (size_t)page || !handle) {
		errno = EINVAL;
		return NULL;
	}
	int fd = memfd_create("softnic-shared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return NULL;
	void *p = MAP_FAILED;
	if (ftruncate(fd, (off_t)len) == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		close(fd);
		errno = e;
		return NULL;
	}
	struct sn_share_memory_req req = {.addr = (uintptr_t)p, .length = len};
	struct sn_handle r;
	int n = sn_call_fds(to_ctx(context), SN_OP_SHARE_MEMORY, &req, sizeof(req), &fd, 1, &r, sizeof(r), NULL, 0);
	int e = errno;
	close(fd);
	if (n < 0) {
		munmap(p, len);
		errno = e;
		return NULL;
	}
	*handle = r.handle;
	return p;
}

/* sn_free_shared stops sharing memory of sn_alloc_shared and unmaps it.
 * Its regions must be deregistered first; if one is not, the daemon
 * keeps its own mapping of the memfd until the session ends, which
 * reaches no other memory of the process. */
void sn_free_shared(struct ibv_context *context, void *addr, size_t len, uint32_t handle)
{
	if (!sn_is_softnic(context) || !addr)
		return;
	sn_destroy_handle(to_ctx(context), SN_OP_UNSHARE_MEMORY, handle);
	munmap(addr, len);
}
