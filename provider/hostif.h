/*
 * hostif.h: softnic's host interface, as docs/HOST-INTERFACE.md specifies
 * it: the control messages' numbers and bodies (little-endian, no
 * padding) and the shared rings' layouts. This header is their source:
 * package hostif's Go declarations of them (hostif/ztypes_hostif.go,
 * fields named after these) are generated from it with go generate
 * ./hostif, which refuses padding and fields other than fixed-size
 * integers, arrays and structs.
 *
 * The provider speaks version 4: hello passes the client's own
 * /proc/self/mem and /proc/self/maps descriptors, and channels are
 * destroyed with destroy_comp_channel (43) and cm_destroy_channel (44).
 */
#ifndef SOFTNIC_HOSTIF_H
#define SOFTNIC_HOSTIF_H

#include <stdint.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the host interface is little-endian; this provider stores its fields natively"
#endif

#define SN_VERSION 6
#define SN_HEADER_LEN 16
#define SN_MAX_MESSAGE 4096

enum sn_op {
	SN_OP_HELLO = 1,
	SN_OP_ALLOC_PD,
	SN_OP_DEALLOC_PD,
	SN_OP_REG_MR,
	SN_OP_DEREG_MR,
	SN_OP_CREATE_COMP_CHANNEL,
	SN_OP_CREATE_CQ,
	SN_OP_DESTROY_CQ,
	SN_OP_CREATE_QP,
	SN_OP_MODIFY_QP,
	SN_OP_DESTROY_QP,
	SN_OP_CREATE_AH,
	SN_OP_DESTROY_AH,
	SN_OP_QUERY_PORT,
	SN_OP_QUERY_GID,
	SN_OP_CREATE_SRQ,
	SN_OP_MODIFY_SRQ,
	SN_OP_DESTROY_SRQ,
	SN_OP_QUERY_RESOURCES,
	/* The connection manager (rdma_cm), 20 to 34. */
	SN_OP_CM_CREATE_CHANNEL,
	SN_OP_CM_CREATE_ID,
	SN_OP_CM_BIND,
	SN_OP_CM_RESOLVE_ADDR,
	SN_OP_CM_RESOLVE_ROUTE,
	SN_OP_CM_CREATE_QP,
	SN_OP_CM_CONNECT,
	SN_OP_CM_LISTEN,
	SN_OP_CM_ACCEPT,
	SN_OP_CM_REJECT,
	SN_OP_CM_DISCONNECT,
	SN_OP_CM_DESTROY_ID,
	SN_OP_CM_GET_EVENT,
	SN_OP_CM_QUERY_ADDR,
	SN_OP_CM_DETACH_QP,
	SN_OP_SHARE_MEMORY,
	SN_OP_UNSHARE_MEMORY,
	SN_OP_QUERY_COUNTERS,
	SN_OP_CM_SET_OPTION,
	SN_OP_CM_MIGRATE_ID,
	SN_OP_CM_INIT_QP_ATTR,
	SN_OP_CM_ESTABLISH,
	SN_OP_QUERY_CM_IDS,
	SN_OP_DESTROY_COMP_CHANNEL, /* u32 handle -> empty; EBUSY while a CQ uses it */
	SN_OP_CM_DESTROY_CHANNEL, /* u32 channel -> empty; EBUSY while an ID has its events on it */
	SN_OP_ADVISE_MR = 45, /* sn_advise_mr_req -> empty */
	SN_OP_REREG_MR = 46, /* sn_rereg_mr_req -> sn_reg_mr_reply */
	SN_OP_RESIZE_CQ = 47, /* struct sn_resize_cq_req -> struct sn_resize_cq_reply; fd: the new ring */
	/* Device memory (ibv_alloc_dm): a memfd the daemon makes and both map. */
	SN_OP_ALLOC_DM = 50, /* sn_alloc_dm_req -> sn_handle; fd: the memory (memfd, sealed) */
	SN_OP_FREE_DM = 51, /* u32 handle -> empty; EBUSY while a region is registered in it */
	SN_OP_REG_DM_MR = 52, /* sn_reg_dm_mr_req -> sn_reg_mr_reply */
	SN_OP_ALLOC_MW = 48, /* sn_alloc_mw_req -> sn_alloc_mw_reply */
	SN_OP_DEALLOC_MW = 49, /* u32 handle -> empty */
	/* Multicast: a UD QP's groups (ibv_attach_mcast), an ID's (rdma_join_multicast). */
	SN_OP_ATTACH_MCAST = 55, /* sn_mcast_req -> empty */
	SN_OP_DETACH_MCAST = 56, /* sn_mcast_req -> empty; EINVAL if not attached */
	SN_OP_CM_JOIN_MCAST = 57, /* sn_cm_mcast_req -> empty; MULTICAST_JOIN follows */
	SN_OP_CM_LEAVE_MCAST = 58, /* sn_cm_mcast_req (flags 0) -> empty; EADDRNOTAVAIL if not joined */
	/* Importing objects (ibv_import_pd, _mr, _dm): a second context of the
	 * same session asks what its handles name; ENOENT for none. */
	SN_OP_QUERY_PD = 85, /* u32 handle -> empty */
	SN_OP_QUERY_MR = 86, /* u32 handle -> sn_query_mr_reply */
	SN_OP_QUERY_DM = 87, /* u32 handle -> sn_query_dm_reply; fd: the memory (the memfd alloc_dm passed) */
	SN_OP_CREATE_TM_SRQ = 80, /* sn_create_tm_srq_req -> sn_create_srq_reply; fd: the SRQ's ring */
	SN_OP_POST_SRQ_OP = 81, /* sn_srq_op_req -> sn_handle (ADD's new entry, 0 otherwise) */
	/* Flow steering to raw packet QPs (ibv_create_flow). */
	SN_OP_CREATE_FLOW = 70, /* sn_create_flow_req -> sn_handle */
	SN_OP_DESTROY_FLOW = 71, /* u32 handle -> empty */
	SN_OP_CREATE_RSS_QP = 72, /* sn_create_rss_qp_req -> sn_create_qp_reply; fd: the rings */
	/* XRC (ibv_open_xrcd, IBV_SRQT_XRC, IBV_QPT_XRC_RECV, ibv_open_qp). XRC
	 * send QPs are create_qp's (type SN_QPT_XRC_SEND, no receive CQ or
	 * queue); their send entries name the remote SRQ in reserved2. */
	SN_OP_OPEN_XRCD = 60, /* sn_open_xrcd_req -> sn_handle; fd: the file, if has_fd */
	SN_OP_CLOSE_XRCD = 61, /* u32 handle -> empty; EBUSY while its SRQs or QPs remain */
	SN_OP_CREATE_XRC_SRQ = 62, /* sn_create_xrc_srq_req -> sn_create_xrc_srq_reply; fd: the ring */
	SN_OP_CREATE_XRC_QP = 63, /* sn_xrc_qp_req (qpn 0) -> sn_create_qp_reply; fd: the ring */
	SN_OP_OPEN_QP = 64, /* sn_xrc_qp_req -> sn_create_qp_reply; fd: the ring */
};
_Static_assert(SN_OP_CM_CREATE_CHANNEL == 20 && SN_OP_CM_DETACH_QP == 34 && SN_OP_CM_SET_OPTION == 38 &&
		       SN_OP_CM_MIGRATE_ID == 39 && SN_OP_CM_ESTABLISH == 41 && SN_OP_QUERY_CM_IDS == 42 &&
		       SN_OP_DESTROY_COMP_CHANNEL == 43 && SN_OP_CM_DESTROY_CHANNEL == 44 && SN_OP_RESIZE_CQ == 47,
	       "op numbers");

