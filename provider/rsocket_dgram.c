/*
 * rsocket_dgram.c: datagram rsockets (SOCK_DGRAM) in rdma-core's protocol
 * (librdmacm/rsocket.c), so that a softnic one talks to one on rxe.
 *
 * The socket's number is a kernel UDP socket's descriptor: it holds the
 * address (bind, connect, getsockname are the kernel's) and carries the
 * first datagrams to a peer whose QP is not known yet. Each local source
 * address gets a UD QP (RDMA_PS_UDP, Q_Key RDMA_UDP_QKEY), and each peer
 * address a ds_dest: the QP it is reached from and, once the peer told
 * its QPN, an address handle. Every datagram starts with a header:
 *  - over UD, struct ds_wire_hdr: the sender's address (version 4 or 6,
 *    the header's length 8 or 24, the UDP port, the IP address), which
 *    the receiver gives as the source of the datagram;
 *  - over UDP, struct ds_wire_udp: tag 0x55555555, version, op (DATA: a
 *    datagram follows; CTRL: only telling the QPN), length 16 or 28, the
 *    sender's UD QPN and IP address. A receiver answers DATA with CTRL,
 *    and makes an address handle to the sender's QPN.
 * rdma-core reads the UDP socket in a service thread and forwards a UDP
 * datagram to the application through its own QP; here the socket is
 * read wherever the rsocket makes progress (send, receive, rpoll; its
 * epoll descriptor, which rpoll sleeps on, holds the UDP socket and
 * every QP's completion channel), and a UDP datagram is queued directly.
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
#include "rsocket_int.h"

#define DS_UDP_TAG 0x55555555
#define DS_HDR4 8
#define DS_HDR6 24
#define DS_UDP4 16
#define DS_UDP6 28
#define DS_GRH 40 /* a UD receive's first bytes */
#define DS_DEF_MEM (1 << 17)
#define DS_DEF_QSIZE 384
#define DS_DEF_INLINE 64
#define DS_HOP_LIMIT 64

/* rdma-core's struct ds_header, byte for byte. */
struct ds_wire_hdr {
	uint8_t version;
	uint8_t length;
	uint16_t port; /* network order */
	union {
		uint32_t ipv4;
		struct {
			uint32_t flowinfo;
			uint8_t addr[16];
		} ipv6;
	} addr;
};

/* rdma-core's struct ds_udp_header, byte for byte. */
struct ds_wire_udp {
	uint32_t tag; /* big-endian */
	uint8_t version;
	uint8_t op;
	uint8_t length;
	uint8_t reserved;
	uint32_t qpn; /* big-endian; the low 24 bits */
	union {
		uint32_t ipv4;
		uint8_t ipv6[16];
	} addr;
};

_Static_assert(sizeof(struct ds_wire_hdr) == DS_HDR6 && offsetof(struct ds_wire_hdr, port) == 2 &&
		       offsetof(struct ds_wire_hdr, addr) == 4,
	       "ds_header: version, length, port, address");
_Static_assert(sizeof(struct ds_wire_udp) == DS_UDP6 && offsetof(struct ds_wire_udp, op) == 5 &&
		       offsetof(struct ds_wire_udp, qpn) == 8 && offsetof(struct ds_wire_udp, addr) == 12,
	       "ds_udp_header: tag, version, op, length, reserved, qpn, address");

union ds_addr {
	struct sockaddr sa;
	struct sockaddr_in sin;
	struct sockaddr_in6 sin6;
};

struct ds_qp {
	struct ds_qp *next;
	struct rdma_cm_id *id;
	union ds_addr local;
	struct ds_wire_hdr hdr; /* what starts each of its datagrams */
	struct ibv_mr *smr, *rmr;
	uint8_t *rbuf; /* rq_size slots of RS_SNDLOWAT, then the GRH's room */
	int cq_armed;
};

/* A peer: addr must come first (the tree compares it). */
struct ds_dest {
	union ds_addr addr;
	struct ds_qp *qp;
	struct ibv_ah *ah; /* NULL until the peer told its QPN */
	uint32_t qpn;
};

/* A received datagram: in a QP's receive slot, or (from UDP) copied. */
struct ds_msg {
	struct ds_qp *qp;
	uint32_t offset, length; /* length counts the header */
	uint8_t *copy;
};

