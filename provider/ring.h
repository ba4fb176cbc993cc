/*
 * ring.h: the shared rings' memory-ordering helpers, for the posting and
 * polling paths (datapath.c, and the extended verbs in extended.c).
 */
#ifndef SOFTNIC_RING_H
#define SOFTNIC_RING_H

#include <string.h>

#include "provider.h"

static inline uint32_t load_acquire(const uint8_t *p)
{
	return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE);
}

static inline void store_release(uint8_t *p, uint32_t v)
{
	__atomic_store_n((uint32_t *)p, v, __ATOMIC_RELEASE);
}

/* next_entry returns the queue's next free entry, or NULL if it is full. */
static inline uint8_t *next_entry(struct sn_wq *wq)
{
	if (wq->next - load_acquire(wq->ring + SN_WQ_CONSUMER) > wq->mask)
		return NULL;
	return wq->ring + SN_RING_HEADER + (size_t)(wq->next & wq->mask) * wq->stride;
}

static inline void put_sges(uint8_t *data, const struct ibv_sge *sg, int n)
{
	for (int i = 0; i < n; i++) {
		struct sn_sge s = {.addr = sg[i].addr, .length = sg[i].length, .lkey = sg[i].lkey};
		memcpy(data + i * sizeof(s), &s, sizeof(s));
	}
}

/* cq_written returns the CQ's entry at index i if the daemon has written
 * it (its sequence says so), else NULL. */
static inline uint8_t *cq_written(const struct sn_cq *cq, uint32_t i)
{
	uint8_t *e = cq->ring + SN_RING_HEADER + (size_t)(i & cq->mask) * SN_CQ_ENTRY;
	if (load_acquire(e + offsetof(struct sn_cq_entry, sequence)) != i + 1)
		return NULL;
	return e;
}

/* cq_entry returns the CQ's entry at cq->next if the daemon has written
 * it, else NULL, consuming the entries a QP's reset discarded on the way
 * (cq_clean). Called with the CQ's lock held. */
static inline const uint8_t *cq_entry(struct sn_cq *cq)
{
	for (;;) {
		uint8_t *e = cq_written(cq, cq->next);
		if (!e || !e[offsetof(struct sn_cq_entry, discarded)])
			return e;
		cq->next++;
		store_release(cq->ring + SN_CQ_CONSUMER, cq->next);
	}
}

#endif
