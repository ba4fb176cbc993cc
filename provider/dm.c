/*
 * dm.c: device memory (ibv_alloc_dm). The daemon holds it, as a NIC holds
 * its on-chip memory: a sealed memfd it makes and maps, which the reply to
 * alloc_dm passes and the provider maps too, so ibv_memcpy_to_dm and
 * ibv_memcpy_from_dm are plain copies here and the engines reach a region
 * in it (ibv_reg_dm_mr, zero-based) with plain copies there.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "provider.h"

struct sn_dm {
	struct ibv_dm ibv;
	uint32_t handle;
	uint8_t *mem;
	uint64_t length; /* what the program asked for; mem maps whole pages */
	size_t size;
};

static struct sn_dm *to_dm(struct ibv_dm *dm)
{
	return sn_container_of(dm, struct sn_dm, ibv);
}

/* check_range refuses what ConnectX refuses: a range past the end
 * (EFAULT), or an offset or length not a multiple of 4 bytes (EINVAL, its
 * copies are of 4-byte words). */
static int check_range(struct sn_dm *dm, uint64_t off, size_t length)
{
	if (off > dm->length || length > dm->length - off)
		return EFAULT;
	if ((off | length) & 3)
		return EINVAL;
	return 0;
}

static int memcpy_to_dm(struct ibv_dm *ibdm, uint64_t off, const void *host, size_t length)
{
	struct sn_dm *dm = to_dm(ibdm);
	int err = check_range(dm, off, length);
	if (!err)
		memcpy(dm->mem + off, host, length);
	return err;
}

static int memcpy_from_dm(void *host, struct ibv_dm *ibdm, uint64_t off, size_t length)
{
	struct sn_dm *dm = to_dm(ibdm);
	int err = check_range(dm, off, length);
	if (!err)
		memcpy(host, dm->mem + off, length);
	return err;
}

struct ibv_dm *sn_alloc_dm(struct ibv_context *context, struct ibv_alloc_dm_attr *attr)
{
	if (attr->comp_mask || attr->length == 0 || attr->length > SN_MAX_DM_SIZE ||
	    attr->log_align_req > SN_DM_MAX_LOG_ALIGN) {
		errno = EINVAL;
		return NULL;
	}
	struct sn_dm *dm = calloc(1, sizeof(*dm));
	if (!dm)
		return NULL;
	struct sn_context *ctx = to_ctx(context);
	struct sn_alloc_dm_req req = {.length = attr->length, .log_align = attr->log_align_req};
	struct sn_handle r;
	int fd = -1, n = sn_call(ctx, SN_OP_ALLOC_DM, &req, sizeof(req), &r, sizeof(r), &fd, 1);
	if (n < 0)
		goto fail;
	long page = sysconf(_SC_PAGESIZE);
	dm->size = (attr->length + page - 1) & ~(size_t)(page - 1);
	dm->mem = n == 1 ? sn_map_ring(fd, dm->size) : NULL;
	int e = n == 1 ? errno : EPROTO;
	if (n > 0)
		close(fd);
	if (!dm->mem) {
		sn_destroy_handle(ctx, SN_OP_FREE_DM, r.handle);
		errno = e;
		goto fail;
	}
	dm->handle = r.handle;
	dm->length = attr->length;
	dm->ibv.context = context;
	dm->ibv.memcpy_to_dm = memcpy_to_dm;
	dm->ibv.memcpy_from_dm = memcpy_from_dm;
	dm->ibv.handle = r.handle;
	return &dm->ibv;
fail:
	free(dm);
	return NULL;
}

int sn_free_dm(struct ibv_dm *ibdm)
{
	struct sn_dm *dm = to_dm(ibdm);
	int err = sn_destroy_handle(to_ctx(ibdm->context), SN_OP_FREE_DM, dm->handle);
	if (err)
		return err;
	munmap(dm->mem, dm->size);
	free(dm);
	return 0;
}

/* sn_reg_dm_mr registers [off, off+length) of dm; the region's addresses
 * start at 0 there (ZERO_BASED, which the kernel requires), so its addr is
 * NULL as libibverbs' ibv_cmd_reg_dm_mr leaves it. */
struct ibv_mr *sn_reg_dm_mr(struct ibv_pd *ibpd, struct ibv_dm *ibdm, uint64_t off, size_t length,
			    unsigned int access)
{
	if (!(access & IBV_ACCESS_ZERO_BASED)) {
		errno = EINVAL;
		return NULL;
	}
	struct sn_mr *mr = calloc(1, sizeof(*mr));
	if (!mr)
		return NULL;
	struct sn_reg_dm_mr_req req = {.pd = sn_pd_handle(ibpd), .dm = to_dm(ibdm)->handle, .access = access,
				       .offset = off, .length = length};
	struct sn_reg_mr_reply r;
	if (sn_call(to_ctx(ibpd->context), SN_OP_REG_DM_MR, &req, sizeof(req), &r, sizeof(r), NULL, 0) < 0) {
		int e = errno;
		free(mr);
		errno = e;
		return NULL;
	}
	mr->handle = r.handle;
	mr->vmr.ibv_mr.context = ibpd->context;
	mr->vmr.ibv_mr.pd = ibpd;
	mr->vmr.ibv_mr.handle = r.handle;
	mr->vmr.ibv_mr.lkey = r.lkey;
	mr->vmr.ibv_mr.rkey = r.rkey;
	mr->vmr.ibv_mr.length = length;
	mr->vmr.access = access;
	return &mr->vmr.ibv_mr;
}

/* sn_import_dm maps allocation handle of the context's session again from
 * the memfd the daemon passes (query_dm), as mlx5's import maps the
 * device's memory again: the same bytes as the first object's. */
struct ibv_dm *sn_import_dm(struct ibv_context *context, uint32_t handle)
{
	struct sn_handle req = {handle};
	struct sn_query_dm_reply r;
	int fd = -1, n = sn_call(to_ctx(context), SN_OP_QUERY_DM, &req, sizeof(req), &r, sizeof(r), &fd, 1);
	if (n < 0)
		return NULL;
	struct sn_dm *dm = NULL;
	int e = EPROTO; /* no memfd, or a length alloc_dm would have refused */
	if (n == 1 && r.length > 0 && r.length <= SN_MAX_DM_SIZE) {
		e = ENOMEM;
		dm = calloc(1, sizeof(*dm));
	}
	if (dm) {
		long page = sysconf(_SC_PAGESIZE);
		dm->size = (r.length + page - 1) & ~(size_t)(page - 1);
		dm->mem = sn_map_ring(fd, dm->size);
		e = errno;
	}
	if (n == 1)
		close(fd);
	if (!dm || !dm->mem) {
		free(dm);
		errno = e;
		return NULL;
	}
	dm->handle = handle;
	dm->length = r.length;
	dm->ibv.context = context;
	dm->ibv.memcpy_to_dm = memcpy_to_dm;
	dm->ibv.memcpy_from_dm = memcpy_from_dm;
	dm->ibv.handle = handle;
	return &dm->ibv;
}

/* sn_unimport_dm unmaps and frees the object only: the allocation stays
 * the session's. */
void sn_unimport_dm(struct ibv_dm *ibdm)
{
	struct sn_dm *dm = to_dm(ibdm);
	munmap(dm->mem, dm->size);
	free(dm);
}