struct ds_sock {
	int epfd;
	pthread_mutex_t lock;
	struct ds_qp *qps;
	void *dests; /* tsearch tree of struct ds_dest */
	struct ds_dest *conn;
	uint8_t *sbuf; /* sq_size send slots of RS_SNDLOWAT */
	int *free_slots, nfree;
	struct ds_msg *msgs; /* a ring of rq_size + 1 */
	int head, tail, rqe_avail;
	int dead; /* a completion channel hung up: the daemon is gone */
};

static size_t ds_addrlen(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* ds_norm keeps only what names an address (family, port, IP, and for
 * IPv6 flow and scope), so that equal addresses compare equal bytewise. */
static int ds_norm(const struct sockaddr *sa, socklen_t len, union ds_addr *out)
{
	memset(out, 0, sizeof(*out));
	if (sa && sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *s = (const void *)sa;
		out->sin.sin_family = AF_INET;
		out->sin.sin_port = s->sin_port;
		out->sin.sin_addr = s->sin_addr;
		return 0;
	}
	if (sa && sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *s = (const void *)sa;
		out->sin6.sin6_family = AF_INET6;
		out->sin6.sin6_port = s->sin6_port;
		out->sin6.sin6_flowinfo = s->sin6_flowinfo;
		out->sin6.sin6_addr = s->sin6_addr;
		out->sin6.sin6_scope_id = s->sin6_scope_id;
		return 0;
	}
	return rs_fail(EINVAL);
}

static int ds_cmp(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(union ds_addr));
}

static int ds_any(const union ds_addr *a)
{
	if (a->sa.sa_family == AF_INET)
		return a->sin.sin_addr.s_addr == htonl(INADDR_ANY) || (ntohl(a->sin.sin_addr.s_addr) >> 24) == 127;
	return IN6_IS_ADDR_UNSPECIFIED(&a->sin6.sin6_addr) || IN6_IS_ADDR_LOOPBACK(&a->sin6.sin6_addr);
}

/* ds_gid is an address as RoCE names it: IPv4 mapped into IPv6. */
static void ds_gid(const union ds_addr *a, union ibv_gid *g)
{
	memset(g, 0, sizeof(*g));
	if (a->sa.sa_family == AF_INET) {
		g->raw[10] = g->raw[11] = 0xff;
		memcpy(&g->raw[12], &a->sin.sin_addr, 4);
	} else
		memcpy(g->raw, &a->sin6.sin6_addr, 16);
}

static void ds_format_hdr(struct ds_wire_hdr *h, const union ds_addr *a)
{
	memset(h, 0, sizeof(*h));
	if (a->sa.sa_family == AF_INET) {
		h->version = 4;
		h->length = DS_HDR4;
		h->port = a->sin.sin_port;
		h->addr.ipv4 = a->sin.sin_addr.s_addr;
	} else {
		h->version = 6;
		h->length = DS_HDR6;
		h->port = a->sin6.sin6_port;
		h->addr.ipv6.flowinfo = a->sin6.sin6_flowinfo;
		memcpy(h->addr.ipv6.addr, &a->sin6.sin6_addr, 16);
	}
}

static int ds_valid_hdr(const struct ds_wire_hdr *h, uint32_t len)
{
	return len >= DS_HDR4 && ((h->version == 4 && h->length == DS_HDR4) ||
				  (h->version == 6 && h->length == DS_HDR6 && len >= DS_HDR6));
}

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
static int ds_init_ep(struct rsock *rs)
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

static int ds_post_recv(struct rsock *rs, struct ds_qp *qp, uint32_t offset)
{
	struct ibv_sge sge[2] = {
		{.addr = (uintptr_t)qp->rbuf + rs->rbuf_size, .length = DS_GRH, .lkey = qp->rmr->lkey},
		{.addr = (uintptr_t)qp->rbuf + offset, .length = RS_SNDLOWAT, .lkey = qp->rmr->lkey},
	};
	struct ibv_recv_wr wr = {.wr_id = RS_WR_RECV | offset, .sg_list = sge, .num_sge = 2}, *bad;
	int err = ibv_post_recv(qp->id->qp, &wr, &bad);
	return err ? rs_fail(err) : 0;
}

static void ds_free_qp(struct rsock *rs, struct ds_qp *qp)
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

/* ds_src is the local address datagrams to dst go from: the socket's,
 * or where the kernel routes dst from when it is bound to any address
 * (with the socket's port). An unbound socket is bound to a port first,
 * so that the peer's answers can find it. */
