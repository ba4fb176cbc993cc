/*
 * abi34.h: the parts of libibverbs' private provider interface that the
 * softnic provider uses, for private ABI 34 (symbol version
 * IBVERBS_PRIVATE_34: rdma-core v34 to v56).
 *
 * No Debian package ships rdma-core's libibverbs/driver.h, so these are our
 * own declarations of the same memory layouts, written from reading that
 * header at the v44.0 tag. libibverbs reads and writes these structures
 * itself: a field out of place breaks the ABI silently, so nothing here
 * may move. Only what softnic needs is named; pointers we never call are
 * kept as placeholders of the same size, in the same order.
 */
#ifndef SOFTNIC_ABI34_H
#define SOFTNIC_ABI34_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <infiniband/verbs.h>

/* A node of libibverbs' intrusive lists (ccan/list). */
struct sn_list_node {
	struct sn_list_node *next, *prev;
};

/* What libibverbs found in sysfs for one device (struct verbs_sysfs_dev). */
struct sn_sysfs_dev {
	struct sn_list_node entry;
	void *provider_data;
	const void *match;
	unsigned int flags;
	char sysfs_name[IBV_SYSFS_NAME_MAX];
	dev_t sysfs_cdev;
	char ibdev_name[IBV_SYSFS_NAME_MAX];
	char ibdev_path[IBV_SYSFS_PATH_MAX];
	char modalias[512];
	uint64_t node_guid;
	uint32_t driver_id;
	enum ibv_node_type node_type;
	int ibdev_idx;
	uint32_t num_ports;
	uint32_t abi_ver;
	struct timespec time_created;
};

struct sn_verbs_device;

/* The driver's entry points (struct verbs_device_ops). */
struct sn_device_ops {
	const char *name;
	uint32_t match_min_abi_version;
	uint32_t match_max_abi_version;
	const void *match_table;
	const void *static_providers;
	bool (*match_device)(struct sn_sysfs_dev *sysfs_dev);
	struct verbs_context *(*alloc_context)(struct ibv_device *device, int cmd_fd, void *private_data);
	struct verbs_context *(*import_context)(struct ibv_device *device, int cmd_fd);
	struct sn_verbs_device *(*alloc_device)(struct sn_sysfs_dev *sysfs_dev);
	void (*uninit_device)(struct sn_verbs_device *device);
};

/* A device as libibverbs keeps it (struct verbs_device); the provider
 * allocates it, ibv_device first. */
struct sn_verbs_device {
	struct ibv_device device;
	const struct sn_device_ops *ops;
	atomic_int refcount;
	struct sn_list_node entry;
	struct sn_sysfs_dev *sysfs;
	uint64_t core_support;
};

/* An MR as libibverbs reads it back in ibv_dereg_mr (struct verbs_mr). */
struct sn_verbs_mr {
	struct ibv_mr ibv_mr;
	int mr_type; /* 0: an ordinary MR (IBV_MR_TYPE_MR) */
	int access;
};

/* verbs_mr's mr_type of an MR ibv_import_mr made (IBV_MR_TYPE_IMPORTED_MR):
 * ibv_dereg_mr then leaves its (NULL) range's fork state alone. */
#define SN_MR_TYPE_IMPORTED 2

/* verbs_qp's comp_mask: the QP has an XRCD (VERBS_QP_XRCD); its
 * ibv_qp_ex is valid (VERBS_QP_EX). */
#define SN_VERBS_QP_XRCD (1u << 0)
#define SN_VERBS_QP_EX (1u << 1)

/* A QP as libibverbs lays it out (struct verbs_qp). */
struct sn_verbs_qp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qp_ex;
	};
	uint32_t comp_mask;
	void *xrcd;
};

/*
 * IBTA 1.5's FLUSH and ATOMIC_WRITE as the kernel's uverbs ABI numbers them
 * (ib_user_verbs.h: IB_UVERBS_DEVICE_FLUSH_GLOBAL 1 << 38, _PERSISTENT
 * 1 << 39, _ATOMIC_WRITE 1 << 40 in device_cap_flags_ex; the access flags
 * IB_UVERBS_ACCESS_FLUSH_GLOBAL 1 << 8, _PERSISTENT 1 << 9). rdma-core 44's
 * verbs.h, which softnic builds against, has ATOMIC_WRITE's opcodes but
 * neither the device flags nor anything of FLUSH (rdma-core 47 added them).
 */
#define SN_DEVICE_FLUSH_GLOBAL (1ULL << 38)
#define SN_DEVICE_FLUSH_PERSISTENT (1ULL << 39)
#define SN_DEVICE_ATOMIC_WRITE (1ULL << 40)
#define SN_ACCESS_FLUSH_GLOBAL (1 << 8)
#define SN_ACCESS_FLUSH_PERSISTENT (1 << 9)

/* Placeholder for an operation softnic leaves to libibverbs' default. */
typedef void (*sn_unused_op)(void);

/*
 * The context's operations (struct verbs_context_ops), sorted by name as
 * rdma-core keeps them. verbs_set_ops() copies the ones that are not NULL.
 */
