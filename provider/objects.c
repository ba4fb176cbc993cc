/*
 * objects.c: protection domains, memory regions, address handles,
 * completion queues and shared receive queues, made by the daemon through
 * the control socket. Errors come back as the daemon's errno.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "provider.h"

static int destroy_handle(struct ibv_context *context, enum sn_op op, uint32_t handle)
{
	return sn_destroy_handle(to_ctx(context), op, handle);
}

struct ibv_pd *sn_alloc_pd(struct ibv_context *context)
{
	struct sn_pd *pd = calloc(1, sizeof(*pd));
	struct sn_handle r;
	if (!pd)
		return NULL;
	if (sn_call(to_ctx(context), SN_OP_ALLOC_PD, NULL, 0, &r, sizeof(r), NULL, 0) < 0) {
		free(pd);
		return NULL;
	}
	pd->handle = r.handle;
	return &pd->ibv;
}

int sn_dealloc_pd(struct ibv_pd *ibpd)
{
	struct sn_pd *pd = sn_container_of(ibpd, struct sn_pd, ibv);
	int err = destroy_handle(ibpd->context, SN_OP_DEALLOC_PD, pd->handle);
	if (!err)
		free(pd);
	return err;
}

/* sn_reg_mr registers the program's own memory as it is: the daemon reads
 * and writes it at its virtual address, so the I/O address must be it.
 * Nothing here touches the memory, nor does dereg_mr: the program may have
 * unmapped or reused the range by then, and the daemon checks the mapping
 * itself. */
struct ibv_mr *sn_reg_mr(struct ibv_pd *ibpd, void *addr, size_t length, uint64_t hca_va, int access)
{
	struct sn_pd *pd = sn_container_of(ibpd, struct sn_pd, ibv);
	if (hca_va != (uintptr_t)addr) {
		errno = EINVAL;
		return NULL;
	}
	struct sn_mr *mr = calloc(1, sizeof(*mr));
	if (!mr)
		return NULL;
	struct sn_context *ctx = to_ctx(ibpd->context);
	struct sn_reg_mr_req req = {.pd = pd->handle, .access = access, .addr = (uintptr_t)addr, .length = length};
	struct sn_reg_mr_reply r;
	if (sn_call(ctx, SN_OP_REG_MR, &req, sizeof(req), &r, sizeof(r), NULL, 0) < 0) {
		int e = errno;
		free(mr);
		errno = e;
		return NULL;
	}
	mr->handle = r.handle;
	mr->vmr.ibv_mr.handle = r.handle;
	mr->vmr.ibv_mr.lkey = r.lkey;
	mr->vmr.ibv_mr.rkey = r.rkey;
	mr->vmr.access = access;
	return &mr->vmr.ibv_mr;
}

int sn_dereg_mr(struct sn_verbs_mr *vmr)
{
	struct sn_mr *mr = sn_container_of(vmr, struct sn_mr, vmr);
	int err = destroy_handle(vmr->ibv_mr.context, SN_OP_DEREG_MR, mr->handle);
	if (!err)
		free(mr);
	return err;
}

/* sn_create_ah makes an address handle from the attribute's global route:
 * on RoCE every address is a GID. */
struct ibv_ah *sn_create_ah(struct ibv_pd *ibpd, struct ibv_ah_attr *attr)
{
	struct sn_pd *pd = sn_container_of(ibpd, struct sn_pd, ibv);
	if (!attr->is_global) {
		errno = EINVAL;
		return NULL;
	}
	struct sn_ah *ah = calloc(1, sizeof(*ah));
	if (!ah)
		return NULL;
	struct sn_create_ah_req req = {.pd = pd->handle, .port = attr->port_num, .sgid_index = attr->grh.sgid_index,
				       .hop_limit = attr->grh.hop_limit, .traffic_class = attr->grh.traffic_class,
				       .sl = attr->sl, .flow_label = attr->grh.flow_label};
	memcpy(req.dgid, attr->grh.dgid.raw, 16);
	struct sn_handle r;
	if (sn_call(to_ctx(ibpd->context), SN_OP_CREATE_AH, &req, sizeof(req), &r, sizeof(r), NULL, 0) < 0) {
		free(ah);
		return NULL;
	}
	ah->handle = r.handle;
	return &ah->ibv;
}

int sn_destroy_ah(struct ibv_ah *ibah)
{
	struct sn_ah *ah = sn_container_of(ibah, struct sn_ah, ibv);
	int err = destroy_handle(ibah->context, SN_OP_DESTROY_AH, ah->handle);
	if (!err)
		free(ah);
	return err;
}

/* map_one maps the one descriptor a reply passed, size bytes, and closes
 * it; NULL with errno. */
static uint8_t *map_one(int n, int fd, size_t size)
{
	if (n != 1) {
		if (n > 0)
			close(fd);
		errno = EPROTO;
		return NULL;
	}
	uint8_t *p = sn_map_ring(fd, size);
	int e = errno;
	close(fd);
	errno = e;
	return p;
}

/* sn_create_cq makes a CQ whose ring the daemon fills; with a channel (one
 * made through the daemon), armed completions are written to its pipe
 * with the CQ's address, which ibv_get_cq_event reads back. */
