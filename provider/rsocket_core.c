/*
 * rsocket_core.c: an rsocket's life: made on a synchronous CM ID (its
 * number is the ID's event channel fd, a descriptor of its own as
 * rdma-core's are), bound, listening or connected, with the RC QP and
 * buffers (rsocket_bufs.c) of the rsockets protocol (rsocket_int.h),
 * then shut down and closed. On a non-blocking socket connecting and
 * accepting go on after the call (EINPROGRESS), as rpoll, a send or a
 * receive takes their CM events (rs_do_connect).
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rsocket.h>

#include "rdmacm.h"
#include "rsocket_int.h"

/* The sockets by number; grown on demand. */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsock **table;
static int table_len;

int rs_fail(int err)
{
	errno = err;
	return -1;
}

struct rsock *rs_get(int fd)
{
	struct rsock *rs = NULL;
	pthread_mutex_lock(&table_lock);
	if (fd >= 0 && fd < table_len)
		rs = table[fd];
	pthread_mutex_unlock(&table_lock);
	return rs;
}

int rs_table_set(int fd, struct rsock *rs)
{
	pthread_mutex_lock(&table_lock);
	if (fd >= table_len) {
		int len = table_len ? table_len : 1024;
		while (len <= fd)
			len *= 2;
		struct rsock **t = realloc(table, len * sizeof(*t));
		if (!t) {
			pthread_mutex_unlock(&table_lock);
			return rs_fail(ENOMEM);
		}
		memset(t + table_len, 0, (len - table_len) * sizeof(*t));
		table = t;
		table_len = len;
	}
	table[fd] = rs;
	pthread_mutex_unlock(&table_lock);
	return 0;
}

