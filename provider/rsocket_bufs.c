/*
 * rsocket_bufs.c: a stream rsocket's buffers: the send ring, the target
 * SGL and iomap the peer writes, and the receive buffer, with their
 * memory regions. They are kept in one block of pages the daemon shares
 * where it allows, so that its engine moves the socket's bytes with
 * plain copies; otherwise each is ordinary memory.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdmacm.h"
#include "rsocket_int.h"

static void *rs_zalloc(size_t len)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, len ? len : 1))
		return NULL;
	memset(p, 0, len);
	return p;
}

static size_t rs_pages(size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	return (len + page - 1) / page * page;
}

/* rs_alloc_bufs places the receive buffer, the send buffer and the target
 * list in pages the daemon shares (the provider's alloc_shared), so that
 * the engine places and takes the socket's bytes with plain copies; where
 * the daemon refuses (its bound of shared bytes), each is ordinary memory
 * as rdma-core's are. */
static int rs_alloc_bufs(struct rsock *rs, size_t slen, size_t tlen)
{
	size_t r = rs_pages(rs->rbuf_size), sl = rs_pages(slen), len = r + sl + rs_pages(tlen);
	uint8_t *p = cm_lib.ops && cm_lib.ops->alloc_shared
			     ? cm_lib.ops->alloc_shared(rs->id->verbs, len, &rs->shared_handle)
			     : NULL;
	if (p) {
		rs->shared = p;
		rs->shared_len = len;
		rs->rbuf = p;
		rs->sbuf = p + r;
		rs->target_list = p + r + sl;
		return 0;
	}
	if (!(rs->sbuf = rs_zalloc(slen)) || !(rs->target_list = rs_zalloc(tlen)) ||
	    !(rs->rbuf = rs_zalloc(rs->rbuf_size)))
		return rs_fail(ENOMEM);
	return 0;
}

/* rs_free_bufs gives back rs_alloc_bufs's memory; the regions in it are
 * deregistered. */
void rs_free_bufs(struct rsock *rs)
{
	if (rs->shared) {
		cm_lib.ops->free_shared(rs->id->verbs, rs->shared, rs->shared_len, rs->shared_handle);
		return;
	}
	free(rs->sbuf);
	free(rs->rbuf);
	free(rs->target_list);
}

/* rs_bufs makes the send buffer (with room for control messages that do
 * not fit inline), the target SGL and iomap the peer writes, and the
 * receive buffer, of which the peer first gets the first half. */
int rs_bufs(struct rsock *rs)
{
	struct ibv_pd *pd = rs->id->pd;
	int wr = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	size_t slen = rs->sbuf_size;
	if (rs->sq_inline < sizeof(struct rs_wire_sge))
		slen += sizeof(struct rs_wire_sge) * RS_CTRL_SLOTS;
	size_t tlen = sizeof(struct rs_wire_sge) * RS_SGL_ENTRIES +
		      sizeof(struct rs_wire_iomap) * rs->target_iomap_size;
	if (!(rs->rmsg = calloc(rs->rq_size + 1, sizeof(*rs->rmsg))))
		return rs_fail(ENOMEM);
	if (rs_alloc_bufs(rs, slen, tlen))
		return -1;
	if (!(rs->smr = ibv_reg_mr(pd, rs->sbuf, slen, IBV_ACCESS_LOCAL_WRITE)) ||
	    !(rs->target_mr = ibv_reg_mr(pd, rs->target_list, tlen, wr)) ||
	    !(rs->rmr = ibv_reg_mr(pd, rs->rbuf, rs->rbuf_size, wr)))
		return -1;
	rs->target_sgl = rs->target_list;
	if (rs->target_iomap_size)
		rs->target_iomap = (struct rs_wire_iomap *)((struct rs_wire_sge *)rs->target_list + RS_SGL_ENTRIES);
	rs->ssgl[0].addr = rs->ssgl[1].addr = (uintptr_t)rs->sbuf;
	rs->ssgl[0].lkey = rs->ssgl[1].lkey = rs->smr->lkey;
	rs->sbuf_bytes_avail = rs->sbuf_size;
	rs->rbuf_free_offset = rs->rbuf_bytes_avail = rs->rbuf_size / 2;
	rs->sqe_avail = rs->sq_size - rs->ctrl_max_seqno;
	rs->rseq_comp = rs->rq_size / 2;
	return 0;
}
