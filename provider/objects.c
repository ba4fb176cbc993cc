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
	pd->handle = pd->ibv.handle = r.handle; /* the daemon's handle: what ibv_import_pd takes */
	return &pd->ibv;
}

int sn_dealloc_pd(struct ibv_pd *ibpd)
{
	struct sn_pd *pd = sn_container_of(ibpd, struct sn_pd, ibv);
	if (pd->parent)
		return sn_dealloc_parent_domain(pd);
	if (__atomic_load_n(&pd->parents, __ATOMIC_ACQUIRE))
		return EBUSY; /* a parent domain holds it, as mlx5's refcount says */
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

/* sn_advise_mr sends the SGEs SN_ADVISE_SGES at a time; the daemon checks
 * them (lkeys of this PD's ODP regions, ranges inside them) and faults the
 * pages in. It returns an errno, as libibverbs' ibv_advise_mr does. */
int sn_advise_mr(struct ibv_pd *ibpd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sg_list,
		 uint32_t num_sges)
{
	struct sn_pd *pd = sn_container_of(ibpd, struct sn_pd, ibv);
	if (!num_sges || !sg_list)
		return EINVAL;
	for (uint32_t done = 0; done < num_sges;) {
		struct sn_advise_mr_req req = {.pd = pd->handle, .advice = advice, .flags = flags};
		uint32_t n = num_sges - done < SN_ADVISE_SGES ? num_sges - done : SN_ADVISE_SGES;
		for (uint32_t i = 0; i < n; i++)
			req.sge[i] = (struct sn_sge){.addr = sg_list[done + i].addr, .length = sg_list[done + i].length,
						     .lkey = sg_list[done + i].lkey};
		req.count = n;
		if (sn_call(to_ctx(ibpd->context), SN_OP_ADVISE_MR, &req, sizeof(req), NULL, 0, NULL, 0) < 0)
			return errno;
		done += n;
	}
	return 0;
}

/* sn_rereg_mr changes the region in the daemon, which keeps its keys, and
 * the access libibverbs keeps in verbs_mr (ibv_rereg_mr sets the PD, the
 * address and the length itself). Errors are errnos; libibverbs turns them
 * into IBV_REREG_MR_ERR_CMD. */
int sn_rereg_mr(struct sn_verbs_mr *vmr, int flags, struct ibv_pd *ibpd, void *addr, size_t length, int access)
{
	struct sn_mr *mr = sn_container_of(vmr, struct sn_mr, vmr);
	struct sn_rereg_mr_req req = {.handle = mr->handle, .flags = flags, .access = access,
				      .addr = (uintptr_t)addr, .length = length};
	if (flags & IBV_REREG_MR_CHANGE_PD) {
		if (!ibpd)
			return EINVAL;
		req.pd = sn_container_of(ibpd, struct sn_pd, ibv)->handle;
	}
	struct sn_reg_mr_reply r;
	if (sn_call(to_ctx(vmr->ibv_mr.context), SN_OP_REREG_MR, &req, sizeof(req), &r, sizeof(r), NULL, 0) < 0)
		return errno;
	vmr->ibv_mr.lkey = r.lkey;
	vmr->ibv_mr.rkey = r.rkey;
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		vmr->access = access;
	return 0;
}

/* sn_alloc_mw allocates a memory window: type 1 or 2, EINVAL for another
 * (rdma-core's tests want EOPNOTSUPP only from a device without windows). */
struct ibv_mw *sn_alloc_mw(struct ibv_pd *ibpd, enum ibv_mw_type type)
{
	struct sn_pd *pd = sn_container_of(ibpd, struct sn_pd, ibv);
	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
		errno = EINVAL;
		return NULL;
	}
	struct sn_mw *mw = calloc(1, sizeof(*mw));
	if (!mw)
		return NULL;
	struct sn_alloc_mw_req req = {.pd = pd->handle, .type = type};
	struct sn_alloc_mw_reply r;
	if (sn_call(to_ctx(ibpd->context), SN_OP_ALLOC_MW, &req, sizeof(req), &r, sizeof(r), NULL, 0) < 0) {
		int e = errno;
		free(mw);
		errno = e;
		return NULL;
	}
	mw->handle = r.handle;
	mw->ibv.context = ibpd->context;
	mw->ibv.pd = ibpd;
	mw->ibv.rkey = r.rkey;
	mw->ibv.handle = r.handle;
	mw->ibv.type = type;
	return &mw->ibv;
}

/* sn_dealloc_mw deallocates a window, bound or not: the daemon unbinds it. */
int sn_dealloc_mw(struct ibv_mw *ibmw)
{
	struct sn_mw *mw = sn_container_of(ibmw, struct sn_mw, ibv);
	int err = destroy_handle(ibmw->context, SN_OP_DEALLOC_MW, mw->handle);
	if (!err)
		free(mw);
	return err;
}

/* sn_put_bind writes a BIND_MW entry's binding (hostif.h): the window is
 * named by the new rkey's key index, as a ConnectX WQE names it. */
void sn_put_bind(struct sn_send_entry *h, uint32_t rkey, const struct ibv_mw_bind_info *info)
{
	h->rkey = rkey;
	h->remote_addr = info->addr;
	h->compare_add = info->length;
	h->imm = info->mr ? info->mr->lkey : 0;
	h->swap = info->mw_access_flags;
}