static int ds_src(struct rsock *rs, const union ds_addr *dst, union ds_addr *src)
{
	union ds_addr a;
	socklen_t len = sizeof(a);
	if (getsockname(rs->fd, &a.sa, &len))
		return -1;
	if (a.sin.sin_port == 0) {
		union ds_addr any = {.sa.sa_family = dst->sa.sa_family};
		if (bind(rs->fd, &any.sa, ds_addrlen(&any.sa)))
			return -1;
		len = sizeof(a);
		if (getsockname(rs->fd, &a.sa, &len))
			return -1;
	}
	if (ds_norm(&a.sa, len, src))
		return -1;
	if (!ds_any(src))
		return 0;
	int s = socket(dst->sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	union ds_addr r;
	len = sizeof(r);
	int ret = connect(s, &dst->sa, ds_addrlen(&dst->sa)) || getsockname(s, &r.sa, &len) ? -1 : 0;
	close(s);
	if (ret || ds_norm(&r.sa, len, &r))
		return -1;
	r.sin.sin_port = src->sin.sin_port;
	*src = r;
	return 0;
}

/* ds_get_dest is the cached peer of addr, made (with the QP of the local
 * address that reaches it) on first use. */
static struct ds_dest *ds_get_dest(struct rsock *rs, const struct sockaddr *addr, socklen_t len)
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
static void ds_set_ah(struct ds_dest *d, uint32_t qpn)
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

/* ds_send_udp sends over the UDP socket, after its header, what iov has
 * (nothing for CTRL). */
static ssize_t ds_send_udp(struct rsock *rs, struct ds_dest *d, const struct iovec *iov, int iovcnt, int flags,
			   uint8_t op)
{
	if (iovcnt > 8)
		return rs_fail(EMSGSIZE);
	const struct ds_wire_hdr *qh = &d->qp->hdr;
	struct ds_wire_udp h = {.tag = htobe32(DS_UDP_TAG),
				.version = qh->version,
				.op = op,
				.length = qh->version == 4 ? DS_UDP4 : DS_UDP6,
				.qpn = htobe32(d->qp->id->qp->qp_num & 0xffffff)};
	if (qh->version == 4)
		h.addr.ipv4 = qh->addr.ipv4;
	else
		memcpy(h.addr.ipv6, qh->addr.ipv6.addr, 16);
	struct iovec v[9] = {{.iov_base = &h, .iov_len = h.length}};
	for (int i = 0; i < iovcnt; i++)
		v[i + 1] = iov[i];
	struct msghdr m = {.msg_name = &d->addr, .msg_namelen = ds_addrlen(&d->addr.sa), .msg_iov = v,
			   .msg_iovlen = iovcnt + 1};
	ssize_t n = sendmsg(rs->fd, &m, (flags & MSG_DONTWAIT) | MSG_NOSIGNAL);
	return n < 0 ? n : n - h.length;
}


static void ds_step(const struct rsock *rs, int *i)
{
	if (++*i == rs->rq_size + 1)
		*i = 0;
}

/* ds_queue takes a received datagram (its header first) into the ring,
 * or reports there is no room: then it is dropped, as UDP would. */
static int ds_queue(struct rsock *rs, struct ds_qp *qp, uint32_t offset, uint32_t length, uint8_t *copy)
{
	struct ds_sock *ds = rs->ds;
	if (!ds->rqe_avail)
		return 0;
	ds->rqe_avail--;
	ds->msgs[ds->tail] = (struct ds_msg){.qp = qp, .offset = offset, .length = length, .copy = copy};
	ds_step(rs, &ds->tail);
	return 1;
}

/* ds_poll_cqs takes every QP's completions: receives with a valid header
 * are queued (the others, and those without room, posted again), sends
 * give their slot back. */
static void ds_poll_cqs(struct rsock *rs)
{
	struct ds_sock *ds = rs->ds;
	struct ibv_wc wc[16];
	for (struct ds_qp *qp = ds->qps; qp; qp = qp->next) {
		int n;
		do {
			n = ibv_poll_cq(qp->id->recv_cq, 16, wc);
			for (int i = 0; i < n; i++) {
				if (!(wc[i].wr_id & RS_WR_RECV)) {
					ds->free_slots[ds->nfree++] = (int)wc[i].wr_id;
					continue;
				}
				uint32_t off = (uint32_t)wc[i].wr_id, len = wc[i].byte_len - DS_GRH;
				if (wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len >= DS_GRH &&
				    ds_valid_hdr((const void *)(qp->rbuf + off), len) && ds_queue(rs, qp, off, len, NULL))
					continue;
				if (wc[i].status != IBV_WC_WR_FLUSH_ERR)
					ds_post_recv(rs, qp, off);
			}
		} while (n == 16);
	}
}

/* ds_udp_one takes a datagram the UDP socket received from a peer: it
 * learns the peer's QPN (an address handle to it), answers DATA with
 * CTRL (our QPN), and queues DATA's datagram with the peer's address. */
static void ds_udp_one(struct rsock *rs, uint8_t *buf, size_t n, const union ds_addr *from)
{
	const struct ds_wire_udp *h = (const void *)buf;
	if (n < DS_UDP4 || be32toh(h->tag) != DS_UDP_TAG || n < h->length)
		return;
	if (!((h->version == 4 && from->sa.sa_family == AF_INET && h->length == DS_UDP4) ||
	      (h->version == 6 && from->sa.sa_family == AF_INET6 && h->length == DS_UDP6)))
		return;
	uint32_t qpn = be32toh(h->qpn) & 0xffffff;
	struct ds_dest *d = ds_get_dest(rs, &from->sa, sizeof(*from));
	if (!d)
		return;
	if (h->op == RS_OP_DATA)
		ds_send_udp(rs, d, NULL, 0, MSG_DONTWAIT, RS_OP_CTRL);
	if (!d->ah || d->qpn != qpn)
		ds_set_ah(d, qpn);
	if (h->op != RS_OP_DATA)
		return;
	struct ds_wire_hdr hdr;
	ds_format_hdr(&hdr, from);
	size_t len = n - h->length;
	uint8_t *copy = malloc(hdr.length + len);
	if (!copy)
		return;
	memcpy(copy, &hdr, hdr.length);
	memcpy(copy + hdr.length, buf + h->length, len);
	if (!ds_queue(rs, NULL, 0, hdr.length + len, copy))
		free(copy);
}

/* ds_udp_input reads what the UDP socket holds, a bounded number. */
static void ds_udp_input(struct rsock *rs)
{
	uint8_t buf[RS_SNDLOWAT + DS_UDP6];
	for (int i = 0; i < 64; i++) {
		union ds_addr from;
		socklen_t flen = sizeof(from);
		ssize_t n = recvfrom(rs->fd, buf, sizeof(buf), MSG_DONTWAIT, &from.sa, &flen);
		if (n < 0)
			return;
		union ds_addr key;
		if (!ds_norm(&from.sa, flen, &key))
			ds_udp_one(rs, buf, n, &key);
	}
}

static void ds_progress(struct rsock *rs)
{
	if (rs->state == RS_INIT)
		return;
	ds_poll_cqs(rs);
	ds_udp_input(rs);
}

/* ds_arm_cqs asks each QP's CQ for an event on its next completion. */
static void ds_arm_cqs(struct rsock *rs)
{
	for (struct ds_qp *qp = rs->ds->qps; qp; qp = qp->next)
		if (!qp->cq_armed) {
			ibv_req_notify_cq(qp->id->recv_cq, 0);
			qp->cq_armed = 1;
		}
}

/* ds_take_events takes the completion events the epoll set has. */
static void ds_take_events_locked(struct rsock *rs)
{
	struct epoll_event ev[8];
	int n = epoll_wait(rs->ds->epfd, ev, 8, 0);
	for (int i = 0; i < n; i++) {
		struct ds_qp *qp = ev[i].data.ptr;
		struct ibv_cq *cq;
		void *ctx;
		if (qp && (ev[i].events & (EPOLLHUP | EPOLLERR)))
			rs->ds->dead = 1;
		if (qp && !ibv_get_cq_event(qp->id->recv_cq_channel, &cq, &ctx)) {
			ibv_ack_cq_events(cq, 1);
			qp->cq_armed = 0;
		}
	}
}

static int ds_have_data(struct rsock *rs)
{
	return rs->ds->head != rs->ds->tail;
}

static int ds_can_send(struct rsock *rs)
{
	return rs->ds->nfree > 0;
}

static int ds_all_sent(struct rsock *rs)
{
	return rs->ds->nfree == rs->sq_size;
}

/* ds_wait makes progress until ready(rs), sleeping (without the lock) on
 * the epoll set unless nonblock. */
static int ds_wait(struct rsock *rs, int nonblock, int (*ready)(struct rsock *rs))
{
	struct ds_sock *ds = rs->ds;
	for (;;) {
		ds_progress(rs);
		if (ready(rs))
			return 0;
		if (nonblock)
			return rs_fail(EWOULDBLOCK);
		ds_arm_cqs(rs);
		ds_progress(rs); /* what completed before the CQs were armed */
		if (ready(rs))
			return 0;
		struct pollfd p = {.fd = ds->epfd, .events = POLLIN};
		pthread_mutex_unlock(&ds->lock);
		int n = poll(&p, 1, -1);
		pthread_mutex_lock(&ds->lock);
		if (n < 0 && errno != EINTR)
			return -1;
		ds_take_events_locked(rs);
		if (ds->dead) /* no completion will come: fail rather than spin */
			return rs_fail(EIO);
	}
}

static size_t ds_iov_len(const struct iovec *iov, int iovcnt)
{
	size_t n = 0;
	for (int i = 0; i < iovcnt; i++)
		n += iov[i].iov_len;
	return n;
}

/* ds_send sends one datagram to d: over UDP until the peer's QPN is
 * known, then in a send slot, after our header, over UD. */
static ssize_t ds_send(struct rsock *rs, struct ds_dest *d, const struct iovec *iov, int iovcnt, int flags)
{
	struct ds_sock *ds = rs->ds;
	size_t len = ds_iov_len(iov, iovcnt);
	uint32_t hl = d->qp->hdr.length;
	if (len + hl > RS_SNDLOWAT)
		return rs_fail(EMSGSIZE);
	if (!d->ah)
		ds_udp_input(rs); /* the peer's QPN may be waiting there */
	if (!d->ah)
		return ds_send_udp(rs, d, iov, iovcnt, flags, RS_OP_DATA);
	if (!ds_can_send(rs) && ds_wait(rs, rs_nonblock(rs, flags), ds_can_send))
		return -1;
	int slot = ds->free_slots[--ds->nfree];
	uint8_t *p = ds->sbuf + (size_t)slot * RS_SNDLOWAT;
	memcpy(p, &d->qp->hdr, hl);
	for (int i = 0, off = hl; i < iovcnt; off += iov[i].iov_len, i++)
		memcpy(p + off, iov[i].iov_base, iov[i].iov_len);
	struct ibv_sge sge = {.addr = (uintptr_t)p, .length = hl + len, .lkey = d->qp->smr->lkey};
	struct ibv_send_wr wr = {
		.wr_id = slot,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = sge.length <= rs->sq_inline ? IBV_SEND_INLINE : 0,
		.wr.ud = {.ah = d->ah, .remote_qpn = d->qpn, .remote_qkey = RDMA_UDP_QKEY},
	}, *bad;
	int err = ibv_post_send(d->qp->id->qp, &wr, &bad);
	if (err) {
		ds->free_slots[ds->nfree++] = slot;
		return rs_fail(err);
	}
	return len;
}

ssize_t ds_sendv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags, const struct sockaddr *to,
		 socklen_t tolen)
{
	struct ds_sock *ds = rs->ds;
	if (!to && !ds->conn)
		return rs_fail(EDESTADDRREQ);
	if (!(rs->state & RS_WRITABLE) && rs->state != RS_INIT)
		return rs_fail(EPIPE);
	pthread_mutex_lock(&ds->lock);
	ssize_t ret = ds_init_ep(rs);
	struct ds_dest *d = ds->conn;
	if (!ret && to && !(d = ds_get_dest(rs, to, tolen)))
		ret = -1;
	if (!ret)
		ret = ds_send(rs, d, iov, iovcnt, flags);
	pthread_mutex_unlock(&ds->lock);
	return ret;
}