int rs_nonblock(struct rsock *rs, int flags)
{
	return (rs->fs_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
}

static struct rsock *rs_alloc(const struct rsock *parent)
{
	struct rsock *rs = calloc(1, sizeof(*rs));
	if (!rs)
		return NULL;
	rs->fd = -1;
	if (parent) {
		rs->sbuf_size = parent->sbuf_size;
		rs->rbuf_size = parent->rbuf_size;
		rs->sq_size = parent->sq_size;
		rs->rq_size = parent->rq_size;
		rs->sq_inline = parent->sq_inline;
		rs->target_iomap_size = parent->target_iomap_size;
		rs->fs_flags = parent->fs_flags;
		rs->so_opts = parent->so_opts;
		rs->tcp_opts = parent->tcp_opts;
		rs->keepalive_time = parent->keepalive_time;
	} else {
		rs_conf_load();
		rs->rbuf_size = rs_conf.mem_default;
		rs->sbuf_size = rs_conf.wmem_default;
		rs->sq_size = rs_conf.sqsize_default;
		rs->rq_size = rs_conf.rqsize_default;
		rs->sq_inline = rs_conf.inline_default;
		rs->target_iomap_size = rs_conf.iomap_size;
	}
	rs->ctrl_max_seqno = RS_CTRL_SLOTS;
	pthread_mutex_init(&rs->slock, NULL);
	pthread_mutex_init(&rs->rlock, NULL);
	pthread_mutex_init(&rs->cq_lock, NULL);
	pthread_mutex_init(&rs->wait_lock, NULL);
	pthread_mutex_init(&rs->map_lock, NULL);
	return rs;
}

static void rs_free(struct rsock *rs)
{
	rs_keepalive_forget(rs);
	if (rs->fd >= 0)
		rs_table_set(rs->fd, NULL);
	rs_free_iomaps(rs);
	if (rs->id && rs->id->qp) {
		if (rs->unack_cqe)
			ibv_ack_cq_events(rs->id->recv_cq, rs->unack_cqe);
		rdma_destroy_qp(rs->id);
	}
	if (rs->smr)
		ibv_dereg_mr(rs->smr);
	if (rs->rmr)
		ibv_dereg_mr(rs->rmr);
	if (rs->target_mr)
		ibv_dereg_mr(rs->target_mr);
	rs_free_bufs(rs);
	if (rs->id) {
		struct ibv_cq *cq = rs->id->recv_cq;
		struct ibv_comp_channel *ch = rs->id->recv_cq_channel;
		rdma_destroy_id(rs->id);
		if (cq)
			ibv_destroy_cq(cq);
		if (ch)
			ibv_destroy_comp_channel(ch);
	}
	free(rs->rmsg);
	free(rs);
}

CM_EXPORT int rsocket(int domain, int type, int protocol)
{
	int kind = type & ~(SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (domain != AF_INET && domain != AF_INET6)
		return rs_fail(ENOTSUP);
	if (kind == SOCK_DGRAM)
		return ds_socket(domain, type, protocol);
	if (kind != SOCK_STREAM || (protocol && protocol != IPPROTO_TCP))
		return rs_fail(ENOTSUP);
	struct rsock *rs = rs_alloc(NULL);
	if (!rs)
		return rs_fail(ENOMEM);
	rs->fs_flags = type & SOCK_NONBLOCK ? O_NONBLOCK : 0;
	if (rdma_create_id(NULL, &rs->id, rs, RDMA_PS_TCP)) {
		int err = errno;
		rs_free(rs);
		return rs_fail(err);
	}
	rs->id->route.addr.src_addr.sa_family = domain;
	if (type & SOCK_CLOEXEC)
		fcntl(rs->id->channel->fd, F_SETFD, FD_CLOEXEC);
	if (rs_table_set(rs->id->channel->fd, rs)) {
		rs_free(rs);
		return rs_fail(ENOMEM);
	}
	rs->fd = rs->id->channel->fd;
	return rs->fd;
}

CM_EXPORT int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rsock *rs = rs_get(socket);
	if (!rs)
		return rs_fail(EBADF);
	if (!addr || addrlen < sizeof(struct sockaddr_in))
		return rs_fail(EINVAL);
	if (rs->ds)
		return ds_bind(rs, addr, addrlen);
	if (rdma_bind_addr(rs->id, (struct sockaddr *)addr))
		return -1;
	rs->state = RS_BOUND;
	return 0;
}

CM_EXPORT int rlisten(int socket, int backlog)
{
	struct rsock *rs = rs_get(socket);
	if (!rs)
		return rs_fail(EBADF);
	if (rs->ds)
		return rs_fail(EOPNOTSUPP);
	if (rs->state == RS_LISTENING)
		return 0;
	if (rdma_listen(rs->id, backlog))
		return -1;
	rs->state = RS_LISTENING;
	return 0;
}

/* rs_qp_sizes keeps the queues within what the device and protocol take. */
static void rs_qp_sizes(struct rsock *rs)
{
	struct ibv_device_attr a;
	uint32_t max = RS_QP_MAX;
	if (!ibv_query_device(rs->id->verbs, &a) && (uint32_t)a.max_qp_wr < max)
		max = a.max_qp_wr;
	if (rs->sq_size > max)
		rs->sq_size = max;
	if (rs->sq_size < RS_QP_MIN)
		rs->sq_size = RS_QP_MIN;
	if (rs->rq_size > max)
		rs->rq_size = max;
	if (rs->rq_size < RS_QP_MIN)
		rs->rq_size = RS_QP_MIN;
}

/* rs_endpoint makes the CQ (one for both directions, on its own
 * completion channel), the RC QP, the buffers, and posts the receives. */
static int rs_endpoint(struct rsock *rs)
{
	struct rdma_cm_id *id = rs->id;
	rs_qp_sizes(rs);
	if (!(id->recv_cq_channel = ibv_create_comp_channel(id->verbs)))
		return -1;
	if (!(id->recv_cq = ibv_create_cq(id->verbs, rs->sq_size + rs->rq_size, id, id->recv_cq_channel, 0)))
		return -1;
	id->send_cq_channel = id->recv_cq_channel;
	id->send_cq = id->recv_cq;
	struct ibv_qp_init_attr a = {
		.qp_context = rs,
		.send_cq = id->send_cq,
		.recv_cq = id->recv_cq,
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
		.cap = {.max_send_wr = rs->sq_size,
			.max_recv_wr = rs->rq_size,
			.max_send_sge = 2,
			.max_recv_sge = 1,
			.max_inline_data = rs->sq_inline},
	};
	if (rdma_create_qp(id, NULL, &a))
		return -1;
	rs->sq_inline = a.cap.max_inline_data;
	if (rs_bufs(rs))
		return -1;
	for (int i = 0; i < rs->rq_size; i++)
		if (rs_post_recv(rs))
			return -1;
	return 0;
}

/* scale and unscale: the protocol's 8-bit iomap size, exact up to 128. */
static uint8_t rs_scale(int v)
{
	return v <= 128 ? v : 128 | (v >> 8);
}

static int rs_unscale(int v)
{
	return v <= 128 ? v : (v & ~128) << 8;
}

static void rs_conn_out(const struct rsock *rs, struct rs_wire_conn *c)
{
	memset(c, 0, sizeof(*c));
	c->version = 1;
	c->flags = RS_CONN_FLAG_IOMAP | (__BYTE_ORDER == __BIG_ENDIAN ? RS_CONN_FLAG_NET : 0);
	c->credits = htobe16(rs->rq_size);
	c->target_iomap_size = rs_scale(rs->target_iomap_size);
	c->target_sgl.addr = htobe64((uintptr_t)rs->target_list);
	c->target_sgl.length = htobe32(RS_SGL_ENTRIES);
	c->target_sgl.key = htobe32(rs->target_mr->rkey);
	c->data_buf.addr = htobe64((uintptr_t)rs->rbuf);
	c->data_buf.length = htobe32(rs->rbuf_size / 2);
	c->data_buf.key = htobe32(rs->rmr->rkey);
}

/* rs_conn_in takes the peer's connection data: where credits go, its
 * iomap, the first half of its receive buffer and its credits. */
static int rs_conn_in(struct rsock *rs, const void *data, size_t len)
{
	struct rs_wire_conn c;
	if (!data || len < sizeof(c))
		return rs_fail(ECONNREFUSED);
	memcpy(&c, data, sizeof(c));
	if (c.version != 1)
		return rs_fail(ENOTSUP);
	rs->remote_sgl.addr = be64toh(c.target_sgl.addr);
	rs->remote_sgl.length = be32toh(c.target_sgl.length);
	rs->remote_sgl.key = be32toh(c.target_sgl.key);
	rs->remote_sge = 1;
	rs->swap_sgl = !!(c.flags & RS_CONN_FLAG_NET) != (__BYTE_ORDER == __BIG_ENDIAN);
	if (c.flags & RS_CONN_FLAG_IOMAP) {
		rs->remote_iomap.addr = rs->remote_sgl.addr + sizeof(struct rs_wire_sge) * rs->remote_sgl.length;
		rs->remote_iomap.length = rs_unscale(c.target_iomap_size);
		rs->remote_iomap.key = rs->remote_sgl.key;
	}
	rs->target_sgl[0].addr = be64toh(c.data_buf.addr);
	rs->target_sgl[0].length = be32toh(c.data_buf.length);
	rs->target_sgl[0].key = be32toh(c.data_buf.key);
	rs->sseq_comp = be16toh(c.credits);
	return 0;
}

static int rs_channel_nb(struct rsock *rs);
static void rs_channel_restore(struct rsock *rs, int fl);

/* rs_accept_one takes the listener's next request, gives its ID a channel
 * of its own (the new socket's number), and accepts it. A non-blocking
 * socket returns before the RTU: it is ACCEPTING until rs_do_connect sees
 * the connection established. */
static struct rsock *rs_accept_one(struct rsock *l)
{
	struct rdma_cm_id *id;
	if (rdma_get_request(l->id, &id))
		return NULL;
	struct rsock *rs = rs_alloc(l);
	struct rs_wire_conn resp;
	int err = ENOMEM;
	if (!rs)
		goto reject;
	rs->id = id;
	id->context = rs;
	const struct rdma_conn_param *req = &id->event->param.conn;
	if (rs_endpoint(rs) || rs_conn_in(rs, req->private_data, req->private_data_len) ||
	    rdma_migrate_id(id, NULL)) {
		err = errno;
		goto reject;
	}
	rs_conn_out(rs, &resp);
	struct rdma_conn_param p = {
		.private_data = &resp,
		.private_data_len = sizeof(resp),
		.responder_resources = req->responder_resources,
		.initiator_depth = req->initiator_depth,
		.flow_control = 1,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};
	err = ENOMEM;
	if (rs_table_set(id->channel->fd, rs))
		goto fail;
	rs->fd = id->channel->fd;
	rs->state = RS_ACCEPTING;
	int fl = rs_channel_nb(rs);
	int ret = rdma_accept(id, &p);
	err = errno;
	rs_channel_restore(rs, fl);
	if (!ret)
		rs->state = RS_RDWR;
	else if (err != EAGAIN)
		goto fail;
	return rs;
reject:
	rdma_reject(id, NULL, 0);
fail:
	if (rs)
		rs_free(rs);
	else
		rdma_destroy_id(id);
	errno = err;
	return NULL;
}

CM_EXPORT int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsock *l = rs_get(socket);
	if (!l)
		return rs_fail(EBADF);
	if (l->ds)
		return rs_fail(EOPNOTSUPP);
	if (l->state != RS_LISTENING)
		return rs_fail(EINVAL);
	if (l->fs_flags & O_NONBLOCK) {
		struct pollfd p = {.fd = socket, .events = POLLIN};
		if (poll(&p, 1, 0) <= 0)
			return rs_fail(EAGAIN);
	}
	struct rsock *rs = rs_accept_one(l);
	if (!rs)
		return -1;
	if (addr && addrlen)
		rgetpeername(rs->fd, addr, addrlen);
	return rs->fd;
}

