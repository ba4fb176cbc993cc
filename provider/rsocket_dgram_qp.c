/*
 * rsocket_dgram_qp.c: datagram rsockets' UD QPs, one per local address,
 * with their buffers and receives, and the peers each reaches.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <rdma/rsocket.h>

#include "rdmacm.h"
#include "rsocket_dgram.h"

/* ds_sizes fits the queues to the buffers, a slot of RS_SNDLOWAT each,
 * as rdma-core does. */
static void ds_sizes(struct rsock *rs)
{
	if (rs->sq_size > RS_QP_MAX)
		rs->sq_size = RS_QP_MAX;
	if (rs->rq_size > RS_QP_MAX)
		rs->rq_size = RS_QP_MAX;
	if (rs->rq_size > rs->rbuf_size / RS_SNDLOWAT)
		rs->rq_size = rs->rbuf_size / RS_SNDLOWAT;
	else
		rs->rbuf_size = rs->rq_size * RS_SNDLOWAT;
	if (rs->sq_size > rs->sbuf_size / RS_SNDLOWAT)
		rs->sq_size = rs->sbuf_size / RS_SNDLOWAT;
	else
		rs->sbuf_size = rs->sq_size * RS_SNDLOWAT;
	if (rs->rq_size < 1)
		rs->rq_size = 1;
	if (rs->sq_size < 1)
		rs->sq_size = 1;
}

/* ds_init_ep makes the send slots and the receive ring: the sizes are
 * fixed from here on. */
int ds_init_ep(struct rsock *rs)
{
	struct ds_sock *ds = rs->ds;
	if (rs->state != RS_INIT)
		return 0;
	ds_sizes(rs);
	rs->sbuf_size = rs->sq_size * RS_SNDLOWAT;
	if (!(ds->sbuf = calloc(rs->sq_size, RS_SNDLOWAT)) || !(ds->free_slots = calloc(rs->sq_size, sizeof(int))) ||
	    !(ds->msgs = calloc(rs->rq_size + 1, sizeof(*ds->msgs))))
		return rs_fail(ENOMEM);
	for (int i = 0; i < rs->sq_size; i++)
		ds->free_slots[i] = i;
	ds->nfree = rs->sq_size;
	ds->rqe_avail = rs->rq_size;
	rs->state = RS_READABLE | RS_WRITABLE;
	return 0;
}

int ds_post_recv(struct rsock *rs, struct ds_qp *qp, uint32_t offset)
{
	struct ibv_sge sge[2] = {
		{.addr = (uintptr_t)qp->rbuf + rs->rbuf_size, .length = DS_GRH, .lkey = qp->rmr->lkey},
		{.addr = (uintptr_t)qp->rbuf + offset, .length = RS_SNDLOWAT, .lkey = qp->rmr->lkey},
	};
	struct ibv_recv_wr wr = {.wr_id = RS_WR_RECV | offset, .sg_list = sge, .num_sge = 2}, *bad;
	int err = ibv_post_recv(qp->id->qp, &wr, &bad);
	return err ? rs_fail(err) : 0;
}

void ds_free_qp(struct rsock *rs, struct ds_qp *qp)
{
	struct rdma_cm_id *id = qp->id;
	if (id && id->qp) {
		if (id->recv_cq_channel)
			epoll_ctl(rs->ds->epfd, EPOLL_CTL_DEL, id->recv_cq_channel->fd, NULL);
		rdma_destroy_qp(id);
	}
	if (qp->smr)
		ibv_dereg_mr(qp->smr);
	if (qp->rmr)
		ibv_dereg_mr(qp->rmr);
	if (id) {
		struct ibv_cq *cq = id->recv_cq;
		struct ibv_comp_channel *ch = id->recv_cq_channel;
		rdma_destroy_id(id);
		if (cq)
			ibv_destroy_cq(cq);
		if (ch)
			ibv_destroy_comp_channel(ch);
	}
	free(qp->rbuf);
	free(qp);
}

/* ds_qp_endpoint gives a QP bound to its address its CQ (armed, its
 * channel non-blocking and in the epoll set), the UD QP, its buffers and
 * receives. */
