/*
 * softnic_rdmacm.h: the private entry point between softnic's librdmacm
 * replacement (librdmacm.so.1) and the provider (libsoftnic-rdmav34.so).
 *
 * librdmacm opens a softnic device with ibv_open_device like any program,
 * so the context is the provider's: one session with the daemon. To run
 * rdma_cm IDs on that session it needs two things only the provider
 * has: sending a command on the context's control socket, and making an
 * ID's QP (cm_create_qp) a provider QP, whose rings ibv_post_send and
 * ibv_poll_cq then drive like any other. The provider exports
 * softnic_rdmacm_ops (symbol version SOFTNIC_PRIVATE_1), which returns
 * the table below; librdmacm finds it with dlsym.
 */
#ifndef SOFTNIC_RDMACM_H
#define SOFTNIC_RDMACM_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#define SOFTNIC_RDMACM_OPS "softnic_rdmacm_ops"
#define SOFTNIC_RDMACM_VERSION "SOFTNIC_PRIVATE_1"
#define SOFTNIC_RDMACM_ABI 5

struct softnic_rdmacm_ops {
	uint32_t abi; /* SOFTNIC_RDMACM_ABI */
	/* cm_call sends one of the CM commands (cm_create_channel to
	 * cm_detach_qp except cm_create_qp, cm_set_option to cm_establish,
	 * cm_destroy_channel) on context's session and takes
	 * its reply, which must be reply_len bytes. It returns the number of
	 * descriptors the reply passed (into fds), or -1 with errno: EINVAL
	 * for a context not softnic's or another command, else as the
	 * provider's own calls. */
	int (*cm_call)(struct ibv_context *context, int op, const void *req, size_t req_len, void *reply,
		       size_t reply_len, int *fds, int max_fds);
	/* cm_create_qp makes ID id's QP on pd (a softnic PD) with attr, as
	 * ibv_create_qp would, through cm_create_qp; with send_ops (not
	 * NULL), the ibv_wr_* operations of those send_ops_flags, as
	 * ibv_create_qp_ex. NULL with errno (EOPNOTSUPP: an opcode the QP
	 * type does not take). */
	struct ibv_qp *(*cm_create_qp)(struct ibv_pd *pd, uint32_t id, struct ibv_qp_init_attr *attr,
				       const uint64_t *send_ops);
	/* cm_qp_attr records, for ibv_query_qp, attributes the daemon set on
	 * an ID's QP (which ibv_modify_qp did not): the UD Q_Key. */
	void (*cm_qp_attr)(struct ibv_qp *qp, const struct ibv_qp_attr *attr, int mask);
	/* cm_create_xrc_qp makes ID id's QP an XRC receive QP of xrcd (a
	 * softnic XRCD), through cm_create_qp. NULL with errno. */
	struct ibv_qp *(*cm_create_xrc_qp)(struct ibv_xrcd *xrcd, uint32_t id, void *qp_context);
	/* alloc_shared maps len bytes (whole pages) of zeros that context's
	 * daemon maps too (share_memory), for buffers the library alone
	 * allocates and frees: the engine reaches a region registered in
	 * them with plain copies. It returns them and the handle to give
	 * free_shared; NULL with errno. */
	void *(*alloc_shared)(struct ibv_context *context, size_t len, uint32_t *handle);
	/* free_shared unshares and unmaps them, after their regions are
	 * deregistered. */
	void (*free_shared)(struct ibv_context *context, void *addr, size_t len, uint32_t handle);
};

typedef const struct softnic_rdmacm_ops *(*softnic_rdmacm_ops_fn)(void);

#endif