/* hello's descriptors, in this order. */
enum { SN_HELLO_MEM_FD, SN_HELLO_MAPS_FD, SN_HELLO_FDS };

struct sn_header {
	uint16_t op;
	uint16_t version;
	uint32_t length; /* header and body */
	uint32_t seq;
	int32_t status; /* replies: 0 or a negative errno */
} __attribute__((packed));

struct sn_handle {
	uint32_t handle;
} __attribute__((packed));

struct sn_hello_reply {
	uint32_t version, max_qp_wr, max_sge, max_cqe, max_inline, max_rd_atomic, active_mtu, engines;
	uint64_t node_guid;
} __attribute__((packed));

/*
 * attach_mcast and detach_mcast: QP handle, LID (ignored on RoCE), group
 * GID. A device takes SN_MAX_MCAST_GROUPS groups of up to
 * SN_MAX_MCAST_QP_ATTACH QPs each (ENOMEM past them).
 */
#define SN_MAX_MCAST_GROUPS 1024
#define SN_MAX_MCAST_QP_ATTACH 56
struct sn_mcast_req {
	uint32_t qp, lid;
	uint8_t gid[16];
} __attribute__((packed));

/*
 * create_flow: a flow of a raw packet QP (ibv_create_flow), struct
 * ibv_flow_attr's fields and its specs. Each spec's val and mask are the
 * bytes of its libibverbs filter struct (ibv_flow_eth_filter,
 * ibv_flow_ipv4_filter, ibv_flow_ipv4_ext_filter, ibv_flow_ipv6_filter,
 * ibv_flow_tcp_udp_filter: their multi-byte fields in network byte
 * order), zero past it; size is the spec's ibv_flow_spec size.
 */
