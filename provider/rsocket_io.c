/*
 * rsocket_io.c: riomap, riounmap and riowrite. A region mapped with
 * PROT_WRITE takes a slot of the peer's iomap (as many as the peer's
 * RDMA_IOMAPSIZE); before the socket's next send its entry (offset,
 * address, rkey, length) is written into that slot with an IOMAP_SGL
 * message. riowrite looks the offset up in the iomap the peer wrote
 * into ours and writes there with a plain RDMA WRITE, which the peer
 * does not see: it learns of the data from a message sent after it.
 */
#define _GNU_SOURCE
#include <byteswap.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <rdma/rsocket.h>

#include "rdmacm.h"
#include "rsocket_int.h"

/* rs_free_slot is a slot of the peer's iomap no region holds, or -1. */
static int rs_free_slot(struct rsock *rs)
{
	for (uint32_t i = 0; i < rs->remote_iomap.length; i++) {
		struct rs_iomap_mr *m = rs->iomaps;
		while (m && m->index != (int)i)
			m = m->next;
		if (!m)
			return i;
	}
	return -1;
}

CM_EXPORT off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
	(void)flags;
	struct rsock *rs = rs_get(socket);
	if (!rs)
		return rs_fail(EBADF);
	if (rs->ds || !rs->id->pd || (prot & ~PROT_WRITE)) /* a datagram rsocket has no peer to map into */
		return rs_fail(EINVAL);
	struct rs_iomap_mr *m = calloc(1, sizeof(*m));
	if (!m)
		return rs_fail(ENOMEM);
	pthread_mutex_lock(&rs->map_lock);
	m->index = -1;
	int access = IBV_ACCESS_LOCAL_WRITE;
	if (prot & PROT_WRITE) {
		if ((m->index = rs_free_slot(rs)) < 0) {
			pthread_mutex_unlock(&rs->map_lock);
			free(m);
			return rs_fail(ENOMEM);
		}
		access |= IBV_ACCESS_REMOTE_WRITE;
	}
	if (!(m->mr = ibv_reg_mr(rs->id->pd, buf, len, access))) {
		int err = errno;
		pthread_mutex_unlock(&rs->map_lock);
		free(m);
		return rs_fail(err);
	}
	m->offset = offset == -1 ? (uint64_t)(uintptr_t)buf : (uint64_t)offset;
	m->pending = m->index >= 0;
	rs->iomap_pending |= m->pending;
	m->next = rs->iomaps;
	rs->iomaps = m;
	pthread_mutex_unlock(&rs->map_lock);
	return m->offset;
}

CM_EXPORT int riounmap(int socket, void *buf, size_t len)
{
	struct rsock *rs = rs_get(socket);
	if (!rs)
		return rs_fail(EBADF);
	pthread_mutex_lock(&rs->map_lock);
	for (struct rs_iomap_mr **p = &rs->iomaps; *p; p = &(*p)->next) {
		struct rs_iomap_mr *m = *p;
		if (m->mr->addr == buf && m->mr->length == len) {
			*p = m->next;
			ibv_dereg_mr(m->mr);
			free(m);
			pthread_mutex_unlock(&rs->map_lock);
			return 0;
		}
	}
	pthread_mutex_unlock(&rs->map_lock);
	return rs_fail(EINVAL);
}

void rs_free_iomaps(struct rsock *rs)
{
	while (rs->iomaps) {
		struct rs_iomap_mr *m = rs->iomaps;
		rs->iomaps = m->next;
		ibv_dereg_mr(m->mr);
		free(m);
	}
}

/* rs_send_iomaps writes each pending entry into its slot of the peer's
 * iomap, in the peer's byte order. Called with slock held. */
