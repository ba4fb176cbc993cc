/*
 * domain.c: thread domains and parent domains (ibv_alloc_td,
 * ibv_alloc_parent_domain), as mlx5 has them. A parent domain is a PD
 * wherever libibverbs takes one (MRs, QPs, SRQs, AHs, extended CQs): it
 * carries its contained PD's daemon handle, so every command made with it
 * names that PD, and its thread domain and allocators ride along.
 *
 * The allocators: mlx5 calls them for the buffers the device reads and
 * writes that the provider allocates (work queues, CQ buffers, doorbell
 * records). softnic's provider allocates none: every ring is shared memory
 * the daemon makes and passes (a memfd both map, since the daemon's
 * engines must reach it with plain copies), so there is nothing for them
 * to allocate and they are kept but never called. A thread domain's
 * promise (one thread uses the objects) lets mlx5 drop a lock on its
 * doorbell register; softnic's posts keep their lock, which costs an
 * uncontended spin lock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>

#include "provider.h"

struct sn_td {
	struct ibv_td ibv;
	int refs; /* the TD and the parent domains holding it (atomic) */
};

struct sn_parent_domain {
	struct sn_pd pd; /* first: the PD libibverbs sees; handle the contained PD's */
	struct sn_pd *contained;
	struct sn_td *td;
	void *(*alloc)(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment, uint64_t resource_type);
	void (*free)(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type);
	void *pd_context;
};

struct ibv_td *sn_alloc_td(struct ibv_context *context, struct ibv_td_init_attr *attr)
{
	if (attr->comp_mask) {
		errno = EINVAL;
		return NULL;
	}
	struct sn_td *td = calloc(1, sizeof(*td));
	if (!td)
		return NULL;
	td->ibv.context = context;
	td->refs = 1;
	return &td->ibv;
}

/* sn_dealloc_td frees a TD no parent domain holds (EBUSY otherwise). */
int sn_dealloc_td(struct ibv_td *ibtd)
{
	struct sn_td *td = sn_container_of(ibtd, struct sn_td, ibv);
	int one = 1;
	if (!__atomic_compare_exchange_n(&td->refs, &one, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return EBUSY;
	free(td);
	return 0;
}

#define SN_PD_ATTR_MASK (IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)

struct ibv_pd *sn_alloc_parent_domain(struct ibv_context *context, struct ibv_parent_domain_init_attr *attr)
{
	/* A parent domain holds a PD of this context, not another parent
	 * domain, and a TD of this context if any. */
	if (!attr->pd || attr->pd->context != context || sn_container_of(attr->pd, struct sn_pd, ibv)->parent ||
	    (attr->td && attr->td->context != context) || (attr->comp_mask & ~SN_PD_ATTR_MASK)) {
		errno = EINVAL;
		return NULL;
	}
	struct sn_parent_domain *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->contained = sn_container_of(attr->pd, struct sn_pd, ibv);
	__atomic_add_fetch(&p->contained->parents, 1, __ATOMIC_ACQ_REL);
	if (attr->td) {
		p->td = sn_container_of(attr->td, struct sn_td, ibv);
		__atomic_add_fetch(&p->td->refs, 1, __ATOMIC_ACQ_REL);
	}
	if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) {
		p->alloc = attr->alloc;
		p->free = attr->free;
	}
	if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)
		p->pd_context = attr->pd_context;
	/* What libibverbs' ibv_initialize_parent_domain sets: to the core, the
	 * parent domain is interchangeable with the PD it contains. */
	p->pd.ibv.context = context;
	p->pd.ibv.handle = attr->pd->handle;
	p->pd.handle = p->contained->handle;
	p->pd.parent = p;
	return &p->pd.ibv;
}

/* sn_dealloc_parent_domain frees pd, a parent domain, and lets go of its
 * PD and TD. */
int sn_dealloc_parent_domain(struct sn_pd *pd)
{
	struct sn_parent_domain *p = pd->parent;
	__atomic_sub_fetch(&p->contained->parents, 1, __ATOMIC_ACQ_REL);
	if (p->td)
		__atomic_sub_fetch(&p->td->refs, 1, __ATOMIC_ACQ_REL);
	free(p);
	return 0;
}

/* sn_is_parent_domain reports whether pd is a parent domain of context
 * (an extended CQ's IBV_CQ_INIT_ATTR_MASK_PD must name one, as mlx5's). */
int sn_is_parent_domain(struct ibv_context *context, struct ibv_pd *pd)
{
	return pd && pd->context == context && sn_container_of(pd, struct sn_pd, ibv)->parent;
}