#define SN_MAX_FLOW_SPECS 8
#define SN_FLOW_FILTER_MAX 40
struct sn_flow_spec {
	uint32_t type;
	uint16_t size, reserved;
	uint8_t val[SN_FLOW_FILTER_MAX], mask[SN_FLOW_FILTER_MAX];
} __attribute__((packed));

struct sn_create_flow_req {
	uint32_t qp, type; /* type: ibv_flow_attr_type */
	uint16_t priority;
	uint8_t port, num_specs;
	uint32_t flags;
	struct sn_flow_spec specs[SN_MAX_FLOW_SPECS];
} __attribute__((packed));

/*
 * create_rss_qp: an RSS QP (ibv_create_qp_ex with rx_hash_conf and an
 * indirection table). A receive work queue (ibv_create_wq) is a raw
 * packet QP that only receives, made by create_qp; the table is 1 <<
 * log_size of their handles. function is ibv_rx_hash_function_flags,
 * fields ibv_rx_hash_fields. The reply's rings (one entry each way) take
 * no work: the QP stays in RESET, and its flows deliver to the table.
 */
#define SN_MAX_RSS_TABLE_LOG 6
#define SN_MAX_RSS_TABLE 64 /* 1 << SN_MAX_RSS_TABLE_LOG */
#define SN_RSS_KEY_LEN 40
struct sn_create_rss_qp_req {
	uint32_t pd, cq, log_size, function;
	uint64_t fields, user_handle;
	uint8_t key[SN_RSS_KEY_LEN];
	uint32_t wqs[SN_MAX_RSS_TABLE];
} __attribute__((packed));

struct sn_reg_mr_req {
	uint32_t pd, access;
	uint64_t addr, length;
} __attribute__((packed));

struct sn_reg_mr_reply {
	uint32_t handle, lkey, rkey;
} __attribute__((packed));

/* rereg_mr: ibv_rereg_mr's flags (enum ibv_rereg_mr_flags) on region
 * handle; pd, access and addr/length count only where flags say. */
struct sn_rereg_mr_req {
	uint32_t handle, flags, pd, access;
	uint64_t addr, length;
} __attribute__((packed));

/* The on-demand paging capabilities softnic has (ibv_odp_caps, with
 * libibverbs' bit values): general IBV_ODP_SUPPORT and _IMPLICIT; RC
 * SEND, RECV, WRITE, READ, ATOMIC, SRQ_RECV; UC SEND, RECV, WRITE,
 * SRQ_RECV; UD SEND, RECV, SRQ_RECV. */
enum { SN_ODP_GENERAL = 0x3, SN_ODP_RC = 0x3f, SN_ODP_UC = 0x27, SN_ODP_UD = 0x23 };
/* Device memory: what every session of a device shares, as a NIC's
 * on-chip memory (query_device_ex's max_dm_size). */
#define SN_MAX_DM_SIZE (256u << 10)
#define SN_DM_MAX_LOG_ALIGN 12 /* each DM is a mapping of its own: page aligned */

struct sn_alloc_dm_req {
	uint64_t length;
	uint32_t log_align, reserved;
} __attribute__((packed));

/* A DM region is zero-based: SGEs and peers name offsets from offset. */
struct sn_reg_dm_mr_req {
	uint32_t pd, dm, access, reserved;
	uint64_t offset, length;
} __attribute__((packed));

/* query_mr: what ibv_import_mr fills in (the kernel's QUERY_MR gives the
 * keys and length), with the region's PD and its rights (libibverbs'
 * access flags, ZERO_BASED for a DM region). */
struct sn_query_mr_reply {
	uint32_t pd, lkey, rkey, access;
	uint64_t length;
} __attribute__((packed));