struct ibv_cq *sn_create_cq(struct ibv_context *context, int cqe, struct ibv_comp_channel *channel, int vector)
{
	struct sn_context *ctx = to_ctx(context);
	if (vector < 0 || vector >= context->num_comp_vectors) {
		errno = EINVAL; /* as the kernel's create_cq checks it */
		return NULL;
	}
	struct sn_create_cq_req req = {.entries = cqe > 0 ? cqe : 0};
	if (channel && !(req.channel = sn_channel_handle(ctx, channel))) {
		errno = EINVAL; /* a channel libibverbs made on the kernel's device file: run under softnic exec */
		return NULL;
	}
	struct sn_cq *cq = calloc(1, sizeof(*cq));
	if (!cq)
		return NULL;
	req.user_handle = (uintptr_t)&cq->ibv;
	struct sn_create_cq_reply r;
	int fd = -1, n = sn_call(ctx, SN_OP_CREATE_CQ, &req, sizeof(req), &r, sizeof(r), &fd, 1);
	if (n < 0)
		goto fail;
	if (r.depth == 0 || (r.depth & (r.depth - 1)) || r.depth > (1u << 24)) {
		close(fd);
		errno = EPROTO;
		goto gone;
	}
	cq->size = SN_RING_HEADER + (size_t)r.depth * SN_CQ_ENTRY;
	if (!(cq->ring = map_one(n, fd, cq->size)))
		goto gone;
	cq->handle = r.handle;
	cq->mask = r.depth - 1;
	cq->ibv.cqe = r.depth;
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	return &cq->ibv;
gone: {
	int e = errno;
	destroy_handle(context, SN_OP_DESTROY_CQ, r.handle);
	errno = e;
}
fail:
	free(cq);
	return NULL;
}

int sn_destroy_cq(struct ibv_cq *ibcq)
{
	struct sn_cq *cq = sn_container_of(ibcq, struct sn_cq, ibv);
	int err = destroy_handle(ibcq->context, SN_OP_DESTROY_CQ, cq->handle);
	if (err)
		return err;
	munmap(cq->ring, cq->size);
	pthread_spin_destroy(&cq->lock);
	free(cq);
	return 0;
}

struct ibv_srq *sn_create_srq(struct ibv_pd *ibpd, struct ibv_srq_init_attr *attr)
{
	struct sn_pd *pd = sn_container_of(ibpd, struct sn_pd, ibv);
	struct sn_srq *srq = calloc(1, sizeof(*srq));
	if (!srq)
		return NULL;
	struct sn_create_srq_req req = {.pd = pd->handle, .max_wr = attr->attr.max_wr, .max_sge = attr->attr.max_sge,
					.limit = attr->attr.srq_limit, .user_handle = (uintptr_t)&srq->ibv};
	struct sn_create_srq_reply r;
	int fd = -1, n = sn_call(to_ctx(ibpd->context), SN_OP_CREATE_SRQ, &req, sizeof(req), &r, sizeof(r), &fd, 1);
	if (n < 0) {
		free(srq);
		return NULL;
	}
	srq->size = SN_RING_HEADER + (size_t)r.depth * r.stride;
	if (r.depth == 0 || (r.depth & (r.depth - 1)) || r.stride < 32 || r.depth > (1u << 16) || r.stride > 4096) {
		close(fd);
		errno = EPROTO;
	} else if ((srq->mem = map_one(n, fd, srq->size)) != NULL && sn_wq_init(&srq->wq, srq->mem, r.depth, r.stride) == 0) {
		srq->handle = r.handle;
		srq->max_sge = (r.stride - sizeof(struct sn_recv_entry)) / sizeof(struct sn_sge);
		srq->limit = attr->attr.srq_limit;
		attr->attr.max_wr = r.depth;
		attr->attr.max_sge = srq->max_sge;
		return &srq->ibv;
	}
	int e = errno;
	if (srq->mem)
		munmap(srq->mem, srq->size);
	destroy_handle(ibpd->context, SN_OP_DESTROY_SRQ, r.handle);
	free(srq);
	errno = e;
	return NULL;
}

int sn_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask)
{
	struct sn_srq *srq = sn_container_of(ibsrq, struct sn_srq, ibv);
	if (mask & ~IBV_SRQ_LIMIT)
		return EINVAL; /* the ring's size is fixed */
	struct sn_modify_srq_req req = {.handle = srq->handle, .limit = attr->srq_limit};
	if (sn_call(to_ctx(ibsrq->context), SN_OP_MODIFY_SRQ, &req, sizeof(req), NULL, 0, NULL, 0) < 0)
		return errno;
	srq->limit = attr->srq_limit;
	return 0;
}

int sn_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct sn_srq *srq = sn_container_of(ibsrq, struct sn_srq, ibv);
	attr->max_wr = srq->wq.mask + 1;
	attr->max_sge = srq->max_sge;
	attr->srq_limit = srq->limit;
	return 0;
}

int sn_destroy_srq(struct ibv_srq *ibsrq)
{
	struct sn_srq *srq = sn_container_of(ibsrq, struct sn_srq, ibv);
	int err = destroy_handle(ibsrq->context, SN_OP_DESTROY_SRQ, srq->handle);
	if (err)
		return err;
	munmap(srq->mem, srq->size);
	pthread_spin_destroy(&srq->wq.lock);
	free(srq);
	return 0;
}

/* mcast asks the daemon to attach the QP to a multicast group or detach it
 * (op); the daemon checks the QP's type and the GID as the kernel does. */
static int mcast(struct ibv_qp *ibqp, int op, const union ibv_gid *gid, uint16_t lid)
{
	struct sn_qp *qp = sn_container_of(ibqp, struct sn_qp, vqp.qp);
	struct sn_mcast_req req = {.qp = qp->handle, .lid = lid};
	memcpy(req.gid, gid->raw, sizeof(req.gid));
	if (sn_call(to_ctx(ibqp->context), op, &req, sizeof(req), NULL, 0, NULL, 0) < 0)
		return errno;
	return 0;
}

int sn_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, SN_OP_ATTACH_MCAST, gid, lid);
}

int sn_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, SN_OP_DETACH_MCAST, gid, lid);
}