static int ds_qp_endpoint(struct rsock *rs, struct ds_qp *qp)
{
	struct rdma_cm_id *id = qp->id;
	if (!(id->recv_cq_channel = ibv_create_comp_channel(id->verbs)))
		return -1;
	fcntl(id->recv_cq_channel->fd, F_SETFL, fcntl(id->recv_cq_channel->fd, F_GETFL) | O_NONBLOCK);
	if (!(id->recv_cq = ibv_create_cq(id->verbs, rs->sq_size + rs->rq_size, id, id->recv_cq_channel, 0)))
		return -1;
	id->send_cq_channel = id->recv_cq_channel;
	id->send_cq = id->recv_cq;
	struct ibv_qp_init_attr a = {
		.qp_context = qp,
		.send_cq = id->send_cq,
		.recv_cq = id->recv_cq,
		.qp_type = IBV_QPT_UD,
		.sq_sig_all = 1,
		.cap = {.max_send_wr = rs->sq_size,
			.max_recv_wr = rs->rq_size,
			.max_send_sge = 1,
			.max_recv_sge = 2,
			.max_inline_data = rs->sq_inline},
	};
	if (rdma_create_qp(id, NULL, &a))
		return -1;
	rs->sq_inline = a.cap.max_inline_data;
	size_t rlen = (size_t)rs->rbuf_size + DS_GRH;
	if (!(qp->rbuf = calloc(1, rlen)))
		return rs_fail(ENOMEM);
	if (!(qp->smr = ibv_reg_mr(id->pd, rs->ds->sbuf, rs->sbuf_size, IBV_ACCESS_LOCAL_WRITE)) ||
	    !(qp->rmr = ibv_reg_mr(id->pd, qp->rbuf, rlen, IBV_ACCESS_LOCAL_WRITE)))
		return -1;
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = qp};
	if (epoll_ctl(rs->ds->epfd, EPOLL_CTL_ADD, id->recv_cq_channel->fd, &ev))
		return -1;
	ibv_req_notify_cq(id->recv_cq, 0);
	qp->cq_armed = 1;
	for (int i = 0; i < rs->rq_size; i++)
		if (ds_post_recv(rs, qp, i * RS_SNDLOWAT))
			return -1;
	return 0;
}

/* ds_get_qp is the QP of a local address, made on first use. */
static struct ds_qp *ds_get_qp(struct rsock *rs, const union ds_addr *src)
{
	struct ds_sock *ds = rs->ds;
	for (struct ds_qp *qp = ds->qps; qp; qp = qp->next)
		if (!ds_cmp(&qp->local, src))
			return qp;
	struct ds_qp *qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	qp->local = *src;
	ds_format_hdr(&qp->hdr, src);
	/* The CM ID's port is in the RDMA CM's UDP space and never on the
	 * wire: an ephemeral one keeps it from clashing with another's. */
	union ds_addr bind_addr = *src;
	bind_addr.sin.sin_port = 0; /* sin6_port is at the same place */
	if (rdma_create_id(NULL, &qp->id, qp, RDMA_PS_UDP) || rdma_bind_addr(qp->id, &bind_addr.sa) ||
	    !qp->id->verbs || ds_qp_endpoint(rs, qp)) {
		int err = errno ? errno : ENODEV;
		ds_free_qp(rs, qp);
		errno = err;
		return NULL;
	}
	qp->next = ds->qps;
	ds->qps = qp;
	return qp;
}

/* ds_get_dest is the cached peer of addr, made (with the QP of the local
 * address that reaches it) on first use. */
struct ds_dest *ds_get_dest(struct rsock *rs, const struct sockaddr *addr, socklen_t len)
{
	struct ds_sock *ds = rs->ds;
	union ds_addr key;
	if (ds_norm(addr, len, &key))
		return NULL;
	struct ds_dest **found = tfind(&key, &ds->dests, ds_cmp);
	if (found)
		return *found;
	union ds_addr src;
	struct ds_qp *qp;
	if (ds_src(rs, &key, &src) || !(qp = ds_get_qp(rs, &src)))
		return NULL;
	struct ds_dest *d = calloc(1, sizeof(*d));
	if (d) {
		d->addr = key;
		d->qp = qp;
	}
	if (!d || !tsearch(d, &ds->dests, ds_cmp)) {
		free(d);
		errno = ENOMEM;
		return NULL;
	}
	return d;
}

/* ds_sgid_index is the index of the port's GID that is qp's address. */
static int ds_sgid_index(struct ds_qp *qp, uint8_t port)
{
	struct ibv_port_attr pa;
	union ibv_gid want, g;
	ds_gid(&qp->local, &want);
	if (ibv_query_port(qp->id->verbs, port, &pa))
		return -1;
	for (int i = 0; i < pa.gid_tbl_len; i++)
		if (!ibv_query_gid(qp->id->verbs, port, i, &g) && !memcmp(&g, &want, sizeof(g)))
			return i;
	return rs_fail(EADDRNOTAVAIL);
}

/* ds_set_ah makes the address handle to the peer's QPN: on RoCE a global
 * route from qp's GID to the peer's address. */
void ds_set_ah(struct ds_dest *d, uint32_t qpn)
{
	uint8_t port = d->qp->id->port_num ? d->qp->id->port_num : 1;
	int sgid = ds_sgid_index(d->qp, port);
	if (sgid < 0)
		return;
	struct ibv_ah_attr attr = {.is_global = 1, .port_num = port};
	ds_gid(&d->addr, &attr.grh.dgid);
	attr.grh.sgid_index = sgid;
	attr.grh.hop_limit = DS_HOP_LIMIT;
	struct ibv_ah *ah = ibv_create_ah(d->qp->id->pd, &attr);
	if (!ah)
		return;
	if (d->ah)
		ibv_destroy_ah(d->ah);
	d->ah = ah;
	d->qpn = qpn;
}

void ds_free_dest(void *p)
{
	struct ds_dest *d = p;
	if (d->ah)
		ibv_destroy_ah(d->ah);
	free(d);
}
