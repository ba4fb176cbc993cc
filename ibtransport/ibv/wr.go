package ibv

import "fmt"

// WROpcode is the operation of a send work request (ibv_wr_opcode).
type WROpcode uint8

// Send work request opcodes.
const (
	WRSend WROpcode = iota
	WRSendWithImm
	WRSendWithInv
	WRRDMAWrite
	WRRDMAWriteWithImm
	WRRDMARead
	WRAtomicCmpAndSwp
	WRAtomicFetchAndAdd
	// WRLocalInv invalidates the type 2 memory window whose rkey is
	// InvalidateRKey, on the local device, in send queue order.
	WRLocalInv
	// WRBindMW binds a memory window (Bind), in send queue order.
	WRBindMW
	// IBTA 1.5 (RC only): an 8-byte write that is single-copy atomic at
	// the responder and executes after every earlier request, and a FLUSH
	// that makes what earlier requests placed in a range (or a whole
	// region) visible at the placement type asked for.
	WRAtomicWrite
	WRFlush
)

var wrOpcodeNames = [...]string{"SEND", "SEND_WITH_IMM", "SEND_WITH_INV", "RDMA_WRITE",
	"RDMA_WRITE_WITH_IMM", "RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "LOCAL_INV", "BIND_MW",
	"ATOMIC_WRITE", "FLUSH"}

func (o WROpcode) String() string { return nameOf(wrOpcodeNames[:], o, "WROpcode") }

// IsSend reports whether o is a SEND, with or without immediate data or
// invalidate.
func (o WROpcode) IsSend() bool { return o <= WRSendWithInv }

// IsWrite reports whether o is an RDMA WRITE, with or without immediate
// data.
func (o WROpcode) IsWrite() bool { return o == WRRDMAWrite || o == WRRDMAWriteWithImm }

// IsRead reports whether o is an RDMA READ.
func (o WROpcode) IsRead() bool { return o == WRRDMARead }

// IsAtomicWrite reports whether o is an ATOMIC_WRITE.
func (o WROpcode) IsAtomicWrite() bool { return o == WRAtomicWrite }

// IsFlush reports whether o is a FLUSH.
func (o WROpcode) IsFlush() bool { return o == WRFlush }

// IsAtomic reports whether o is an atomic operation that returns the
// word's original value (CMP_AND_SWP, FETCH_AND_ADD; not ATOMIC_WRITE).
func (o WROpcode) IsAtomic() bool {
	return o == WRAtomicCmpAndSwp || o == WRAtomicFetchAndAdd
}

// IsLocal reports whether o is executed by the local device with no
// packet (a bind or a local invalidation).
func (o WROpcode) IsLocal() bool { return o == WRLocalInv || o == WRBindMW }

// SendFlags modify a send work request (ibv_send_flags).
type SendFlags uint8

// Send flags.
const (
	// SendFence makes the request wait until all earlier requests completed.
	SendFence SendFlags = 1 << iota
	// SendSignaled asks for a completion on success (errors always complete).
	SendSignaled
	// SendSolicited sets the solicited event bit on the last packet.
	SendSolicited
	// SendInline sends InlineData, copied at post time, instead of the SGL.
	SendInline
)

// SGE is one scatter/gather element: Length bytes at virtual address Addr of
// the memory region whose local key is LKey (ibv_sge).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request (ibv_send_wr). Fields unused by the opcode
// are ignored.
type SendWR struct {
	ID     uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	// InlineData is the payload when Flags has SendInline; it is copied by
	// PostSend, so the caller may reuse it at once.
	InlineData []byte
	// Imm is the immediate data of the _WITH_IMM opcodes, as the 32-bit
	// value carried big-endian on the wire.
	Imm uint32
	// InvalidateRKey is the remote key SEND_WITH_INV or LOCAL_INV
	// invalidates.
	InvalidateRKey uint32
	// Bind is what a BIND_MW binds.
	Bind MWBind
	// RemoteAddr and RKey address the remote memory of RDMA and atomic
	// operations.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare value of CMP_AND_SWP or the addend of
	// FETCH_AND_ADD; Swap is the swap value of CMP_AND_SWP.
	CompareAdd uint64
	Swap       uint64
	// AtomicWrite is the 8 bytes WRAtomicWrite writes at RemoteAddr, as
	// they lie in memory (the wire and the responder take them unchanged,
	// as libibverbs' ibv_wr_atomic_write takes a pointer to them).
	AtomicWrite [8]byte
	// A WRFlush flushes FlushLength bytes at RemoteAddr of the region of
	// RKey (FlushLevel FlushRange) or the whole region (FlushMR), to the
	// placement FlushType names (FlushGlobal; FlushPersistent needs
	// persistent memory, which softnic has none of).
	FlushLength uint32
	FlushType   FlushType
	FlushLevel  FlushLevel
	// AH, RemoteQPN and RemoteQKey address a UD send (ibv_send_wr.wr.ud).
	// A RemoteQKey with the high bit set sends the QP's own Q_Key
	// (IBA 10.2.4).
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
	// RemoteSRQN names the responder's XRC SRQ of a send on an XRC
	// initiator (ibv_send_wr.qp_type.xrc.remote_srqn).
	RemoteSRQN uint32
}