struct sn_context_ops {
	int (*advise_mr)(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sg_list,
			 uint32_t num_sges);
	struct ibv_dm *(*alloc_dm)(struct ibv_context *context, struct ibv_alloc_dm_attr *attr);
	struct ibv_mw *(*alloc_mw)(struct ibv_pd *pd, enum ibv_mw_type type);
	sn_unused_op alloc_null_mr;
	struct ibv_pd *(*alloc_parent_domain)(struct ibv_context *context, struct ibv_parent_domain_init_attr *attr);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
	struct ibv_td *(*alloc_td)(struct ibv_context *context, struct ibv_td_init_attr *init_attr);
	void (*async_event)(struct ibv_context *context, struct ibv_async_event *event);
	sn_unused_op attach_counters_point_flow;
	int (*attach_mcast)(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
	int (*bind_mw)(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind);
	int (*close_xrcd)(struct ibv_xrcd *xrcd);
	void (*cq_event)(struct ibv_cq *cq);
	struct ibv_ah *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr);
	sn_unused_op create_counters;
	struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, struct ibv_comp_channel *channel,
				    int comp_vector);
	struct ibv_cq_ex *(*create_cq_ex)(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr);
	struct ibv_flow *(*create_flow)(struct ibv_qp *qp, struct ibv_flow_attr *flow_attr);
	sn_unused_op create_flow_action_esp;
	struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
	struct ibv_qp *(*create_qp_ex)(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr);
	struct ibv_rwq_ind_table *(*create_rwq_ind_table)(struct ibv_context *context,
							  struct ibv_rwq_ind_table_init_attr *init_attr);
	struct ibv_srq *(*create_srq)(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
	struct ibv_srq *(*create_srq_ex)(struct ibv_context *context, struct ibv_srq_init_attr_ex *attr);
	struct ibv_wq *(*create_wq)(struct ibv_context *context, struct ibv_wq_init_attr *wq_init_attr);
	int (*dealloc_mw)(struct ibv_mw *mw);
	int (*dealloc_pd)(struct ibv_pd *pd);
	int (*dealloc_td)(struct ibv_td *td);
	int (*dereg_mr)(struct sn_verbs_mr *mr);
	int (*destroy_ah)(struct ibv_ah *ah);
	sn_unused_op destroy_counters;
	int (*destroy_cq)(struct ibv_cq *cq);
	int (*destroy_flow)(struct ibv_flow *flow);
	sn_unused_op destroy_flow_action;
	int (*destroy_qp)(struct ibv_qp *qp);
	int (*destroy_rwq_ind_table)(struct ibv_rwq_ind_table *rwq_ind_table);
	int (*destroy_srq)(struct ibv_srq *srq);
	int (*destroy_wq)(struct ibv_wq *wq);
	int (*detach_mcast)(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
	void (*free_context)(struct ibv_context *context);
	int (*free_dm)(struct ibv_dm *dm);
	int (*get_srq_num)(struct ibv_srq *srq, uint32_t *srq_num);
	struct ibv_dm *(*import_dm)(struct ibv_context *context, uint32_t dm_handle);
	struct ibv_mr *(*import_mr)(struct ibv_pd *pd, uint32_t mr_handle);
	struct ibv_pd *(*import_pd)(struct ibv_context *context, uint32_t pd_handle);
	sn_unused_op modify_cq, modify_flow_action_esp;
	int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
	sn_unused_op modify_qp_rate_limit;
	int (*modify_srq)(struct ibv_srq *srq, struct ibv_srq_attr *attr, int attr_mask);
	int (*modify_wq)(struct ibv_wq *wq, struct ibv_wq_attr *wq_attr);
	struct ibv_qp *(*open_qp)(struct ibv_context *context, struct ibv_qp_open_attr *attr);
	struct ibv_xrcd *(*open_xrcd)(struct ibv_context *context, struct ibv_xrcd_init_attr *attr);
	int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
	int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
	int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
	int (*post_srq_ops)(struct ibv_srq *srq, struct ibv_ops_wr *op, struct ibv_ops_wr **bad_op);
	int (*post_srq_recv)(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
	int (*query_device_ex)(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
			       struct ibv_device_attr_ex *attr, size_t attr_size);
	sn_unused_op query_ece;
	int (*query_port)(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *attr);
	int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
			struct ibv_qp_init_attr *init_attr);
	sn_unused_op query_qp_data_in_order;
	int (*query_rt_values)(struct ibv_context *context, struct ibv_values_ex *values);
	int (*query_srq)(struct ibv_srq *srq, struct ibv_srq_attr *attr);
	sn_unused_op read_counters;
	struct ibv_mr *(*reg_dm_mr)(struct ibv_pd *pd, struct ibv_dm *dm, uint64_t dm_offset, size_t length,
				    unsigned int access);
	sn_unused_op reg_dmabuf_mr;
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, uint64_t hca_va, int access);
	int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
	int (*rereg_mr)(struct sn_verbs_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access);
	int (*resize_cq)(struct ibv_cq *cq, int cqe);
	sn_unused_op set_ece;
	void (*unimport_dm)(struct ibv_dm *dm);
	void (*unimport_mr)(struct ibv_mr *mr);
	void (*unimport_pd)(struct ibv_pd *pd);
};

/* 76 operations, each one pointer: a count that changes means a typo. */
_Static_assert(sizeof(struct sn_context_ops) == 76 * sizeof(void *), "verbs_context_ops has 76 entries");

/* libibverbs' private functions (IBVERBS_PRIVATE_34). */
void verbs_register_driver_34(const struct sn_device_ops *ops);
void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd, size_t alloc_size,
				    struct verbs_context *context_offset, uint32_t driver_id);
void verbs_uninit_context(struct verbs_context *context);
void verbs_set_ops(struct verbs_context *vctx, const struct sn_context_ops *ops);

/* The device's private ABI range, as its sysfs abi_version file says. */
#define SN_ABI_VERSION 1

#endif
