//go:build ignore

// The layouts' Go side, as declarations of C's: layoutgen writes
// ztypes_hostif.go from this file and provider/hostif.h, each C reference
// replaced by what the C compiler makes of it (a struct's fields with Go
// names, a constant's value, a struct's fields' offsets, an enum's
// enumerators' names by value). Edit this file or the header, then go
// generate ./hostif (make generate).

package hostif

/*
#include "hostif.h"
#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
*/
import "C"

// Version is the host interface version this package speaks.
const Version = C.SN_VERSION

// HeaderLen is the size of a control message's header.
const HeaderLen = C.SN_HEADER_LEN

// MaxMessage is the largest control message either side sends.
const MaxMessage = C.SN_MAX_MESSAGE

// MaxDMSize is a device's memory (ibv_alloc_dm), over all its sessions;
// DMMaxLogAlign the largest alignment an allocation may ask.
const (
	MaxDMSize     = C.SN_MAX_DM_SIZE
	DMMaxLogAlign = C.SN_DM_MAX_LOG_ALIGN
)

// MaxMcastGroups and MaxMcastQPAttach are a device's multicast limits
// (max_mcast_grp, max_mcast_qp_attach), which the C provider reports and
// the engine (package ibv's) enforces.
const (
	MaxMcastGroups   = C.SN_MAX_MCAST_GROUPS
	MaxMcastQPAttach = C.SN_MAX_MCAST_QP_ATTACH
	// MaxFlowSpecs and FlowFilterMax bound a create_flow request's specs.
	MaxFlowSpecs  = C.SN_MAX_FLOW_SPECS
	FlowFilterMax = C.SN_FLOW_FILTER_MAX
	// MaxRSSTableLog bounds an RSS QP's table (1 << log entries).
	MaxRSSTableLog = C.SN_MAX_RSS_TABLE_LOG
	RSSKeyLen      = C.SN_RSS_KEY_LEN
)

// Tag matching's device limits (tm_caps), which the C provider reports
// and the engine (package ibv's) enforces.
const (
	TMMaxNumTags     = C.SN_TM_MAX_NUM_TAGS
	TMMaxOps         = C.SN_TM_MAX_OPS
	TMMaxSGE         = C.SN_TM_MAX_SGE
	TMMaxRndvHdrSize = C.SN_TM_MAX_RNDV_HDR_SIZE
)

