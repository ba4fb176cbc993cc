/*
 * device.c: the provider's registration with libibverbs, its devices and
 * contexts, and the device and port queries.
 *
 * libibverbs finds softnic devices in the sysfs-like tree `softnic daemon`
 * publishes (SYSFS_PATH), loads this library (RDMAV_DRIVERS), and calls
 * match_device for each; a device whose modalias is "softnic" (or whose
 * name starts with "softnic_", devmatch.h) is ours, whatever its name.
 * Opening it connects to the daemon's control socket for that device: one
 * session per context.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "devmatch.h"
#include "provider.h"

static bool sn_match_device(struct sn_sysfs_dev *sysfs_dev)
{
	return sn_devmatch(sysfs_dev->ibdev_name, sysfs_dev->ibdev_path);
}

static struct sn_verbs_device *sn_alloc_device(struct sn_sysfs_dev *sysfs_dev)
{
	(void)sysfs_dev;
	return calloc(1, sizeof(struct sn_verbs_device));
}

static void sn_uninit_device(struct sn_verbs_device *device)
{
	free(device);
}

/* sn_free_context closes a context; its session ends with the last of
 * the contexts on it (an imported one's included, in either order). */
static void sn_free_context(struct ibv_context *context)
{
	struct sn_context *ctx = to_ctx(context);
	sn_context_unregister(ctx);
	if (ctx->s)
		sn_session_put(ctx->s);
	verbs_uninit_context(&ctx->vctx); /* closes cmd_fd and async_fd */
	free(ctx);
}

static int sn_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
			      struct ibv_device_attr_ex *attr, size_t attr_size);
static int sn_query_port(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr);

/* The daemon names objects in events by the user handles we gave it, our
 * pointers: libibverbs casts them back itself, nothing is left to do. */
static void sn_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	(void)context;
	(void)event;
}

static void sn_cq_event(struct ibv_cq *cq)
{
	(void)cq;
}

/* sn_query_rt_values reads the device clock as mlx5 does: its ticks (ns of
 * CLOCK_REALTIME, a vDSO read, no call to the daemon) in raw_clock's
 * tv_nsec, tv_sec 0; EINVAL for comp_mask bits it does not know. */
static int sn_query_rt_values(struct ibv_context *context, struct ibv_values_ex *values)
{
	(void)context;
	if (values->comp_mask & ~(uint32_t)IBV_VALUES_MASK_RAW_CLOCK)
		return EINVAL;
	if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
		struct timespec t;
		if (clock_gettime(CLOCK_REALTIME, &t))
			return errno;
		values->raw_clock.tv_sec = 0;
		values->raw_clock.tv_nsec = t.tv_sec * 1000000000L + t.tv_nsec;
	}
	return 0;
}

static const struct sn_context_ops sn_ops = {
	.alloc_dm = sn_alloc_dm,
	.alloc_mw = sn_alloc_mw,
	.alloc_parent_domain = sn_alloc_parent_domain,
	.alloc_pd = sn_alloc_pd,
	.alloc_td = sn_alloc_td,
	.bind_mw = sn_bind_mw,
	.close_xrcd = sn_close_xrcd,
	.async_event = sn_async_event,
	.attach_mcast = sn_attach_mcast,
	.cq_event = sn_cq_event,
	.create_ah = sn_create_ah,
	.create_cq = sn_create_cq,
	.create_cq_ex = sn_create_cq_ex,
	.create_flow = sn_create_flow,
	.create_qp = sn_create_qp,
	.create_qp_ex = sn_create_qp_ex,
	.create_rwq_ind_table = sn_create_rwq_ind_table,
	.create_wq = sn_create_wq,
	.create_srq = sn_create_srq,
	.create_srq_ex = sn_create_srq_ex,
	.dealloc_mw = sn_dealloc_mw,
	.dealloc_pd = sn_dealloc_pd,
	.dealloc_td = sn_dealloc_td,
	.dereg_mr = sn_dereg_mr,
	.advise_mr = sn_advise_mr,
	.rereg_mr = sn_rereg_mr,
	.destroy_ah = sn_destroy_ah,
	.destroy_cq = sn_destroy_cq,
	.destroy_flow = sn_destroy_flow,
	.destroy_qp = sn_destroy_qp,
	.destroy_rwq_ind_table = sn_destroy_rwq_ind_table,
	.destroy_wq = sn_destroy_wq,
	.destroy_srq = sn_destroy_srq,
	.detach_mcast = sn_detach_mcast,
	.free_context = sn_free_context,
	.free_dm = sn_free_dm,
	.import_dm = sn_import_dm,
	.import_mr = sn_import_mr,
	.import_pd = sn_import_pd,
	.get_srq_num = sn_get_srq_num,
	.modify_qp = sn_modify_qp,
	.modify_wq = sn_modify_wq,
	.modify_srq = sn_modify_srq,
	.open_qp = sn_open_qp,
	.open_xrcd = sn_open_xrcd,
	.poll_cq = sn_poll_cq,
	.post_recv = sn_post_recv,
	.post_send = sn_post_send,
	.post_srq_ops = sn_post_srq_ops,
	.post_srq_recv = sn_post_srq_recv,
	.query_device_ex = sn_query_device_ex,
	.query_port = sn_query_port,
	.query_qp = sn_query_qp,
	.query_rt_values = sn_query_rt_values,
	.query_srq = sn_query_srq,
	.reg_dm_mr = sn_reg_dm_mr,
	.reg_mr = sn_reg_mr,
	.req_notify_cq = sn_req_notify_cq,
	.resize_cq = sn_resize_cq,
	.unimport_dm = sn_unimport_dm,
	.unimport_mr = sn_unimport_mr,
	.unimport_pd = sn_unimport_pd,
};

