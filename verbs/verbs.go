package verbs

import (
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/roce"
)

// The queue pair and the vocabulary of work requests, completions and QP
// attributes are the transport engine's; they keep their libibverbs names
// here. PD, MR, CQ, CompChannel and SRQ are this package's own.
type (
	QPAttr        = ibtransport.QPAttr
	QPAttrMask    = ibtransport.QPAttrMask
	QPCap         = ibtransport.QPCap
	QPState       = ibtransport.QPState
	AddressVector = ibtransport.AddressVector
	GID           = ibtransport.GID
	MTU           = ibtransport.MTU
	PSN           = ibtransport.PSN
	Access        = ibtransport.Access
	SGE           = ibtransport.SGE
	SendWR        = ibtransport.SendWR
	RecvWR        = ibtransport.RecvWR
	WROpcode      = ibtransport.WROpcode
	SendFlags     = ibtransport.SendFlags
	WC            = ibtransport.WC
	WCStatus      = ibtransport.WCStatus
	WCOpcode      = ibtransport.WCOpcode
	WCFlags       = ibtransport.WCFlags
)

// Access flags.
const (
	AccessLocalWrite   = ibtransport.AccessLocalWrite
	AccessRemoteWrite  = ibtransport.AccessRemoteWrite
	AccessRemoteRead   = ibtransport.AccessRemoteRead
	AccessRemoteAtomic = ibtransport.AccessRemoteAtomic
)

// QP states.
const (
	QPSReset = ibtransport.QPSReset
	QPSInit  = ibtransport.QPSInit
	QPSRTR   = ibtransport.QPSRTR
	QPSRTS   = ibtransport.QPSRTS
	QPSSQD   = ibtransport.QPSSQD
	QPSSQE   = ibtransport.QPSSQE
	QPSErr   = ibtransport.QPSErr
)

// Path MTUs.
const (
	MTU256  = ibtransport.MTU256
	MTU512  = ibtransport.MTU512
	MTU1024 = ibtransport.MTU1024
	MTU2048 = ibtransport.MTU2048
	MTU4096 = ibtransport.MTU4096
)

// QP attribute mask bits.
const (
	QPAttrState           = ibtransport.QPAttrState
	QPAttrCurState        = ibtransport.QPAttrCurState
	QPAttrAccessFlags     = ibtransport.QPAttrAccessFlags
	QPAttrPKeyIndex       = ibtransport.QPAttrPKeyIndex
	QPAttrPort            = ibtransport.QPAttrPort
	QPAttrAV              = ibtransport.QPAttrAV
	QPAttrPathMTU         = ibtransport.QPAttrPathMTU
	QPAttrTimeout         = ibtransport.QPAttrTimeout
	QPAttrRetryCnt        = ibtransport.QPAttrRetryCnt
	QPAttrRNRRetry        = ibtransport.QPAttrRNRRetry
	QPAttrRQPSN           = ibtransport.QPAttrRQPSN
	QPAttrMaxQPRdAtomic   = ibtransport.QPAttrMaxQPRdAtomic
	QPAttrMinRNRTimer     = ibtransport.QPAttrMinRNRTimer
	QPAttrSQPSN           = ibtransport.QPAttrSQPSN
	QPAttrMaxDestRdAtomic = ibtransport.QPAttrMaxDestRdAtomic
	QPAttrDestQPN         = ibtransport.QPAttrDestQPN
)

// Send work request opcodes.
const (
	WRSend              = ibtransport.WRSend
	WRSendWithImm       = ibtransport.WRSendWithImm
	WRSendWithInv       = ibtransport.WRSendWithInv
	WRRDMAWrite         = ibtransport.WRRDMAWrite
	WRRDMAWriteWithImm  = ibtransport.WRRDMAWriteWithImm
	WRRDMARead          = ibtransport.WRRDMARead
	WRAtomicCmpAndSwp   = ibtransport.WRAtomicCmpAndSwp
	WRAtomicFetchAndAdd = ibtransport.WRAtomicFetchAndAdd
)

// Send flags.
const (
	SendFence     = ibtransport.SendFence
	SendSignaled  = ibtransport.SendSignaled
	SendSolicited = ibtransport.SendSolicited
	SendInline    = ibtransport.SendInline
)

// Work completion statuses.
const (
	WCSuccess        = ibtransport.WCSuccess
	WCLocLenErr      = ibtransport.WCLocLenErr
	WCLocQPOpErr     = ibtransport.WCLocQPOpErr
	WCLocProtErr     = ibtransport.WCLocProtErr
	WCWRFlushErr     = ibtransport.WCWRFlushErr
	WCBadRespErr     = ibtransport.WCBadRespErr
	WCLocAccessErr   = ibtransport.WCLocAccessErr
	WCRemInvReqErr   = ibtransport.WCRemInvReqErr
	WCRemAccessErr   = ibtransport.WCRemAccessErr
	WCRemOpErr       = ibtransport.WCRemOpErr
	WCRetryExcErr    = ibtransport.WCRetryExcErr
	WCRNRRetryExcErr = ibtransport.WCRNRRetryExcErr
	WCRemInvRDReqErr = ibtransport.WCRemInvRDReqErr
	WCGeneralErr     = ibtransport.WCGeneralErr
)