// MWBind is a memory window binding (ibv_mw_bind_info with the new rkey):
// the window whose key index (RKey's upper 24 bits) is RKey's gets RKey,
// and opens Length bytes at Addr of the region whose lkey is LKey to
// peers with Access. A Length of 0 unbinds a type 1 window.
type MWBind struct {
	RKey   uint32
	LKey   uint32
	Addr   uint64
	Length uint64
	Access Access
}

// IncRKey returns rkey with its key (the low 8 bits, the consumer's) one
// more, its index unchanged (ibv_inc_rkey): the rkey to bind a window
// with next.
func IncRKey(rkey uint32) uint32 { return rkey&^0xff | (rkey+1)&0xff }

// MWType is a memory window's type (ibv_mw_type).
type MWType uint8

// Memory window types, with libibverbs' values. A type 1 window is bound
// by ibv_bind_mw and reached through any QP of its PD; a type 2 window
// (2B, as ConnectX's and rxe's) by a BIND_MW work request, to the QP
// that posted it, which alone reaches it.
const (
	MWType1 MWType = 1
	MWType2 MWType = 2
)

// FlushType is a FLUSH's placement type (ibv_flush_type, a set of bits).
type FlushType uint8

// Flush placement types, with libibverbs' values (IBV_FLUSH_GLOBAL,
// IBV_FLUSH_PERSISTENT), which the FETH carries.
const (
	FlushGlobal     FlushType = 1 << 0
	FlushPersistent FlushType = 1 << 1
)

// FlushLevel is a FLUSH's selectivity level (ibv_selectivity_level).
type FlushLevel uint8

// Flush selectivity levels, with libibverbs' values.
const (
	FlushRange FlushLevel = 0 // the range of the request's RETH
	FlushMR    FlushLevel = 1 // the whole region the rkey names
)

// RecvWR is a receive work request (ibv_recv_wr).
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// WCStatus is the status of a work completion (ibv_wc_status), numbered as
// in libibverbs.
type WCStatus uint8

// Work completion statuses.
const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocEECOpErr
	WCLocProtErr
	WCWRFlushErr
	WCMWBindErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCLocRDDViolErr
	WCRemInvRDReqErr
	WCRemAbortErr
	WCInvEECNErr
	WCInvEECStateErr
	WCFatalErr
	WCRespTimeoutErr
	WCGeneralErr
	// Tag matching's (ibv_post_srq_ops): a DEL of a tag already
	// consumed, and a rendezvous whose tagged buffer is too small.
	WCTMErr
	WCTMRndvIncomplete
)

var wcStatusNames = [...]string{"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR",
	"LOC_PROT_ERR", "WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR",
	"REM_INV_REQ_ERR", "REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR",
	"LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR", "INV_EECN_ERR",
	"INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR", "GENERAL_ERR", "TM_ERR", "TM_RNDV_INCOMPLETE"}

func (s WCStatus) String() string { return nameOf(wcStatusNames[:], s, "WCStatus") }

// nameOf returns names[v], or typ(v) for a value without a name.
func nameOf[T ~uint8](names []string, v T, typ string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, uint8(v))
}

// WCOpcode says what a completion completed (ibv_wc_opcode).
type WCOpcode uint8