/* ds_set_src gives the source a datagram's header names. */
static void ds_set_src(const struct ds_wire_hdr *h, struct sockaddr *addr, socklen_t *addrlen)
{
	union ds_addr a;
	memset(&a, 0, sizeof(a));
	if (h->version == 4) {
		a.sin.sin_family = AF_INET;
		a.sin.sin_port = h->port;
		a.sin.sin_addr.s_addr = h->addr.ipv4;
	} else {
		a.sin6.sin6_family = AF_INET6;
		a.sin6.sin6_port = h->port;
		a.sin6.sin6_flowinfo = h->addr.ipv6.flowinfo;
		memcpy(&a.sin6.sin6_addr, h->addr.ipv6.addr, 16);
	}
	socklen_t size = ds_addrlen(&a.sa);
	if (*addrlen > size)
		*addrlen = size;
	memcpy(addr, &a, *addrlen);
}

/* ds_recvfrom gives the next datagram, cut to len. */
ssize_t ds_recvfrom(struct rsock *rs, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *srclen)
{
	struct ds_sock *ds = rs->ds;
	if (!(rs->state & RS_READABLE))
		return rs_fail(EINVAL);
	pthread_mutex_lock(&ds->lock);
	if (!ds_have_data(rs) && ds_wait(rs, rs_nonblock(rs, flags), ds_have_data)) {
		pthread_mutex_unlock(&ds->lock);
		return -1;
	}
	struct ds_msg *m = &ds->msgs[ds->head];
	const uint8_t *p = m->copy ? m->copy : m->qp->rbuf + m->offset;
	const struct ds_wire_hdr *h = (const void *)p;
	size_t n = m->length - h->length;
	if (n > len)
		n = len;
	memcpy(buf, p + h->length, n);
	if (src && srclen)
		ds_set_src(h, src, srclen);
	if (!(flags & MSG_PEEK)) {
		if (m->copy)
			free(m->copy);
		else
			ds_post_recv(rs, m->qp, m->offset);
		ds_step(rs, &ds->head);
		ds->rqe_avail++;
	}
	pthread_mutex_unlock(&ds->lock);
	return n;
}