// Control commands: the op of a message's header.
const (
	OpHello             Op = C.SN_OP_HELLO
	OpAllocPD           Op = C.SN_OP_ALLOC_PD
	OpDeallocPD         Op = C.SN_OP_DEALLOC_PD
	OpRegMR             Op = C.SN_OP_REG_MR
	OpDeregMR           Op = C.SN_OP_DEREG_MR
	OpCreateCompChannel Op = C.SN_OP_CREATE_COMP_CHANNEL
	OpCreateCQ          Op = C.SN_OP_CREATE_CQ
	OpDestroyCQ         Op = C.SN_OP_DESTROY_CQ
	OpCreateQP          Op = C.SN_OP_CREATE_QP
	OpModifyQP          Op = C.SN_OP_MODIFY_QP
	OpDestroyQP         Op = C.SN_OP_DESTROY_QP
	OpCreateAH          Op = C.SN_OP_CREATE_AH
	OpDestroyAH         Op = C.SN_OP_DESTROY_AH
	OpQueryPort         Op = C.SN_OP_QUERY_PORT
	OpQueryGID          Op = C.SN_OP_QUERY_GID
	OpCreateSRQ         Op = C.SN_OP_CREATE_SRQ
	OpModifySRQ         Op = C.SN_OP_MODIFY_SRQ
	OpDestroySRQ        Op = C.SN_OP_DESTROY_SRQ
	OpQueryResources    Op = C.SN_OP_QUERY_RESOURCES
	// The connection manager (rdma_cm through the daemon: hostif/cm.go).
	OpCMCreateChannel Op = C.SN_OP_CM_CREATE_CHANNEL
	OpCMCreateID      Op = C.SN_OP_CM_CREATE_ID
	OpCMBind          Op = C.SN_OP_CM_BIND
	OpCMResolveAddr   Op = C.SN_OP_CM_RESOLVE_ADDR
	OpCMResolveRoute  Op = C.SN_OP_CM_RESOLVE_ROUTE
	OpCMCreateQP      Op = C.SN_OP_CM_CREATE_QP
	OpCMConnect       Op = C.SN_OP_CM_CONNECT
	OpCMListen        Op = C.SN_OP_CM_LISTEN
	OpCMAccept        Op = C.SN_OP_CM_ACCEPT
	OpCMReject        Op = C.SN_OP_CM_REJECT
	OpCMDisconnect    Op = C.SN_OP_CM_DISCONNECT
	OpCMDestroyID     Op = C.SN_OP_CM_DESTROY_ID
	OpCMGetEvent      Op = C.SN_OP_CM_GET_EVENT
	OpCMQueryAddr     Op = C.SN_OP_CM_QUERY_ADDR
	OpCMDetachQP      Op = C.SN_OP_CM_DETACH_QP
	// Memory the client shares with the daemon by descriptor (a sealed
	// memfd): regions inside it are reached without reads or writes of
	// the client's /proc/self/mem.
	OpShareMemory   Op = C.SN_OP_SHARE_MEMORY
	OpUnshareMemory Op = C.SN_OP_UNSHARE_MEMORY
	// The device's and its QPs' counters (hostif/counters.go).
	OpQueryCounters Op = C.SN_OP_QUERY_COUNTERS
	// An rdma_cm ID's option (rdma_set_option; hostif/cm.go).
	OpCMSetOption Op = C.SN_OP_CM_SET_OPTION
	// An rdma_cm ID's events to another channel (rdma_migrate_id).
	OpCMMigrateID Op = C.SN_OP_CM_MIGRATE_ID
	// The attributes that move a QP the program made through the states
	// of an ID's connection (rdma_init_qp_attr), and the RTU that ends an
	// active side's exchange once that QP is ready (rdma_establish).
	OpCMInitQPAttr Op = C.SN_OP_CM_INIT_QP_ATTR
	OpCMEstablish  Op = C.SN_OP_CM_ESTABLISH
	// The device's rdma_cm IDs, for monitors (softnic stat res cm_id).
	OpQueryCMIDs Op = C.SN_OP_QUERY_CM_IDS
	// Destroying the channels: completion channels and rdma_cm event
	// channels hold a descriptor of the daemon's each.
	OpDestroyCompChannel Op = C.SN_OP_DESTROY_COMP_CHANNEL
	OpCMDestroyChannel   Op = C.SN_OP_CM_DESTROY_CHANNEL
	// On-demand paging's prefetch (ibv_advise_mr) and ibv_rereg_mr.
	OpAdviseMR Op = C.SN_OP_ADVISE_MR
	OpReregMR  Op = C.SN_OP_REREG_MR
	OpResizeCQ Op = C.SN_OP_RESIZE_CQ
	// Device memory.
	OpAllocDM Op = C.SN_OP_ALLOC_DM
	OpFreeDM  Op = C.SN_OP_FREE_DM
	OpRegDMMR Op = C.SN_OP_REG_DM_MR
	// Memory windows (ibv_alloc_mw, ibv_dealloc_mw); binds are send
	// entries (BIND_MW).
	OpAllocMW   Op = C.SN_OP_ALLOC_MW
	OpDeallocMW Op = C.SN_OP_DEALLOC_MW
	// A UD QP's multicast groups (ibv_attach_mcast, ibv_detach_mcast).
	OpAttachMcast Op = C.SN_OP_ATTACH_MCAST
	OpDetachMcast Op = C.SN_OP_DETACH_MCAST
	// An rdma_cm ID's multicast groups (rdma_join_multicast,
	// rdma_leave_multicast).
	OpCMJoinMcast  Op = C.SN_OP_CM_JOIN_MCAST
	OpCMLeaveMcast Op = C.SN_OP_CM_LEAVE_MCAST
	// What a second context of the session (ibv_import_device) asks
	// about the handles it imports.
	OpQueryPD Op = C.SN_OP_QUERY_PD
	OpQueryMR Op = C.SN_OP_QUERY_MR
	OpQueryDM Op = C.SN_OP_QUERY_DM
	// Tag matching SRQs (ibv_create_srq_ex with IBV_SRQT_TM,
	// ibv_post_srq_ops).
	OpCreateTMSRQ Op = C.SN_OP_CREATE_TM_SRQ
	OpPostSRQOp   Op = C.SN_OP_POST_SRQ_OP
	// Flow steering to raw packet QPs (ibv_create_flow, ibv_destroy_flow).
	OpCreateFlow  Op = C.SN_OP_CREATE_FLOW
	OpDestroyFlow Op = C.SN_OP_DESTROY_FLOW
	// An RSS QP over receive work queues (raw packet QPs).
	OpCreateRSSQP Op = C.SN_OP_CREATE_RSS_QP
	// XRC: domains, their SRQs and receive QPs.
	OpOpenXRCD     Op = C.SN_OP_OPEN_XRCD
	OpCloseXRCD    Op = C.SN_OP_CLOSE_XRCD
	OpCreateXRCSRQ Op = C.SN_OP_CREATE_XRC_SRQ
	OpCreateXRCQP  Op = C.SN_OP_CREATE_XRC_QP
	OpOpenQP       Op = C.SN_OP_OPEN_QP
)