/* rs_channel_nb makes a non-blocking socket's CM channel read without
 * waiting, so that a CM step's event not yet come is EAGAIN; it returns
 * the channel's flags, which rs_channel_restore puts back. */
static int rs_channel_nb(struct rsock *rs)
{
	int fd = rs->id->channel->fd;
	int fl = fcntl(fd, F_GETFL);
	if ((rs->fs_flags & O_NONBLOCK) && fl >= 0 && !(fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	return fl;
}

static void rs_channel_restore(struct rsock *rs, int fl)
{
	if (fl >= 0)
		fcntl(rs->id->channel->fd, F_SETFL, fl);
}

/* rs_connect_step takes a connecting socket as far as its CM events let
 * it, as rdma-core's rs_do_connect: resolve the address, then the route
 * (two seconds each), make the endpoint, connect with the protocol's
 * connect data, and read the answer's. The state says which event is
 * awaited; -1 with EAGAIN when it has not come. */
static int rs_connect_step(struct rsock *rs)
{
	struct cm_id *c = to_cm_id(rs->id);
	switch (rs->state) {
	case RS_INIT:
	case RS_BOUND:
		rs->state = RS_RESOLVING_ADDR;
		if (rdma_resolve_addr(rs->id, NULL, (struct sockaddr *)&rs->dst, 2000))
			return -1;
		goto route;
	case RS_RESOLVING_ADDR:
		if (cm_wait(c, RDMA_CM_EVENT_ADDR_RESOLVED))
			return -1;
	route:
		rs->state = RS_RESOLVING_ROUTE;
		if (rdma_resolve_route(rs->id, 2000))
			return -1;
		goto connect;
	case RS_RESOLVING_ROUTE:
		if (cm_wait(c, RDMA_CM_EVENT_ROUTE_RESOLVED))
			return -1;
	connect:
		if (rs_endpoint(rs))
			return -1;
		struct rs_wire_conn req;
		rs_conn_out(rs, &req);
		struct rdma_conn_param p = {
			.private_data = &req,
			.private_data_len = sizeof(req),
			.flow_control = 1,
			.retry_count = 7,
			.rnr_retry_count = 7,
		};
		rs->state = RS_CONNECTING;
		if (rdma_connect(rs->id, &p))
			return -1;
		goto connected;
	case RS_CONNECTING:
		if (cm_wait(c, RDMA_CM_EVENT_ESTABLISHED))
			return -1;
	connected:;
		const struct rdma_conn_param *resp = &rs->id->event->param.conn;
		if (rs_conn_in(rs, resp->private_data, resp->private_data_len))
			return -1;
		rs->state = RS_RDWR;
		return 0;
	case RS_ACCEPTING:
		if (cm_wait(c, RDMA_CM_EVENT_ESTABLISHED))
			return -1;
		rs->state = RS_RDWR;
		return 0;
	}
	return rs->state & RS_CONNECTED ? 0 : rs_fail(ENOTCONN);
}

/* rs_do_connect moves an opening socket on: 0 once connected; on a
 * non-blocking one -1 with EINPROGRESS while an event is awaited. A
 * failure leaves the socket in CONNECT_ERROR with the error SO_ERROR
 * gives: ETIMEDOUT or ECONNREFUSED, as a TCP socket's. */
int rs_do_connect(struct rsock *rs)
{
	pthread_mutex_lock(&rs->slock);
	int ret = 0, err = 0;
	if (rs->state & RS_OPENING || rs->state == RS_INIT || rs->state == RS_BOUND) {
		int fl = rs_channel_nb(rs);
		ret = rs_connect_step(rs);
		err = errno;
		rs_channel_restore(rs, fl);
	} else if (!(rs->state & RS_CONNECTED)) {
		ret = -1;
		err = rs->state == RS_CONNECT_ERROR && rs->err ? rs->err : ENOTCONN;
	}
	if (ret && err == EAGAIN)
		err = EINPROGRESS;
	else if (ret && (rs->state & RS_OPENING)) {
		rs->err = err == ETIMEDOUT || err == ECONNREFUSED ? err : ECONNREFUSED;
		rs->state = RS_CONNECT_ERROR;
		err = rs->err;
	}
	pthread_mutex_unlock(&rs->slock);
	return ret ? rs_fail(err) : 0;
}

CM_EXPORT int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rsock *rs = rs_get(socket);
	if (!rs)
		return rs_fail(EBADF);
	if (!addr || addrlen < sizeof(struct sockaddr_in) ||
	    addrlen < (addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in)))
		return rs_fail(EINVAL);
	if (rs->ds)
		return ds_connect(rs, addr, addrlen);
	if (rs->state & RS_CONNECTED)
		return rs_fail(EISCONN);
	if (rs->state & RS_OPENING)
		return rs_do_connect(rs); /* a second call goes on, as rdma-core's */
	if (rs->state & ~RS_BOUND)
		return rs_fail(rs->state == RS_LISTENING ? EINVAL : ENOTCONN);
	memcpy(&rs->dst, addr, addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
	return rs_do_connect(rs);
}

/* rs_opened completes a socket's connecting or accepting before a send
 * or receive on it: 0 when connected (or never opening); else -1, with
 * EAGAIN on a non-blocking socket not there yet. */
int rs_opened(struct rsock *rs)
{
	if (!(rs->state & RS_OPENING))
		return 0;
	if (!rs_do_connect(rs))
		return 0;
	if (errno == EINPROGRESS)
		errno = EAGAIN;
	return -1;
}

/* rshutdown tells the peer with a CTRL message: SHUTDOWN while we still
 * read, DISCONNECT once neither way is open; then waits for the sends. */
CM_EXPORT int rshutdown(int socket, int how)
{
	struct rsock *rs = rs_get(socket);
	if (!rs)
		return rs_fail(EBADF);
	if (rs->ds)
		return ds_shutdown(rs, how);
	if (!(rs->state & RS_CONNECTED))
		return rs->state == RS_DISCONNECTED ? 0 : rs_fail(ENOTCONN);
	int ctrl, ret = 0;
	if (how == SHUT_RDWR) {
		ctrl = RS_CTRL_DISCONNECT;
		rs->state &= ~(RS_READABLE | RS_WRITABLE);
	} else if (how == SHUT_WR) {
		rs->state &= ~RS_WRITABLE;
		ctrl = rs->state & RS_READABLE ? RS_CTRL_SHUTDOWN : RS_CTRL_DISCONNECT;
	} else if (how == SHUT_RD) {
		rs->state &= ~RS_READABLE;
		if (rs->state & RS_WRITABLE)
			return 0;
		ctrl = RS_CTRL_DISCONNECT;
	} else
		return rs_fail(EINVAL);
	ret = rs_process(rs, 0, rs_conn_can_ctrl);
	if (!ret && (rs->state & RS_CONNECTED))
		ret = rs_post_ctrl(rs, RS_MSG(RS_OP_CTRL, ctrl));
	if (rs->state & RS_CONNECTED)
		rs_process(rs, 0, rs_all_sends_done);
	return ret;
}

CM_EXPORT int rclose(int socket)
{
	struct rsock *rs = rs_get(socket);
	if (!rs)
		return rs_fail(EBADF);
	if (rs->ds) {
		ds_close(rs);
		return 0;
	}
	if (rs->state & RS_CONNECTED)
		rshutdown(socket, SHUT_RDWR);
	rs_free(rs);
	return 0;
}

static int rs_copy_addr(const struct sockaddr *src, struct sockaddr *dst, socklen_t *len)
{
	if (!dst || !len)
		return rs_fail(EFAULT);
	socklen_t size = src->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	memcpy(dst, src, *len < size ? *len : size);
	*len = size;
	return 0;
}

CM_EXPORT int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsock *rs = rs_get(socket);
	if (!rs)
		return rs_fail(EBADF);
	if (rs->ds)
		return getpeername(socket, addr, addrlen);
	if (!(rs->state & RS_CONNECTED) && rs->state != RS_DISCONNECTED && rs->state != RS_ACCEPTING)
		return rs_fail(ENOTCONN);
	return rs_copy_addr(rdma_get_peer_addr(rs->id), addr, addrlen);
}

CM_EXPORT int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsock *rs = rs_get(socket);
	if (!rs)
		return rs_fail(EBADF);
	if (rs->ds)
		return getsockname(socket, addr, addrlen);
	return rs_copy_addr(rdma_get_local_addr(rs->id), addr, addrlen);
}
