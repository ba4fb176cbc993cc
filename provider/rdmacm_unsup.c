/*
 * rdmacm_unsup.c: librdmacm's calls softnic's connection manager does not
 * carry. Each fails with ENOSYS (programs that import them still load,
 * and learn at the call). rsockets are not supported either; since no
 * rsocket can exist, rpoll and rselect are poll and select, as
 * librdmacm's are for ordinary descriptors.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <rdma/rsocket.h>

#include "rdmacm.h"

/* These calls take librdmacm's parameters and use none of them. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define ENOSYS_INT(name, ...)                  \
	CM_EXPORT int name(__VA_ARGS__)        \
	{                                      \
		return cm_fail(ENOSYS);        \
	}

/* The daemon moves an ID's QP through its states itself. */
ENOSYS_INT(rdma_notify, struct rdma_cm_id *id, enum ibv_event_type event)

/* ECE (enhanced connection establishment): softnic's QPs have no vendor
 * options to agree on (ibv_query_ece is EOPNOTSUPP, as on rxe), and its
 * connection manager carries none. librdmacm answers EOPNOTSUPP for a
 * remote ECE the peer did not send, and EINVAL for the arguments it
 * refuses; a program (pyverbs' external-QP tests) goes on without ECE. */
CM_EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || id->qp || !ece || !ece->vendor_id || ece->comp_mask)
		return cm_fail(EINVAL);
	return cm_fail(EOPNOTSUPP);
}

CM_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || id->qp || !ece)
		return cm_fail(EINVAL);
	return cm_fail(EOPNOTSUPP);
}

/* rdma_reject_ece rejects a connection whose ECE options the program
 * would not take: with no ECE carried, an ordinary reject. */
CM_EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return rdma_reject(id, private_data, private_data_len);
}

ENOSYS_INT(rsocket, int domain, int type, int protocol)
ENOSYS_INT(rbind, int socket, const struct sockaddr *addr, socklen_t addrlen)
ENOSYS_INT(rlisten, int socket, int backlog)
ENOSYS_INT(raccept, int socket, struct sockaddr *addr, socklen_t *addrlen)
ENOSYS_INT(rconnect, int socket, const struct sockaddr *addr, socklen_t addrlen)
ENOSYS_INT(rshutdown, int socket, int how)
ENOSYS_INT(rclose, int socket)
ENOSYS_INT(rgetpeername, int socket, struct sockaddr *addr, socklen_t *addrlen)
ENOSYS_INT(rgetsockname, int socket, struct sockaddr *addr, socklen_t *addrlen)
ENOSYS_INT(rsetsockopt, int socket, int level, int optname, const void *optval, socklen_t optlen)
ENOSYS_INT(rgetsockopt, int socket, int level, int optname, void *optval, socklen_t *optlen)
ENOSYS_INT(riounmap, int socket, void *buf, size_t len)

CM_EXPORT int rfcntl(int socket, int cmd, ...)
{
	return cm_fail(ENOSYS);
}

#define ENOSYS_SSIZE(name, ...)                \
	CM_EXPORT ssize_t name(__VA_ARGS__)    \
	{                                      \
		return cm_fail(ENOSYS);        \
	}

ENOSYS_SSIZE(rrecv, int socket, void *buf, size_t len, int flags)
ENOSYS_SSIZE(rrecvfrom, int socket, void *buf, size_t len, int flags, struct sockaddr *src_addr, socklen_t *addrlen)
ENOSYS_SSIZE(rrecvmsg, int socket, struct msghdr *msg, int flags)
ENOSYS_SSIZE(rsend, int socket, const void *buf, size_t len, int flags)
ENOSYS_SSIZE(rsendto, int socket, const void *buf, size_t len, int flags, const struct sockaddr *dest_addr,
	     socklen_t addrlen)
ENOSYS_SSIZE(rsendmsg, int socket, const struct msghdr *msg, int flags)
ENOSYS_SSIZE(rread, int socket, void *buf, size_t count)
ENOSYS_SSIZE(rreadv, int socket, const struct iovec *iov, int iovcnt)
ENOSYS_SSIZE(rwrite, int socket, const void *buf, size_t count)
ENOSYS_SSIZE(rwritev, int socket, const struct iovec *iov, int iovcnt)

CM_EXPORT off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
	return cm_fail(ENOSYS);
}

CM_EXPORT size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
	errno = ENOSYS;
	return 0; /* nothing written */
}

CM_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	return poll(fds, nfds, timeout);
}

CM_EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
	return select(nfds, readfds, writefds, exceptfds, timeout);
}