static struct verbs_context *sn_alloc_context(struct ibv_device *device, int cmd_fd, void *private_data)
{
	(void)private_data;
	struct sn_context *ctx = _verbs_init_and_alloc_context(device, cmd_fd, sizeof(*ctx), NULL, 0);
	if (!ctx)
		return NULL;
	ctx->s = sn_session_new();
	int err = ctx->s ? sn_connect(ctx, device->name) : ENOMEM;
	if (err) {
		sn_free_context(&ctx->vctx.context);
		errno = err;
		return NULL;
	}
	sn_set_ops(ctx);
	sn_context_register(ctx);
	return &ctx->vctx;
}

/* sn_set_ops gives a new context, opened or imported, its operations. */
void sn_set_ops(struct sn_context *ctx)
{
	verbs_set_ops(&ctx->vctx, &sn_ops);
	ctx->vctx.context.num_comp_vectors = 1; /* the daemon's completion events */
}

const struct sn_device_ops sn_device_ops = {
	.name = "softnic",
	.match_min_abi_version = SN_ABI_VERSION,
	.match_max_abi_version = SN_ABI_VERSION,
	.match_device = sn_match_device,
	.alloc_context = sn_alloc_context,
	/* import_context stays NULL: libibverbs' ibv_import_device asks the
	 * kernel for an async descriptor through the command descriptor,
	 * which for softnic is /dev/null, after it; the provider's own
	 * ibv_import_device (import.c) makes the context instead. */
	.alloc_device = sn_alloc_device,
	.uninit_device = sn_uninit_device,
};

/* sn_is_softnic reports whether context is a softnic device's. */
int sn_is_softnic(struct ibv_context *context)
{
	return context && context->device &&
	       ((struct sn_verbs_device *)context->device)->ops == &sn_device_ops;
}

__attribute__((constructor)) static void sn_register(void)
{
	verbs_register_driver_34(&sn_device_ops);
}

/*
 * sn_query_device_ex answers from the hello exchange's limits. Counts of
 * objects softnic does not limit (QPs, CQs, MRs, PDs, AHs, SRQs) are
 * given as the largest a handle allows, as rxe gives its pool sizes.
 */
