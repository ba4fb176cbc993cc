/*
 * rdmacm_unsup.c: librdmacm's calls softnic's connection manager does not
 * carry. Each fails with ENOSYS (programs that import them still load,
 * and learn at the call).
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