// AdviseSGEs is how many SGEs one advise_mr request carries.
const AdviseSGEs = C.SN_ADVISE_SGES

// The on-demand paging capabilities (ibv_odp_caps) softnic reports.
const (
	ODPGeneral = C.SN_ODP_GENERAL
	ODPRC      = C.SN_ODP_RC
	ODPUC      = C.SN_ODP_UC
	ODPUD      = C.SN_ODP_UD
)

// opNames are the commands' names for Op's String: enum sn_op's, SN_OP_
// dropped, in lower case.
var opNames = C.names_enum_sn_op

// The descriptors a hello request passes, in this order: the client's
// /proc/self/mem and /proc/self/maps, HelloFDs of them.
const (
	HelloMemFD  = C.SN_HELLO_MEM_FD
	HelloMapsFD = C.SN_HELLO_MAPS_FD
	HelloFDs    = C.SN_HELLO_FDS
)

// Header starts every control message: Length counts header and body,
// Status is a reply's, 0 or a negative errno.
type Header C.struct_sn_header

// The header's fields, where Encode and DecodeHeader put them.
const offHeader = C.offsetof_struct_sn_header

// Bodies of the requests and replies: fixed-size little-endian fields in
// the order given, no padding. Handles are per session; 0 is none.
type (
	HelloReply    C.struct_sn_hello_reply
	HandleRequest C.struct_sn_handle
	HandleReply   C.struct_sn_handle
	RegMRRequest  C.struct_sn_reg_mr_req
	RegMRReply    C.struct_sn_reg_mr_reply
	// AdviseMRRequest is ibv_advise_mr's arguments, Count of its SGEs.
	AdviseMRRequest C.struct_sn_advise_mr_req
	// AdviseSGE is one range of an advise: an ibv_sge.
	AdviseSGE C.struct_sn_sge
	// ReregMRRequest is ibv_rereg_mr's; its reply is a RegMRReply.
	ReregMRRequest C.struct_sn_rereg_mr_req
	// AllocDMRequest asks for device memory (ibv_alloc_dm); the reply
	// carries its memfd.
	AllocDMRequest C.struct_sn_alloc_dm_req
	// RegDMMRRequest registers a range of device memory, zero-based.
	RegDMMRRequest C.struct_sn_reg_dm_mr_req
	// McastRequest names a QP and a group (attach_mcast, detach_mcast).
	McastRequest C.struct_sn_mcast_req
	// FlowSpec is one spec of a flow: its libibverbs filter's bytes.
	FlowSpec C.struct_sn_flow_spec
	// CreateFlowRequest is a raw packet QP's flow (create_flow).
	CreateFlowRequest C.struct_sn_create_flow_req
	// CreateRSSQPRequest is an RSS QP (create_rss_qp).
	CreateRSSQPRequest C.struct_sn_create_rss_qp_req
	// ShareMemoryRequest comes with one descriptor, a memfd: Length bytes
	// of it from offset 0 are mapped at Addr in the client.
	ShareMemoryRequest C.struct_sn_share_memory_req
	CreateCQRequest    C.struct_sn_create_cq_req
	CreateCQReply      C.struct_sn_create_cq_reply
	ResizeCQRequest    C.struct_sn_resize_cq_req
	ResizeCQReply      C.struct_sn_resize_cq_reply
	CreateQPRequest    C.struct_sn_create_qp_req
	CreateQPReply      C.struct_sn_create_qp_reply
	// ModifyQPRequest carries struct ibv_qp_attr's fields that softnic
	// uses, with libibverbs' mask bits and values.
	ModifyQPRequest C.struct_sn_modify_qp_req
	// CreateAHRequest carries struct ibv_ah_attr's global route.
	CreateAHRequest C.struct_sn_create_ah_req
	// QueryPortReply carries struct ibv_port_attr's fields, with
	// libibverbs' values (state 4 is ACTIVE, link layer 2 Ethernet).
	QueryPortReply     C.struct_sn_query_port_reply
	CreateSRQRequest   C.struct_sn_create_srq_req
	CreateTMSRQRequest C.struct_sn_create_tm_srq_req
	SRQOpRequest       C.struct_sn_srq_op_req
	CreateSRQReply     C.struct_sn_create_srq_reply
	ModifySRQRequest   C.struct_sn_modify_srq_req
	AllocMWRequest     C.struct_sn_alloc_mw_req
	AllocMWReply       C.struct_sn_alloc_mw_reply
	// QueryMRReply is what ibv_import_mr learns of a region.
	QueryMRReply C.struct_sn_query_mr_reply
	// QueryDMReply comes with the allocation's memfd.
	QueryDMReply C.struct_sn_query_dm_reply
	// OpenXRCDRequest comes with the domain's file when HasFD is set.
	OpenXRCDRequest     C.struct_sn_open_xrcd_req
	CreateXRCSRQRequest C.struct_sn_create_xrc_srq_req
	CreateXRCSRQReply   C.struct_sn_create_xrc_srq_reply
	XRCQPRequest        C.struct_sn_xrc_qp_req
)

