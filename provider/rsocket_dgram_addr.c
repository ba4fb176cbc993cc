/*
 * rsocket_dgram_addr.c: datagram rsockets' addresses: normalized socket
 * addresses, their GIDs, the header that names a sender, and the local
 * address datagrams to a peer leave from.
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

size_t ds_addrlen(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* ds_norm keeps only what names an address (family, port, IP, and for
 * IPv6 flow and scope), so that equal addresses compare equal bytewise. */
int ds_norm(const struct sockaddr *sa, socklen_t len, union ds_addr *out)
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

int ds_cmp(const void *a, const void *b)
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
void ds_gid(const union ds_addr *a, union ibv_gid *g)
{
	memset(g, 0, sizeof(*g));
	if (a->sa.sa_family == AF_INET) {
		g->raw[10] = g->raw[11] = 0xff;
		memcpy(&g->raw[12], &a->sin.sin_addr, 4);
	} else
		memcpy(g->raw, &a->sin6.sin6_addr, 16);
}

void ds_format_hdr(struct ds_wire_hdr *h, const union ds_addr *a)
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

int ds_valid_hdr(const struct ds_wire_hdr *h, uint32_t len)
{
	return len >= DS_HDR4 && ((h->version == 4 && h->length == DS_HDR4) ||
				  (h->version == 6 && h->length == DS_HDR6 && len >= DS_HDR6));
}

/* ds_src is the local address datagrams to dst go from: the socket's,
 * or where the kernel routes dst from when it is bound to any address
 * (with the socket's port). An unbound socket is bound to a port first,
 * so that the peer's answers can find it. */
int ds_src(struct rsock *rs, const union ds_addr *dst, union ds_addr *src)
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

/* ds_set_src gives the source a datagram's header names. */
void ds_set_src(const struct ds_wire_hdr *h, struct sockaddr *addr, socklen_t *addrlen)
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