int rs_send_iomaps(struct rsock *rs, int nonblock)
{
	int ret = 0;
	pthread_mutex_lock(&rs->map_lock);
	for (struct rs_iomap_mr *m = rs->iomaps; m && !ret; m = m->next) {
		if (!m->pending)
			continue;
		if ((ret = rs_wait_send(rs, nonblock)))
			break;
		struct rs_wire_iomap e = {
			.offset = m->offset,
			.sge = {.addr = (uintptr_t)m->mr->addr, .key = m->mr->rkey, .length = m->mr->length},
		};
		if (rs->swap_sgl) {
			e.offset = bswap_64(e.offset);
			e.sge.addr = bswap_64(e.sge.addr);
			e.sge.key = bswap_32(e.sge.key);
			e.sge.length = bswap_32(e.sge.length);
		}
		struct ibv_sge sgl[2];
		int flags, n = rs_stage(rs, &e, sizeof(e), sgl, &flags);
		rs->sseq_no++;
		rs->sqe_avail--;
		rs->sbuf_bytes_avail -= sizeof(e);
		uint32_t msg = RS_MSG(RS_OP_IOMAP_SGL, m->index);
		ret = rs_write_msg(rs, sgl, n, msg, flags, rs->remote_iomap.addr + m->index * sizeof(e),
				   rs->remote_iomap.key, msg);
		m->pending = 0;
	}
	rs->iomap_pending = 0;
	for (struct rs_iomap_mr *m = rs->iomaps; m; m = m->next)
		rs->iomap_pending |= m->pending;
	pthread_mutex_unlock(&rs->map_lock);
	return ret;
}

/* rs_find_iomap is the peer's region that holds offset, from the iomap
 * the peer wrote into ours. */
static volatile struct rs_wire_iomap *rs_find_iomap(struct rsock *rs, uint64_t offset)
{
	for (int i = 0; i < rs->target_iomap_size; i++) {
		volatile struct rs_wire_iomap *e = &rs->target_iomap[i];
		if (offset >= e->offset && offset < e->offset + e->sge.length)
			return e;
	}
	return NULL;
}

/* rs_write_direct posts a plain RDMA WRITE into the peer's region. */
static int rs_write_direct(struct rsock *rs, struct ibv_sge *sgl, int n, int flags, uint64_t addr, uint32_t key,
			   uint32_t len)
{
	rs->sqe_avail--;
	rs->sbuf_bytes_avail -= len;
	struct ibv_send_wr wr = {
		.wr_id = RS_MSG(RS_OP_WRITE, len),
		.sg_list = sgl,
		.num_sge = n,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = flags,
		.wr.rdma = {.remote_addr = addr, .rkey = key},
	}, *bad;
	int err = ibv_post_send(rs->id->qp, &wr, &bad);
	return err ? rs_fail(err) : 0;
}

CM_EXPORT size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
	struct rsock *rs = rs_get(socket);
	if (!rs)
		return rs_fail(EBADF);
	if (rs_opened(rs))
		return -1;
	if (!(rs->state & RS_CONNECTED))
		return rs_fail(ENOTCONN);
	const uint8_t *b = buf;
	size_t done = 0;
	uint32_t olen = RS_OLAP_START;
	uint64_t off = offset;
	int ret = 0;
	pthread_mutex_lock(&rs->slock);
	if (rs->iomap_pending && (ret = rs_send_iomaps(rs, rs_nonblock(rs, flags))))
		goto out;
	while (done < count) {
		volatile struct rs_wire_iomap *e = rs_find_iomap(rs, off);
		if (!e) {
			if (!done)
				ret = rs_fail(EINVAL); /* no region of the peer's holds it */
			break;
		}
		if ((ret = rs_wait_send(rs, rs_nonblock(rs, flags))))
			break;
		uint32_t xfer = rs_next_xfer(rs, &olen, count - done);
		uint64_t room = e->offset + e->sge.length - off;
		if (xfer > room)
			xfer = room;
		struct ibv_sge sgl[2];
		int sflags, n = rs_stage(rs, b + done, xfer, sgl, &sflags);
		if ((ret = rs_write_direct(rs, sgl, n, sflags, e->sge.addr + (off - e->offset), e->sge.key, xfer)))
			break;
		done += xfer;
		off += xfer;
	}
out:
	pthread_mutex_unlock(&rs->slock);
	return ret && !done ? (size_t)ret : done;
}