int ds_socket(int domain, int type, int protocol)
{
	if (protocol && protocol != IPPROTO_UDP)
		return rs_fail(ENOTSUP);
	struct rsock *rs = calloc(1, sizeof(*rs));
	struct ds_sock *ds = calloc(1, sizeof(*ds));
	if (!rs || !ds) {
		free(rs);
		free(ds);
		return rs_fail(ENOMEM);
	}
	rs->ds = ds;
	rs->fd = socket(domain, SOCK_DGRAM | (type & SOCK_CLOEXEC), 0);
	rs->fs_flags = type & SOCK_NONBLOCK ? O_NONBLOCK : 0;
	rs->sbuf_size = rs->rbuf_size = DS_DEF_MEM;
	rs->sq_size = rs->rq_size = DS_DEF_QSIZE;
	rs->sq_inline = DS_DEF_INLINE;
	pthread_mutex_init(&ds->lock, NULL);
	ds->epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	int err = rs->fd < 0 || ds->epfd < 0 || epoll_ctl(ds->epfd, EPOLL_CTL_ADD, rs->fd, &ev) ? errno : 0;
	if (!err && rs_table_set(rs->fd, rs))
		err = ENOMEM;
	if (err) {
		if (rs->fd >= 0)
			close(rs->fd);
		if (ds->epfd >= 0)
			close(ds->epfd);
		free(ds);
		free(rs);
		return rs_fail(err);
	}
	return rs->fd;
}