// Work completion opcodes.
const (
	WCSend            = ibtransport.WCSend
	WCRDMAWrite       = ibtransport.WCRDMAWrite
	WCRDMARead        = ibtransport.WCRDMARead
	WCCompSwap        = ibtransport.WCCompSwap
	WCFetchAdd        = ibtransport.WCFetchAdd
	WCRecv            = ibtransport.WCRecv
	WCRecvRDMAWithImm = ibtransport.WCRecvRDMAWithImm
)

// Work completion flags.
const (
	WCWithImm = ibtransport.WCWithImm
	WCWithInv = ibtransport.WCWithInv
)

// Errors.
var (
	ErrInvalidArgument = ibtransport.ErrInvalidArgument
	ErrQueueFull       = ibtransport.ErrQueueFull
	ErrInvalidState    = ibtransport.ErrInvalidState
)

// Device is an opened RDMA device (ibv_context). Its backend runs it: the
// engine of an in-process device (Open) or a daemon's (daemon/client); see
// backend.go.
type Device struct {
	ops    DeviceOps
	events chan Event
	nextPD atomic.Uint32
	// memory are the blocks AllocMemory gave.
	memory allocations
}

// Remote reports whether the device's transport runs in another process
// (a daemon's: daemon/client), where MR.RemoteWriteSeq does not move.
func (d *Device) Remote() bool {
	_, inProcess := d.ops.(*engine)
	return !inProcess
}

// Poll runs one pass of the device's engine in the caller's goroutine, if
// no other goroutine is running one, and reports whether the pass received
// or sent anything. CQ.Poll does this when its CQ is empty; an application
// that waits for remote writes by watching memory calls it between looks
// (like ucp_worker_progress). While an application keeps polling, the
// engine goroutine leaves the work to it (roce.Device.Poll); before
// blocking on something other than CQ.Wait or CompChannel.Get, call
// Unpoll. On a device reached through a daemon, whose engines run there,
// it does nothing and reports false.
func (d *Device) Poll() bool { return d.ops.Poll() }

// Unpoll hands the engine back to the engine goroutine at once: the
// application stops polling.
func (d *Device) Unpoll() { d.ops.Unpoll() }

// Close stops the device; the link stays open.
func (d *Device) Close() error { return d.ops.Close() }

// QPs returns how many QPs the device has, QP1 included.
//
// On a device reached through a daemon it is 0: the engines, and the
// counts, are the daemon's (softnic stat).
func (d *Device) QPs() int { return d.ops.QPs() }

// GSICounters returns the counters of the device's QP1; all zero on a
// device reached through a daemon, whose QP1 is the daemon's.
func (d *Device) GSICounters() *GSICounters { return d.ops.GSICounters() }

// RoCE returns the underlying RoCE device (counters, neighbours); nil on
// a device reached through a daemon.
func (d *Device) RoCE() *roce.Device { return d.ops.RoCE() }

// Counters returns the transport engines' counters (their sum at the time
// of the call when the device has several); all zero on a device reached
// through a daemon, whose engines count in the daemon.
func (d *Device) Counters() *ibtransport.Counters { return d.ops.Counters() }

// GID returns entry index of the GID table (ibv_query_gid).
func (d *Device) GID(index int) (GID, error) { return d.ops.GID(index) }

// GIDTable returns the whole GID table (ibv_query_gid_table): the entries
// GID returns, from index 0 up to the first that fails.
func (d *Device) GIDTable() []GID {
	var gids []GID
	for i := 0; ; i++ {
		g, err := d.GID(i)
		if err != nil {
			return gids
		}
		gids = append(gids, g)
	}
}

// DeviceAttr are a device's limits (the ibv_device_attr fields programs
// size their queues and requests by).
type DeviceAttr struct {
	MaxQPWR         int // work requests per send or receive queue
	MaxSGE          int // SGEs per work request
	MaxCQE          int // completions per CQ
	MaxInlineData   int // bytes of inline data per work request
	MaxQPRdAtom     int // max_rd_atomic / max_dest_rd_atomic
	MaxMsgSize      int // bytes per message
	AtomicHostOrder bool
	PhysPortCnt     int
}

// Query returns the device's limits (ibv_query_device).
func (d *Device) Query() DeviceAttr { return d.ops.Query() }

// ActiveMTU returns the port's active MTU (ibv_port_attr.active_mtu): the
// largest IB MTU whose packets fit the link.
func (d *Device) ActiveMTU() MTU { return d.ops.ActiveMTU() }