/* sn_bind_mw binds a type 1 window by a work request on qp (ibv_bind_mw),
 * with the window's key one more (ibv_inc_rkey), as mlx5 does; mw->rkey
 * is the new rkey once the request is posted. */
int sn_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind)
{
	const struct ibv_mw_bind_info *info = &mw_bind->bind_info;
	if (mw->type != IBV_MW_TYPE_1 || (!info->mr && info->length))
		return EINVAL;
	struct ibv_send_wr wr = {.wr_id = mw_bind->wr_id, .opcode = IBV_WR_BIND_MW, .send_flags = mw_bind->send_flags};
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = *info;
	struct ibv_send_wr *bad;
	int err = sn_post_send(qp, &wr, &bad);
	if (err)
		return err;
	mw->rkey = wr.bind_mw.rkey;
	return 0;
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

/* map_cq_ring maps the ring of depth entries a reply passed (n
 * descriptors, fd), or fails with EPROTO for a depth that is not a power
 * of two the provider can index. */
static uint8_t *map_cq_ring(int n, int fd, uint32_t depth, size_t *size)
{
	if (depth == 0 || (depth & (depth - 1)) || depth > (1u << 24)) {
		if (n > 0)
			close(fd);
		errno = EPROTO;
		return NULL;
	}
	*size = SN_RING_HEADER + (size_t)depth * SN_CQ_ENTRY;
	return map_one(n, fd, *size);
}

/*
 * sn_resize_cq asks the daemon to move the CQ's completions to a new ring
 * of at least cqe entries and goes on polling there at the same index
 * (docs/HOST-INTERFACE.md, resize_cq). It holds the CQ's lock over the
 * call, as mlx5 holds its CQ's over the kernel's resize and copy, so no
 * completion is polled from the old ring meanwhile: the daemon copied
 * exactly those this process had not polled. An arm made in the old ring
 * during the call (ibv_req_notify_cq takes no lock) moves to the new one.
 * EINVAL for cqe out of 1..max_cqe or below the completions held.
 */
int sn_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct sn_cq *cq = sn_container_of(ibcq, struct sn_cq, ibv);
	struct sn_context *ctx = to_ctx(ibcq->context);
	if (cqe <= 0 || (uint32_t)cqe > ctx->s->limits.max_cqe)
		return EINVAL;
	struct sn_resize_cq_req req = {.handle = cq->handle, .entries = (uint32_t)cqe};
	struct sn_resize_cq_reply r;
	pthread_spin_lock(&cq->lock);
	int fd = -1, n = sn_call(ctx, SN_OP_RESIZE_CQ, &req, sizeof(req), &r, sizeof(r), &fd, 1);
	size_t size = 0;
	uint8_t *ring = n < 0 ? NULL : map_cq_ring(n, fd, r.depth, &size);
	if (!ring) {
		/* After a reply the daemon writes the new ring only: the
		 * CQ is lost to this process, as a CQ whose daemon is gone. */
		int err = errno;
		pthread_spin_unlock(&cq->lock);
		return err;
	}
	uint32_t armed = __atomic_exchange_n((uint32_t *)(cq->ring + SN_CQ_ARMED), 0, __ATOMIC_SEQ_CST);
	if (armed)
		__atomic_store_n((uint32_t *)(ring + SN_CQ_ARMED), armed, __ATOMIC_SEQ_CST);
	munmap(cq->ring, cq->size);
	cq->ring = ring;
	cq->size = size;
	cq->mask = r.depth - 1;
	ibcq->cqe = (int)r.depth;
	pthread_spin_unlock(&cq->lock);
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
	return sn_srq_created(ibpd->context, srq, &r, n, fd, &attr->attr);
}

/* sn_srq_created maps the ring of an SRQ the daemon made (reply r, its
 * descriptor fd of n) and answers attr; on failure it destroys the SRQ and
 * frees srq. */
struct ibv_srq *sn_srq_created(struct ibv_context *context, struct sn_srq *srq, const struct sn_create_srq_reply *r,
			       int n, int fd, struct ibv_srq_attr *attr)
{
	if (sn_srq_map(context, srq, n, fd, r->handle, r->depth, r->stride)) {
		free(srq);
		return NULL;
	}
	srq->limit = attr->srq_limit;
	attr->max_wr = r->depth;
	attr->max_sge = srq->max_sge;
	return &srq->ibv;
}

/* sn_srq_map maps the ring of the SRQ handle that a create_srq,
 * create_tm_srq or create_xrc_srq reply passed (n descriptors, fd the
 * first); 0, or -1 with errno after destroying the daemon's SRQ. */
int sn_srq_map(struct ibv_context *context, struct sn_srq *srq, int n, int fd, uint32_t handle, uint32_t depth,
	       uint32_t stride)
{
	srq->size = SN_RING_HEADER + (size_t)depth * stride;
	if (depth == 0 || (depth & (depth - 1)) || stride < 32 || depth > (1u << 16) || stride > 4096) {
		if (n > 0)
			close(fd);
		errno = EPROTO;
	} else if ((srq->mem = map_one(n, fd, srq->size)) != NULL && sn_wq_init(&srq->wq, srq->mem, depth, stride) == 0) {
		srq->handle = handle;
		srq->max_sge = (stride - sizeof(struct sn_recv_entry)) / sizeof(struct sn_sge);
		return 0;
	}
	int e = errno;
	if (srq->mem)
		munmap(srq->mem, srq->size);
	destroy_handle(context, SN_OP_DESTROY_SRQ, handle);
	errno = e;
	return -1;
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