/* query_dm: the allocation's length as alloc_dm was asked (the memfd it
 * passes maps it in whole pages). */
struct sn_query_dm_reply {
	uint64_t length;
} __attribute__((packed));

/* alloc_mw: a memory window of type 1 or 2 (ibv_mw_type) in the PD. */
struct sn_alloc_mw_req {
	uint32_t pd, type;
} __attribute__((packed));

struct sn_alloc_mw_reply {
	uint32_t handle, rkey;
} __attribute__((packed));

struct sn_create_cq_req {
	uint32_t entries, channel;
	uint64_t user_handle;
} __attribute__((packed));

struct sn_create_cq_reply {
	uint32_t handle, depth;
} __attribute__((packed));

/* resize_cq: the CQ's completions move to a new ring of depth entries (a
 * power of two, at least entries and at least the completions it holds),
 * which comes with the reply; the old ring is written no more. */
struct sn_resize_cq_req {
	uint32_t handle, entries;
} __attribute__((packed));

struct sn_resize_cq_reply {
	uint32_t depth;
} __attribute__((packed));

/* QP types of create_qp: RC 0, UC 1, UD 2, raw packet 3, XRC send 4, XRC
 * receive 5 (made by create_xrc_qp); not libibverbs' numbers. */
enum { SN_QPT_RC, SN_QPT_UC, SN_QPT_UD, SN_QPT_RAW_PACKET, SN_QPT_XRC_SEND, SN_QPT_XRC_RECV };

struct sn_create_qp_req {
	uint32_t pd, type, send_cq, recv_cq, srq;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
	uint64_t user_handle;
} __attribute__((packed));

struct sn_create_qp_reply {
	uint32_t handle, qpn, sq_depth, sq_stride;
	uint32_t rq_offset, rq_depth, rq_stride;
	uint32_t max_send_sge, max_recv_sge, max_inline;
} __attribute__((packed));

/* modify_qp: struct ibv_qp_attr's fields softnic uses, libibverbs' mask
 * bits and values. */
struct sn_modify_qp_req {
	uint32_t handle, mask;
	uint8_t state, cur_state, path_mtu, port;
	uint8_t timeout, retry_cnt, rnr_retry, min_rnr;
	uint8_t max_rd_atomic, max_dest_rd_atomic;
	uint8_t sgid_index, hop_limit, traffic_class;
	uint8_t reserved[3];
	uint16_t pkey_index, reserved2;
	uint32_t access, qkey, dest_qpn, rq_psn, sq_psn, flow_label;
	uint8_t dgid[16];
} __attribute__((packed));

struct sn_create_ah_req {
	uint32_t pd;
	uint8_t port, sgid_index, hop_limit, traffic_class, sl;
	uint8_t reserved[3];
	uint32_t flow_label;
	uint8_t dgid[16];
} __attribute__((packed));

struct sn_query_port_reply {
	uint8_t state, max_mtu, active_mtu, link_layer;
	uint32_t gid_table_len, pkey_table_len, link_mtu, max_msg_size;
} __attribute__((packed));

struct sn_create_srq_req {
	uint32_t pd, max_wr, max_sge, limit;
	uint64_t user_handle;
} __attribute__((packed));

struct sn_create_srq_reply {
	uint32_t handle, depth, stride;
} __attribute__((packed));

struct sn_modify_srq_req {
	uint32_t handle, limit;
} __attribute__((packed));

/* Tag matching (IBV_SRQT_TM): the device's tm_caps, with IBV_TM_CAP_RC. */
#define SN_TM_MAX_NUM_TAGS 1023
#define SN_TM_MAX_OPS 1024
#define SN_TM_MAX_SGE 1
#define SN_TM_MAX_RNDV_HDR_SIZE 64

/* create_tm_srq: create_srq's fields, the CQ (a handle of the session)
 * that takes the SRQ's completions, and its matching list's size. */
struct sn_create_tm_srq_req {
	uint32_t pd, max_wr, max_sge, limit, cq, max_num_tags, max_ops, reserved;
	uint64_t user_handle;
} __attribute__((packed));

/* post_srq_op: one ibv_ops_wr (opcode ibv_ops_wr_opcode, flags
 * ibv_ops_flags); ADD's buffer is num_sge (0 or 1) SGEs at sge. */