// Work completion opcodes, numbered as in libibverbs.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCFlush           WCOpcode = 8
	WCAtomicWrite     WCOpcode = 9
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
	// Tag matching's (TM SRQs): the list operations' completions, and the
	// receives of tagged (matched or unexpected) and untagged messages.
	WCTMAdd   WCOpcode = 130
	WCTMDel   WCOpcode = 131
	WCTMSync  WCOpcode = 132
	WCTMRecv  WCOpcode = 133
	WCTMNoTag WCOpcode = 134
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCFlush:
		return "FLUSH"
	case WCAtomicWrite:
		return "ATOMIC_WRITE"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	case WCTMAdd, WCTMDel, WCTMSync, WCTMRecv, WCTMNoTag:
		return [...]string{"TM_ADD", "TM_DEL", "TM_SYNC", "TM_RECV", "TM_NO_TAG"}[o-WCTMAdd]
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCFlags qualify a completion (ibv_wc_flags).
type WCFlags uint8

// Work completion flags, with libibverbs' values.
const (
	WCWithGRH WCFlags = 1 << 0
	WCWithImm WCFlags = 1 << 1
	WCWithInv WCFlags = 1 << 3
	// Tag matching's: the SRQ asks for a SYNC operation; a tag matched;
	// the matched message's data is all in the tagged buffer.
	WCTMSyncReq   WCFlags = 1 << 4
	WCTMMatch     WCFlags = 1 << 5
	WCTMDataValid WCFlags = 1 << 6
)

// WC is a work completion (ibv_wc).
type WC struct {
	WRID            uint64
	Status          WCStatus
	Opcode          WCOpcode
	Flags           WCFlags
	ByteLen         uint32
	Imm             uint32 // with WCWithImm
	InvalidatedRKey uint32 // with WCWithInv
	QPN             uint32 // the local QP
	SrcQP           uint32 // the remote QP
	// UD receives: the P_Key index, the source LID and destination LID
	// path bits (0 on RoCE), the service level, and which network header
	// the GRH holds. On RoCE the SL carries the network header too, in
	// ConnectX's encoding (RoCEPacketType): programs written for mlx5,
	// UCX's UD transport among them, read it there.
	PKeyIndex      uint16
	SLID           uint16
	SL             uint8
	DLIDPathBits   uint8
	NetworkHdrType NetworkType
	// Timestamp is when the engine made the completion, in nanoseconds of
	// the host's CLOCK_REALTIME (the device clock, DeviceClock), on a CQ
	// made with timestamps; 0 otherwise.
	Timestamp uint64
	// TMTag and TMPriv are a tag matching receive's tag and the TM
	// header's app_ctx (ibv_wc_read_tm_info), on a matched message.
	TMTag  uint64
	TMPriv uint32
}

// NetworkType is the network header of a received packet
// (rdma_network_type).
type NetworkType uint8

// Network header types, with the kernel's values.
const (
	NetworkIB   NetworkType = 0
	NetworkIPv4 NetworkType = 2
	NetworkIPv6 NetworkType = 3
)

// RoCE packet types: what a ConnectX CQE of a UD receive on RoCE holds
// where InfiniBand's has the SL, and rdma-core's mlx5 provider passes on
// as ibv_wc.sl (the L3 header type of mlx5's PRM; the kernel's mlx5 driver
// reads the same bits into network_hdr_type). Its values differ from
// NetworkType's for IPv6.
const (
	RoCEPacketGRH  uint8 = 0 // RoCE v1: an IB GRH
	RoCEPacketIPv6 uint8 = 1
	RoCEPacketIPv4 uint8 = 2
)

// RoCEPacketType returns the RoCE packet type of a datagram that came
// with network header n.
func (n NetworkType) RoCEPacketType() uint8 {
	switch n {
	case NetworkIPv4:
		return RoCEPacketIPv4
	case NetworkIPv6:
		return RoCEPacketIPv6
	}
	return RoCEPacketGRH
}

// WCOpcode returns the opcode of the completion of a work request of
// opcode o.
func (o WROpcode) WCOpcode() WCOpcode {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAndAdd:
		return WCFetchAdd
	case WRBindMW:
		return WCBindMW
	case WRLocalInv:
		return WCLocalInv
	case WRAtomicWrite:
		return WCAtomicWrite
	case WRFlush:
		return WCFlush
	}
	return WCSend
}