// Bodies of the connection manager's commands (rdma_cm through the
// daemon, as the kernel's rdma_ucm serves librdmacm): the daemon runs the
// IDs, the client drives them and takes their events with cm_get_event
// when its channel's pipe is readable. Addresses are IPv6, IPv4 ones
// mapped (::ffff:a.b.c.d); all zero is none.
type (
	// CMCreateIDRequest creates an ID whose events go to Channel, in
	// PortSpace (RDMA_PS_TCP, 0x0106); UserHandle comes back in its
	// events.
	CMCreateIDRequest C.struct_sn_cm_create_id_req
	// CMAddrRequest binds ID to Addr and Port (cm_bind).
	CMAddrRequest C.struct_sn_cm_bind_req
	// CMAddrReply is an ID's local and peer address and port.
	CMAddrReply C.struct_sn_cm_addr_reply
	// CMResolveAddrRequest resolves Dst from Src (none: the ID's bound
	// address or the route's) within TimeoutMS.
	CMResolveAddrRequest  C.struct_sn_cm_resolve_addr_req
	CMResolveRouteRequest C.struct_sn_cm_id_timeout_req
	// CMCreateQPRequest creates the ID's QP as create_qp does and moves
	// it to INIT; the reply is create_qp's, with the ring's descriptor.
	CMCreateQPRequest C.struct_sn_cm_create_qp_req
	// CMConnParam is struct rdma_conn_param for cm_connect, cm_accept and
	// cm_reject (which uses the private data only). QPNum names the
	// session's QP of an ID that has none (rdma_conn_param.qp_num).
	CMConnParam C.struct_sn_cm_conn_param
	// CMInitQPAttrRequest asks for the attributes that move a QP of ID's
	// connection to State (ibv_qp_state: INIT, RTR or RTS); the reply is
	// a ModifyQPRequest body whose Handle is 0.
	CMInitQPAttrRequest C.struct_sn_cm_init_qp_attr_req
	CMListenRequest     C.struct_sn_cm_id_timeout_req
	// CMSetOptionRequest sets an ID's option (rdma_set_option at level
	// RDMA_OPTION_ID): Option 0 the traffic class, 3 the ACK timeout.
	CMSetOptionRequest C.struct_sn_cm_set_option_req
	// CMMcastRequest joins or leaves an ID's multicast group.
	CMMcastRequest C.struct_sn_cm_mcast_req
	// CMMigrateRequest sends ID's events to Channel from now on, those
	// not yet taken too (rdma_migrate_id).
	CMMigrateRequest C.struct_sn_cm_migrate_req
	// CMEvent is one event (struct rdma_cm_event): Type is librdmacm's
	// event number, Status 0 or a negative errno, ID the ID it is about
	// (for CONNECT_REQUEST the new ID, the request's, and Listen the
	// listening ID), UserHandle the ID's (the listener's for a new ID).
	// Local and Peer are the ID's addresses after the event; the
	// parameters and private data are what the peer sent, Reason a REJ's
	// reason (a SIDR_REP's status for a UD ID). For a UD ID's
	// ESTABLISHED, QPN and QKey are the peer's QP and Q_Key, SGIDIndex
	// and HopLimit the address vector's (whose GID is Peer's).
	CMEvent C.struct_sn_cm_event
)