struct sn_srq_op_req {
	uint32_t srq;
	uint8_t opcode, flags, num_sge, reserved;
	uint32_t unexpected_cnt, handle;
	uint64_t wr_id, recv_wr_id, tag, mask;
	uint64_t sge_addr;
	uint32_t sge_length, sge_lkey;
} __attribute__((packed));

/*
 * open_xrcd: ibv_xrcd_init_attr's oflags (O_CREAT, O_EXCL; open(2)'s
 * values). With has_fd, the file's descriptor comes with the request and
 * XRCDs opened on the same file (device and inode) are one domain, in
 * every session of the daemon; without it the domain is private.
 */
struct sn_open_xrcd_req {
	uint32_t oflags, has_fd;
} __attribute__((packed));

/* create_xrc_srq: an SRQ of the XRCD, its completions in cq; keys of RDMA
 * on the XRC receive QPs are checked against srq.pd. */
struct sn_create_xrc_srq_req {
	struct sn_create_srq_req srq;
	uint32_t xrcd, cq;
} __attribute__((packed));

struct sn_create_xrc_srq_reply {
	uint32_t handle, depth, stride, srq_num;
} __attribute__((packed));

/*
 * create_xrc_qp and open_qp: an XRC receive QP of the XRCD, a new one
 * (qpn 0) or the domain's QP qpn that some session made. The reply's ring
 * is a send queue of one entry that takes no posts: its header's state
 * word shows the QP's state as last modified through this handle.
 */
struct sn_xrc_qp_req {
	uint32_t xrcd, qpn;
	uint64_t user_handle;
} __attribute__((packed));

/* The connection manager's bodies. Addresses are IPv6, IPv4 ones mapped
 * (::ffff:a.b.c.d), all zero for none; ports are numbers, not network
 * order. */
struct sn_cm_create_id_req {
	uint32_t channel, port_space;
	uint64_t user_handle;
} __attribute__((packed));

struct sn_cm_bind_req {
	uint32_t id;
	uint16_t port, reserved;
	uint8_t addr[16];
} __attribute__((packed));

struct sn_cm_addr_reply {
	uint16_t local_port, peer_port;
	uint8_t local[16], peer[16];
} __attribute__((packed));

struct sn_cm_resolve_addr_req {
	uint32_t id, timeout_ms;
	uint16_t dst_port, reserved;
	uint8_t src[16], dst[16];
} __attribute__((packed));

struct sn_cm_id_timeout_req {
	uint32_t id, timeout_ms; /* cm_resolve_route; cm_listen's backlog */
} __attribute__((packed));

struct sn_cm_set_option_req {
	uint32_t id, option, value; /* option: RDMA_OPTION_ID_TOS 0, RDMA_OPTION_ID_ACK_TIMEOUT 3 */
} __attribute__((packed));

struct sn_cm_migrate_req {
	uint32_t id, channel;
} __attribute__((packed));

struct sn_cm_create_qp_req {
	uint32_t id, reserved;
	struct sn_create_qp_req qp;
} __attribute__((packed));

#define SN_CM_PRIVATE_MAX 224

struct sn_cm_conn_param {
	uint32_t id;
	uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count;
	uint32_t private_len;
	uint8_t private_data[SN_CM_PRIVATE_MAX];
	uint32_t qp_num; /* the program's own QP, for an ID without one */
} __attribute__((packed));

/*
 * cm_join_mcast and cm_leave_mcast: an ID, rdma_join_multicast_ex's
 * join_flags (RDMA_MC_JOIN_FLAG_*), the group's address. The
 * MULTICAST_JOIN event gives the group as its peer address (port 0) and
 * the group's QPN (0xFFFFFF), Q_Key, source GID index and hop limit; the
 * group's GID is its address, as an IPv4 one is mapped.
 */
struct sn_cm_mcast_req {
	uint32_t id, flags;
	uint8_t addr[16];
} __attribute__((packed));

/* share_memory: a memfd mapped at addr for length bytes comes with it. */
struct sn_share_memory_req {
	uint64_t addr, length;
} __attribute__((packed));

/* cm_init_qp_attr: the reply is a struct sn_modify_qp_req (handle 0). */
struct sn_cm_init_qp_attr_req {
	uint32_t id, state;
} __attribute__((packed));