static int sn_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
			      struct ibv_device_attr_ex *attr, size_t attr_size)
{
	(void)input;
	struct sn_context *ctx = to_ctx(context);
	if (attr_size < sizeof(attr->orig_attr))
		return EINVAL;
	memset(attr, 0, attr_size < sizeof(*attr) ? attr_size : sizeof(*attr));
	struct ibv_device_attr *a = &attr->orig_attr;
	const struct sn_hello_reply *l = &ctx->s->limits;
	/* The device clock (provider.h): its ticks are ns. */
	if (attr_size >= offsetof(struct ibv_device_attr_ex, hca_core_clock) + sizeof(attr->hca_core_clock)) {
		attr->completion_timestamp_mask = UINT64_MAX;
		attr->hca_core_clock = SN_HCA_CORE_CLOCK_KHZ;
	}
	strcpy(a->fw_ver, "0.0.0");
	a->node_guid = a->sys_image_guid = htobe64(l->node_guid);
	a->max_mr_size = UINT64_MAX;
	a->page_size_cap = 0xfffff000;
	a->vendor_id = 0xffffff;
	a->max_qp = a->max_cq = a->max_mr = a->max_pd = a->max_ah = a->max_srq = a->max_mw = 0x10000;
	a->max_qp_wr = a->max_srq_wr = l->max_qp_wr;
	/* Memory windows of type 1 and 2B (a type 2 window is bound to a QP), as
	 * ConnectX's and rxe's. */
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_CHANGE_PHY_PORT | IBV_DEVICE_MEM_WINDOW |
			      IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_XRC;
	a->max_sge = a->max_sge_rd = a->max_srq_sge = l->max_sge;
	a->max_cqe = l->max_cqe;
	a->max_qp_rd_atom = a->max_qp_init_rd_atom = l->max_rd_atomic;
	a->max_res_rd_atom = l->max_rd_atomic * a->max_qp;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_pkeys = 1;
	/* As the Go API's DeviceAttr (ibtransport/ibv/mcast.go). */
	a->max_mcast_grp = SN_MAX_MCAST_GROUPS;
	a->max_mcast_qp_attach = SN_MAX_MCAST_QP_ATTACH;
	a->max_total_mcast_qp_attach = SN_MAX_MCAST_GROUPS * SN_MAX_MCAST_QP_ATTACH;
	a->local_ca_ack_delay = 15;
	a->phys_port_cnt = 1;
	if (attr_size >= offsetof(struct ibv_device_attr_ex, phys_port_cnt_ex) + sizeof(attr->phys_port_cnt_ex))
		attr->phys_port_cnt_ex = a->phys_port_cnt;
	if (attr_size >= offsetof(struct ibv_device_attr_ex, odp_caps) + sizeof(attr->odp_caps)) {
		attr->odp_caps.general_caps = SN_ODP_GENERAL;
		attr->odp_caps.per_transport_caps.rc_odp_caps = SN_ODP_RC;
		attr->odp_caps.per_transport_caps.uc_odp_caps = SN_ODP_UC;
		attr->odp_caps.per_transport_caps.ud_odp_caps = SN_ODP_UD;
	}
	if (attr_size >= offsetof(struct ibv_device_attr_ex, tm_caps) + sizeof(attr->tm_caps))
		sn_tm_caps(&attr->tm_caps);
	/* XRC's on-demand paging: what RC's does, and receives into SRQs. */
	if (attr_size >= offsetof(struct ibv_device_attr_ex, xrc_odp_caps) + sizeof(attr->xrc_odp_caps))
		attr->xrc_odp_caps = SN_ODP_RC | IBV_ODP_SUPPORT_SRQ_RECV;
	if (attr_size >= offsetof(struct ibv_device_attr_ex, max_dm_size) + sizeof(attr->max_dm_size))
		attr->max_dm_size = SN_MAX_DM_SIZE; /* dm.c: the daemon's memory, every session's */
	/* The engines execute ATOMIC_WRITE, and FLUSH to global visibility;
	 * softnic has no persistent memory, so no persistent FLUSH (as rxe
	 * without pmem, though rxe sets the flag and refuses the regions). */
	if (attr_size >= offsetof(struct ibv_device_attr_ex, device_cap_flags_ex) + sizeof(attr->device_cap_flags_ex))
		attr->device_cap_flags_ex = a->device_cap_flags | SN_DEVICE_ATOMIC_WRITE | SN_DEVICE_FLUSH_GLOBAL;
	/* Receive side scaling over raw packet QPs (rss.c): a Toeplitz hash of
	 * IP addresses and TCP/UDP ports, tables of up to 64 work queues. */
	if (attr_size >= offsetof(struct ibv_device_attr_ex, rss_caps) + sizeof(attr->rss_caps)) {
		attr->rss_caps.supported_qpts = 1 << IBV_QPT_RAW_PACKET;
		attr->rss_caps.max_rwq_indirection_tables = a->max_qp;
		attr->rss_caps.max_rwq_indirection_table_size = SN_MAX_RSS_TABLE;
		attr->rss_caps.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
		attr->rss_caps.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 | IBV_RX_HASH_SRC_IPV6 |
						     IBV_RX_HASH_DST_IPV6 | IBV_RX_HASH_SRC_PORT_TCP |
						     IBV_RX_HASH_DST_PORT_TCP | IBV_RX_HASH_SRC_PORT_UDP |
						     IBV_RX_HASH_DST_PORT_UDP;
	}
	if (attr_size >= offsetof(struct ibv_device_attr_ex, max_wq_type_rq) + sizeof(attr->max_wq_type_rq))
		attr->max_wq_type_rq = a->max_qp;
	return 0;
}

static int sn_query_port(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr)
{
	struct sn_handle req = {port};
	struct sn_query_port_reply r;
	if (port != 1)
		return EINVAL;
	if (sn_call(to_ctx(context), SN_OP_QUERY_PORT, &req, sizeof(req), &r, sizeof(r), NULL, 0) < 0)
		return errno;
	memset(attr, 0, sizeof(*attr));
	attr->state = r.state;
	attr->max_mtu = r.max_mtu;
	attr->active_mtu = r.active_mtu;
	attr->link_layer = r.link_layer;
	attr->gid_tbl_len = r.gid_table_len;
	attr->pkey_tbl_len = r.pkey_table_len;
	attr->max_msg_sz = r.max_msg_size;
	attr->port_cap_flags = IBV_PORT_CM_SUP;
	attr->max_vl_num = 1;
	attr->phys_state = r.state == IBV_PORT_ACTIVE ? 5 : 3; /* LINK_UP, DISABLED */
	attr->active_width = 1; /* 1X */
	attr->active_speed = 1; /* SDR: a software port has no signalling rate */
	return 0;
}