// CMPrivateDataMax is the room for private data in the CM's bodies: more
// than any CM message carries (a DREQ's 220 bytes).
const CMPrivateDataMax = C.SN_CM_PRIVATE_MAX

// HeaderSize is the size of a ring's header, before its entries.
const HeaderSize = C.SN_RING_HEADER

// Header words: each on its own cache line, so that the two sides' stores do
// not contend.
const (
	offProducer = C.SN_WQ_PRODUCER // work queues: client
	offConsumer = C.SN_WQ_CONSUMER // work queues: daemon
	offState    = C.SN_WQ_STATE    // work queues: daemon
	offCQCons   = C.SN_CQ_CONSUMER // completion queues: client
	offArmed    = C.SN_CQ_ARMED    // completion queues: client sets, daemon clears
	offOverrun  = C.SN_CQ_OVERRUN  // completion queues: daemon
	offOptions  = C.SN_CQ_OPTIONS  // completion queues: client
)

// CQTimestamps in a completion queue's options asks the daemon to stamp
// each entry's timestamp.
const CQTimestamps = C.SN_CQ_TIMESTAMPS

// Armed values of a completion queue.
const (
	ArmNone      = C.SN_ARM_NONE
	ArmNext      = C.SN_ARM_NEXT
	ArmSolicited = C.SN_ARM_SOLICITED
)

// The session page: its size, and the words of its doorbell (the client
// increments it after any post) and the daemon's sleep (1 while its
// engines sleep).
const (
	SessionPageSize = C.SN_PAGE_SIZE
	PageDoorbell    = C.SN_PAGE_DOORBELL
	PageSleeping    = C.SN_PAGE_SLEEPING
)

// Send entry layout: a header of sendHeader bytes, then the SGEs (sgeSize
// bytes each) or the inline data.
const (
	sendHeader = C.sizeof_struct_sn_send_entry
	offSend    = C.offsetof_struct_sn_send_entry
	sgeSize    = C.sizeof_struct_sn_sge
	offSGE     = C.offsetof_struct_sn_sge
)

// Receive entry layout: a header of recvHeader bytes, then the SGEs.
const (
	recvHeader = C.sizeof_struct_sn_recv_entry
	offRecv    = C.offsetof_struct_sn_recv_entry
)

// CQEntrySize is the size of a completion queue entry.
const CQEntrySize = C.sizeof_struct_sn_cq_entry

// Completion entry layout.
const offCQ = C.offsetof_struct_sn_cq_entry

// AsyncEventLen is the size of an async event record: struct
// ib_uverbs_async_event_desc, which ibv_get_async_event reads.
const AsyncEventLen = C.sizeof_struct_ib_uverbs_async_event_desc

// The async events the daemon sends (docs/HOST-INTERFACE.md, "Events"):
// their types are libibverbs' enum ibv_event_type, which
// ibv_get_async_event returns as they are.
const (
	EventCQErr           uint32 = C.IBV_EVENT_CQ_ERR
	EventQPFatal         uint32 = C.IBV_EVENT_QP_FATAL
	EventCommEst         uint32 = C.IBV_EVENT_COMM_EST
	EventSQDrained       uint32 = C.IBV_EVENT_SQ_DRAINED
	EventPortActive      uint32 = C.IBV_EVENT_PORT_ACTIVE
	EventPortErr         uint32 = C.IBV_EVENT_PORT_ERR
	EventSRQLimitReached uint32 = C.IBV_EVENT_SRQ_LIMIT_REACHED
	EventQPLastWQE       uint32 = C.IBV_EVENT_QP_LAST_WQE_REACHED
	EventGIDChange       uint32 = C.IBV_EVENT_GID_CHANGE
)

// Async event record layout: u64 element (the user handle of the QP, CQ
// or SRQ, or the port number of a port's event), u32 event type, u32
// reserved.
const offAsync = C.offsetof_struct_ib_uverbs_async_event_desc