struct sn_cm_event {
	uint32_t type;
	int32_t status;
	uint32_t id, listen;
	uint64_t user_handle;
	uint16_t local_port, peer_port;
	uint8_t local[16], peer[16];
	uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count;
	uint16_t reason, private_len;
	uint8_t private_data[SN_CM_PRIVATE_MAX];
	/* A UD ID's ESTABLISHED: the peer's QP and Q_Key, and the address
	 * vector's source GID index and hop limit (its GID is peer's). */
	uint32_t qpn, qkey;
	uint8_t sgid_index, hop_limit;
	uint16_t reserved;
} __attribute__((packed));

/* The sizes Go's encoding/binary gives the same bodies. */
_Static_assert(sizeof(struct sn_header) == SN_HEADER_LEN, "header");
_Static_assert(sizeof(struct sn_hello_reply) == 40, "hello reply");
_Static_assert(sizeof(struct sn_reg_mr_req) == 24, "reg_mr request");
_Static_assert(sizeof(struct sn_rereg_mr_req) == 32, "rereg_mr request");
_Static_assert(sizeof(struct sn_mcast_req) == 24, "attach_mcast request");
_Static_assert(sizeof(struct sn_flow_spec) == 88, "flow spec");
_Static_assert(sizeof(struct sn_create_flow_req) == 720, "create_flow request");
_Static_assert(SN_OP_CREATE_FLOW == 70 && SN_OP_DESTROY_FLOW == 71 && SN_OP_CREATE_RSS_QP == 72, "flow op numbers");
_Static_assert(sizeof(struct sn_create_rss_qp_req) == 328, "create_rss_qp request");
_Static_assert(SN_OP_ATTACH_MCAST == 55 && SN_OP_DETACH_MCAST == 56 && SN_OP_CM_JOIN_MCAST == 57 &&
		       SN_OP_CM_LEAVE_MCAST == 58,
	       "multicast op numbers");
_Static_assert(sizeof(struct sn_cm_mcast_req) == 24, "cm_join_mcast request");
_Static_assert(sizeof(struct sn_create_qp_req) == 48, "create_qp request");
_Static_assert(sizeof(struct sn_create_qp_reply) == 40, "create_qp reply");
_Static_assert(sizeof(struct sn_modify_qp_req) == 68, "modify_qp request");
_Static_assert(sizeof(struct sn_create_ah_req) == 32, "create_ah request");
_Static_assert(sizeof(struct sn_query_port_reply) == 20, "query_port reply");
_Static_assert(sizeof(struct sn_create_srq_req) == 24, "create_srq request");
_Static_assert(sizeof(struct sn_create_tm_srq_req) == 40, "create_tm_srq request");
_Static_assert(sizeof(struct sn_srq_op_req) == 64, "post_srq_op request");
_Static_assert(sizeof(struct sn_cm_create_id_req) == 16, "cm_create_id request");
_Static_assert(sizeof(struct sn_cm_bind_req) == 24, "cm_bind request");
_Static_assert(sizeof(struct sn_cm_addr_reply) == 36, "CM addresses reply");
_Static_assert(sizeof(struct sn_cm_resolve_addr_req) == 44, "cm_resolve_addr request");
_Static_assert(sizeof(struct sn_cm_create_qp_req) == 56, "cm_create_qp request");
_Static_assert(sizeof(struct sn_cm_conn_param) == 240, "CM connection parameters");
_Static_assert(sizeof(struct sn_share_memory_req) == 16, "share_memory request");
_Static_assert(sizeof(struct sn_cm_event) == 304, "CM event");
_Static_assert(sizeof(struct sn_resize_cq_req) == 8, "resize_cq request");
_Static_assert(sizeof(struct sn_open_xrcd_req) == 8, "open_xrcd request");
_Static_assert(sizeof(struct sn_create_xrc_srq_req) == 32, "create_xrc_srq request");
_Static_assert(sizeof(struct sn_create_xrc_srq_reply) == 16, "create_xrc_srq reply");
_Static_assert(sizeof(struct sn_xrc_qp_req) == 16, "XRC QP request");

/* Shared memory: every ring is a 4096-byte header and its entries. */
#define SN_RING_HEADER 4096
#define SN_PAGE_SIZE 4096

/* Work queue header words. */
#define SN_WQ_PRODUCER 0 /* client, release */
#define SN_WQ_CONSUMER 64 /* daemon, release */
#define SN_WQ_STATE 128 /* daemon: the QP's ibv_qp_state */

