/*
 * rsocket_opt.c: rsetsockopt and rgetsockopt. The buffer and queue sizes
 * (SO_SNDBUF, SO_RCVBUF: twice the value, as Linux and rdma-core do;
 * SOL_RDMA's RDMA_SQSIZE, RDMA_RQSIZE, RDMA_INLINE, RDMA_IOMAPSIZE) count
 * until the socket connects; the TCP and socket flags are kept for
 * rgetsockopt, as rdma-core keeps them (an RC QP is reliable already).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>

#include <rdma/rsocket.h>

#include "rdmacm.h"
#include "rsocket_int.h"

static void rs_flag(uint64_t *opts, int name, int on)
{
	if (name < 0 || name >= 64)
		return;
	if (on)
		*opts |= 1ULL << name;
	else
		*opts &= ~(1ULL << name);
}

static int rs_set_socket(struct rsock *rs, int name, const void *val, socklen_t len)
{
	int v = *(const int *)val;
	switch (name) {
	case SO_REUSEADDR:
		if (rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, (void *)val, len) &&
		    errno != ENOSYS && rs->state == RS_INIT)
			return -1;
		break;
	case SO_RCVBUF:
		if (!rs->rbuf)
			rs->rbuf_size = (uint32_t)v << 1;
		if (rs->rbuf_size < RS_SNDLOWAT * 2)
			rs->rbuf_size = RS_SNDLOWAT * 2;
		return 0;
	case SO_SNDBUF:
		if (!rs->sbuf)
			rs->sbuf_size = (uint32_t)v << 1;
		if (rs->sbuf_size < RS_SNDLOWAT * 2)
			rs->sbuf_size = RS_SNDLOWAT * 2;
		return 0;
	case SO_LINGER:
		if (len < sizeof(struct linger))
			return rs_fail(EINVAL);
		v = ((const struct linger *)val)->l_onoff;
		break;
	case SO_KEEPALIVE:
		if (rs_keepalive_set(rs, v))
			return -1;
		break;
	case SO_OOBINLINE:
		break;
	default:
		return rs_fail(ENOTSUP);
	}
	rs_flag(&rs->so_opts, name, v);
	return 0;
}

static int rs_set_tcp(struct rsock *rs, int name, const void *val)
{
	int v = *(const int *)val;
	switch (name) {
	case TCP_KEEPIDLE:
		if (v <= 0)
			return rs_fail(EINVAL);
		rs->keepalive_time = v;
		return rs->so_opts & (1ULL << SO_KEEPALIVE) ? rs_keepalive_set(rs, 1) : 0;
	case TCP_KEEPCNT:
	case TCP_KEEPINTVL:
	case TCP_MAXSEG:
	case TCP_CONGESTION:
		return 0;
	case TCP_NODELAY:
		rs_flag(&rs->tcp_opts, name, v);
		return 0;
	default:
		return rs_fail(ENOTSUP);
	}
}

static int rs_set_rdma(struct rsock *rs, int name, const void *val)
{
	if (rs->state & ~(RS_BOUND | RS_LISTENING))
		return rs_fail(EINVAL); /* the endpoint exists (a listener's sockets take its sizes) */
	uint32_t v = *(const uint32_t *)val;
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
	case RDMA_IOMAPSIZE:
		rs->target_iomap_size = v <= 128 ? v : ((v >> 8) << 8);
		return 0;
	default:
		return rs_fail(ENOTSUP);
	}
}

CM_EXPORT int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
	struct rsock *rs = rs_get(socket);
	if (!rs)
		return rs_fail(EBADF);
	if (!optval || optlen < sizeof(int))
		return rs_fail(EINVAL);
	if (rs->ds)
		return ds_setsockopt(rs, level, optname, optval, optlen);
	switch (level) {
	case SOL_SOCKET:
		return rs_set_socket(rs, optname, optval, optlen);
	case IPPROTO_TCP:
		return rs_set_tcp(rs, optname, optval);
	case SOL_RDMA:
		return rs_set_rdma(rs, optname, optval);
	default:
		return rs_fail(ENOTSUP);
	}
}

static int rs_get_value(struct rsock *rs, int level, int name, int *v)
{
	switch (level) {
	case SOL_SOCKET:
		switch (name) {
		case SO_REUSEADDR:
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
			*v = !!(rs->so_opts & (1ULL << name));
			return 0;
		case SO_RCVBUF:
			*v = rs->rbuf_size;
			return 0;
		case SO_SNDBUF:
			*v = rs->sbuf_size;
			return 0;
		case SO_ERROR:
			*v = rs->err;
			rs->err = 0;
			return 0;
		case SO_TYPE:
			*v = SOCK_STREAM;
			return 0;
		case SO_BROADCAST:
			*v = 0;
			return 0;
		}
		break;
	case IPPROTO_TCP:
		switch (name) {
		case TCP_NODELAY:
			*v = !!(rs->tcp_opts & (1ULL << name));
			return 0;
		case TCP_KEEPIDLE:
			*v = rs->keepalive_time ? rs->keepalive_time : 7200;
			return 0;
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL:
			*v = 1; /* as rdma-core: the RC QP retries, not TCP's probes */
			return 0;
		case TCP_MAXSEG:
			*v = rs->id->route.path_rec && rs->id->route.path_rec->mtu ? 128 << rs->id->route.path_rec->mtu : 2048;
			return 0;
		}
		break;
	case SOL_RDMA:
		switch (name) {
		case RDMA_SQSIZE:
			*v = rs->sq_size;
			return 0;
		case RDMA_RQSIZE:
			*v = rs->rq_size;
			return 0;
		case RDMA_INLINE:
			*v = rs->sq_inline;
			return 0;
		case RDMA_IOMAPSIZE:
			*v = rs->target_iomap_size;
			return 0;
		}
		break;
	}
	return rs_fail(ENOTSUP);
}

CM_EXPORT int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)
{
	struct rsock *rs = rs_get(socket);
	if (!rs)
		return rs_fail(EBADF);
	if (!optval || !optlen)
		return rs_fail(EINVAL);
	if (rs->ds)
		return ds_getsockopt(rs, level, optname, optval, optlen);
	if (level == SOL_SOCKET && optname == SO_LINGER) {
		struct linger l = {.l_onoff = !!(rs->so_opts & (1ULL << SO_LINGER))};
		socklen_t n = *optlen < sizeof(l) ? *optlen : sizeof(l);
		memcpy(optval, &l, n);
		*optlen = n;
		return 0;
	}
	if (level == IPPROTO_TCP && optname == TCP_INFO) {
		/* What an RC connection can say of TCP's (rdma-core's): the
		 * state and the send queue as the window. */
		struct tcp_info ti = {.tcpi_state = rs->state & RS_CONNECTED ? TCP_ESTABLISHED : TCP_CLOSE,
				      .tcpi_snd_cwnd = rs->sq_size};
		socklen_t n = *optlen < sizeof(ti) ? *optlen : sizeof(ti);
		memcpy(optval, &ti, n);
		*optlen = n;
		return 0;
	}
	if (level == IPPROTO_TCP && optname == TCP_CONGESTION) {
		static const char name[] = "rdma"; /* the RC QP's, not a TCP algorithm */
		socklen_t n = *optlen < sizeof(name) ? *optlen : sizeof(name);
		memcpy(optval, name, n);
		*optlen = n;
		return 0;
	}
	int v;
	if (rs_get_value(rs, level, optname, &v))
		return -1;
	socklen_t n = *optlen < sizeof(v) ? *optlen : sizeof(v);
	memcpy(optval, &v, n);
	*optlen = n;
	return 0;
}