int ds_bind(struct rsock *rs, const struct sockaddr *addr, socklen_t len)
{
	pthread_mutex_lock(&rs->ds->lock);
	int ret = ds_init_ep(rs);
	if (!ret)
		ret = bind(rs->fd, addr, len);
	pthread_mutex_unlock(&rs->ds->lock);
	return ret;
}

/* ds_connect fixes the peer of rsend and rrecv's source (the kernel's
 * connect filters what the UDP socket takes), and makes its QP now. */
int ds_connect(struct rsock *rs, const struct sockaddr *addr, socklen_t len)
{
	pthread_mutex_lock(&rs->ds->lock);
	int ret = ds_init_ep(rs);
	if (!ret)
		ret = connect(rs->fd, addr, len);
	if (!ret && !(rs->ds->conn = ds_get_dest(rs, addr, len)))
		ret = -1;
	pthread_mutex_unlock(&rs->ds->lock);
	return ret;
}

int ds_shutdown(struct rsock *rs, int how)
{
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return rs_fail(EINVAL);
	if (how != SHUT_WR)
		rs->state &= ~RS_READABLE;
	if (how != SHUT_RD)
		rs->state &= ~RS_WRITABLE;
	return 0;
}

static void ds_free_dest(void *p)
{
	struct ds_dest *d = p;
	if (d->ah)
		ibv_destroy_ah(d->ah);
	free(d);
}

/* ds_close lets the sends posted complete (their slots are registered
 * memory), then frees the peers, the QPs and the sockets. */