/* Completion queue header words. */
#define SN_CQ_CONSUMER 0 /* client, release */
#define SN_CQ_ARMED 64 /* client sets, daemon clears */
#define SN_CQ_OVERRUN 128 /* daemon */
#define SN_CQ_OPTIONS 192 /* client, before a QP uses the CQ: SN_CQ_TIMESTAMPS */
#define SN_CQ_TIMESTAMPS 1 /* stamp each entry's timestamp */
#define SN_CQ_ENTRY 64

enum { SN_ARM_NONE, SN_ARM_NEXT, SN_ARM_SOLICITED };

/* Session page words. */
#define SN_PAGE_DOORBELL 0 /* client: incremented after any post */
#define SN_PAGE_SLEEPING 64 /* daemon: 1 while its engines sleep */

/* A send queue entry; its SGEs or inline bytes follow at offset 64.
 * LOCAL_INV and SEND_WITH_INV carry the rkey to invalidate in imm (host
 * order). BIND_MW carries no SGE: remote_addr and compare_add are the
 * window's address and length, rkey its new rkey (the window's key index
 * and the key chosen), imm the region's lkey, swap the access flags. */
struct sn_send_entry {
	uint64_t wr_id;
	uint8_t opcode; /* ibv_wr_opcode */
	uint8_t flags; /* ibv_send_flags: FENCE, SIGNALED, SOLICITED, INLINE */
	uint16_t count; /* SGEs, or inline bytes with INLINE */
	uint32_t imm; /* network order as in ibv_send_wr, or the rkey to invalidate */
	uint64_t remote_addr;
	uint32_t rkey, reserved;
	/* ATOMIC_WRITE: compare_add holds the 8 bytes to write as they lie in
	 * memory. FLUSH: compare_add the length, swap's first two bytes the
	 * placement type and the selectivity level. */
	uint64_t compare_add, swap;
	uint32_t ah, remote_qpn, remote_qkey;
	uint32_t remote_srqn; /* XRC send QPs: ibv_send_wr.qp_type.xrc.remote_srqn */
} __attribute__((packed));

struct sn_sge {
	uint64_t addr;
	uint32_t length, lkey;
} __attribute__((packed));

/* advise_mr: ibv_advise_mr's advice (enum ibv_advise_mr_advice), flags
 * (IBV_ADVISE_MR_FLAG_FLUSH) and the first count of its SGEs; a list
 * longer than SN_ADVISE_SGES takes several requests. */
#define SN_ADVISE_SGES 32
struct sn_advise_mr_req {
	uint32_t pd, advice, flags, count;
	struct sn_sge sge[SN_ADVISE_SGES];
} __attribute__((packed));
_Static_assert(sizeof(struct sn_advise_mr_req) == 16 + 16 * SN_ADVISE_SGES, "advise_mr request");

/* A receive queue entry; its SGEs follow at offset 16. */
struct sn_recv_entry {
	uint64_t wr_id;
	uint32_t count, reserved;
} __attribute__((packed));

/* A completion queue entry; sequence is written last (release). */
struct sn_cq_entry {
	uint64_t wr_id;
	uint32_t sequence; /* the entry's index + 1 */
	uint8_t status, opcode, flags, sl; /* sl: a UD receive's RoCE packet type, 2 IPv4, 1 IPv6 (mlx5's) */
	uint32_t byte_len;
	uint32_t imm; /* network order, or the invalidated rkey */
	uint32_t qpn, src_qp;
	uint16_t pkey_index, slid;
	uint8_t dlid_path_bits, network_type;
	/* The client's: set on a written entry it has not consumed, that its
	 * QP's move to RESET dropped (as libmlx5's mlx5_cq_clean); polls
	 * step over it. The daemon never reads an entry back. */
	uint8_t discarded;
	uint8_t reserved;
	uint64_t timestamp; /* ns of CLOCK_REALTIME when the engine made the completion */
	uint64_t tm_tag; /* a tag matching receive's tag (ibv_wc_tm_info) */
	uint32_t tm_priv; /* and the TM header's app_ctx */
	uint32_t reserved2;
} __attribute__((packed));

_Static_assert(sizeof(struct sn_send_entry) == 64, "send entry header");
_Static_assert(sizeof(struct sn_recv_entry) == 16, "receive entry header");
_Static_assert(sizeof(struct sn_cq_entry) == SN_CQ_ENTRY, "completion entry");

#endif