void ds_close(struct rsock *rs)
{
	struct ds_sock *ds = rs->ds;
	pthread_mutex_lock(&ds->lock);
	if (rs->state != RS_INIT)
		ds_wait(rs, 0, ds_all_sent);
	rs->state = RS_INIT;
	while (ds->head != ds->tail) {
		free(ds->msgs[ds->head].copy);
		ds_step(rs, &ds->head);
	}
	tdestroy(ds->dests, ds_free_dest);
	while (ds->qps) {
		struct ds_qp *qp = ds->qps;
		ds->qps = qp->next;
		ds_free_qp(rs, qp);
	}
	pthread_mutex_unlock(&ds->lock);
	rs_table_set(rs->fd, NULL);
	close(ds->epfd);
	close(rs->fd);
	free(ds->sbuf);
	free(ds->free_slots);
	free(ds->msgs);
	pthread_mutex_destroy(&ds->lock);
	free(ds);
	free(rs);
}

/* ds_revents: POLLIN with a datagram queued, POLLOUT with a free send
 * slot (or before the first send makes them), POLLERR once the daemon
 * is gone. */
short ds_revents(struct rsock *rs, short events)
{
	short r = 0;
	pthread_mutex_lock(&rs->ds->lock);
	ds_progress(rs);
	if ((events & POLLIN) && ds_have_data(rs))
		r |= POLLIN;
	if ((events & POLLOUT) && (rs->state == RS_INIT || ds_can_send(rs)))
		r |= POLLOUT;
	if (rs->ds->dead)
		r |= POLLERR;
	pthread_mutex_unlock(&rs->ds->lock);
	return r;
}

/* ds_arm readies rpoll's sleep: the descriptor to sleep on (the epoll
 * set, every CQ armed), or -1 when rs is ready meanwhile. */
int ds_arm(struct rsock *rs, short events)
{
	pthread_mutex_lock(&rs->ds->lock);
	ds_arm_cqs(rs);
	pthread_mutex_unlock(&rs->ds->lock);
	return ds_revents(rs, events) ? -1 : rs->ds->epfd;
}

void ds_take_events(struct rsock *rs)
{
	pthread_mutex_lock(&rs->ds->lock);
	ds_take_events_locked(rs);
	pthread_mutex_unlock(&rs->ds->lock);
}

/* ds_setsockopt: levels but SOL_RDMA go to the UDP socket first, as in
 * rdma-core; the sizes count until the first bind, connect or send. */
int ds_setsockopt(struct rsock *rs, int level, int name, const void *val, socklen_t len)
{
	if (level != SOL_RDMA && setsockopt(rs->fd, level, name, val, len))
		return -1;
	uint32_t v = *(const uint32_t *)val;
	if (level == SOL_SOCKET && (name == SO_RCVBUF || name == SO_SNDBUF)) {
		if (rs->state == RS_INIT)
			*(name == SO_RCVBUF ? &rs->rbuf_size : &rs->sbuf_size) = v << 1;
		return 0;
	}
	if (level != SOL_RDMA)
		return 0;
	if (rs->state != RS_INIT)
		return rs_fail(EINVAL);
	if (v > RS_QP_MAX)
		v = RS_QP_MAX;
	switch (name) {
	case RDMA_SQSIZE:
		rs->sq_size = v;
		return 0;
	case RDMA_RQSIZE:
		rs->rq_size = v;
		return 0;
	case RDMA_INLINE:
		rs->sq_inline = v;
		return 0;
	default:
		return rs_fail(ENOTSUP);
	}
}

int ds_getsockopt(struct rsock *rs, int level, int name, void *val, socklen_t *len)
{
	int v;
	if (level == SOL_SOCKET && name == SO_RCVBUF)
		v = rs->rbuf_size;
	else if (level == SOL_SOCKET && name == SO_SNDBUF)
		v = rs->sbuf_size;
	else if (level == SOL_RDMA && name == RDMA_SQSIZE)
		v = rs->sq_size;
	else if (level == SOL_RDMA && name == RDMA_RQSIZE)
		v = rs->rq_size;
	else if (level == SOL_RDMA && name == RDMA_INLINE)
		v = rs->sq_inline;
	else if (level == SOL_RDMA)
		return rs_fail(ENOTSUP);
	else
		return getsockopt(rs->fd, level, name, val, len);
	socklen_t n = *len < sizeof(v) ? *len : sizeof(v);
	memcpy(val, &v, n);
	*len = n;
	return 0;
}
