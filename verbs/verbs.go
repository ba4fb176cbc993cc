package verbs

import (
	"errors"
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce"
)

// The vocabulary of work requests, completions, address handles and QP
// attributes is package ibv's, under its libibverbs names here.
type (
	QPAttr        = ibv.QPAttr
	QPAttrMask    = ibv.QPAttrMask
	QPCap         = ibv.QPCap
	QPState       = ibv.QPState
	AddressVector = ibv.AddressVector
	GID           = ibv.GID
	MTU           = ibv.MTU
	PSN           = header.PSN
	Access        = ibv.Access
	SGE           = ibv.SGE
	SendWR        = ibv.SendWR
	RecvWR        = ibv.RecvWR
	WROpcode      = ibv.WROpcode
	SendFlags     = ibv.SendFlags
	WC            = ibv.WC
	WCStatus      = ibv.WCStatus
	WCOpcode      = ibv.WCOpcode
	WCFlags       = ibv.WCFlags
	FlushType     = ibv.FlushType
	FlushLevel    = ibv.FlushLevel
)

// Access flags.
const (
	AccessLocalWrite   = ibv.AccessLocalWrite
	AccessRemoteWrite  = ibv.AccessRemoteWrite
	AccessRemoteRead   = ibv.AccessRemoteRead
	AccessRemoteAtomic = ibv.AccessRemoteAtomic
	AccessZeroBased    = ibv.AccessZeroBased
	AccessMWBind       = ibv.AccessMWBind
	// AccessFlushGlobal lets a peer FLUSH the region to global visibility
	// (IBV_ACCESS_FLUSH_GLOBAL). AccessFlushPersistent is refused at
	// registration: softnic has no persistent memory.
	AccessFlushGlobal     = ibv.AccessFlushGlobal
	AccessFlushPersistent = ibv.AccessFlushPersistent
)

// FLUSH placement types and selectivity levels.
const (
	FlushGlobal     = ibv.FlushGlobal
	FlushPersistent = ibv.FlushPersistent
	FlushRange      = ibv.FlushRange
	FlushMR         = ibv.FlushMR
)

// QP states.
const (
	QPSReset = ibv.QPSReset
	QPSInit  = ibv.QPSInit
	QPSRTR   = ibv.QPSRTR
	QPSRTS   = ibv.QPSRTS
	QPSSQD   = ibv.QPSSQD
	QPSSQE   = ibv.QPSSQE
	QPSErr   = ibv.QPSErr
)

// Path MTUs.
const (
	MTU256  = ibv.MTU256
	MTU512  = ibv.MTU512
	MTU1024 = ibv.MTU1024
	MTU2048 = ibv.MTU2048
	MTU4096 = ibv.MTU4096
)

// QP attribute mask bits.
const (
	QPAttrState           = ibv.QPAttrState
	QPAttrCurState        = ibv.QPAttrCurState
	QPAttrAccessFlags     = ibv.QPAttrAccessFlags
	QPAttrPKeyIndex       = ibv.QPAttrPKeyIndex
	QPAttrPort            = ibv.QPAttrPort
	QPAttrAV              = ibv.QPAttrAV
	QPAttrPathMTU         = ibv.QPAttrPathMTU
	QPAttrTimeout         = ibv.QPAttrTimeout
	QPAttrRetryCnt        = ibv.QPAttrRetryCnt
	QPAttrRNRRetry        = ibv.QPAttrRNRRetry
	QPAttrRQPSN           = ibv.QPAttrRQPSN
	QPAttrMaxQPRdAtomic   = ibv.QPAttrMaxQPRdAtomic
	QPAttrMinRNRTimer     = ibv.QPAttrMinRNRTimer
	QPAttrSQPSN           = ibv.QPAttrSQPSN
	QPAttrMaxDestRdAtomic = ibv.QPAttrMaxDestRdAtomic
	QPAttrDestQPN         = ibv.QPAttrDestQPN
)

// Send work request opcodes.
const (
	WRSend              = ibv.WRSend
	WRSendWithImm       = ibv.WRSendWithImm
	WRSendWithInv       = ibv.WRSendWithInv
	WRRDMAWrite         = ibv.WRRDMAWrite
	WRRDMAWriteWithImm  = ibv.WRRDMAWriteWithImm
	WRRDMARead          = ibv.WRRDMARead
	WRAtomicCmpAndSwp   = ibv.WRAtomicCmpAndSwp
	WRAtomicFetchAndAdd = ibv.WRAtomicFetchAndAdd
	WRLocalInv          = ibv.WRLocalInv
	WRBindMW            = ibv.WRBindMW
	WRAtomicWrite       = ibv.WRAtomicWrite
	WRFlush             = ibv.WRFlush
)

// Send flags.
const (
	SendFence     = ibv.SendFence
	SendSignaled  = ibv.SendSignaled
	SendSolicited = ibv.SendSolicited
	SendInline    = ibv.SendInline
)

// Work completion statuses.
const (
	WCSuccess        = ibv.WCSuccess
	WCLocLenErr      = ibv.WCLocLenErr
	WCLocQPOpErr     = ibv.WCLocQPOpErr
	WCLocProtErr     = ibv.WCLocProtErr
	WCWRFlushErr     = ibv.WCWRFlushErr
	WCMWBindErr      = ibv.WCMWBindErr
	WCBadRespErr     = ibv.WCBadRespErr
	WCLocAccessErr   = ibv.WCLocAccessErr
	WCRemInvReqErr   = ibv.WCRemInvReqErr
	WCRemAccessErr   = ibv.WCRemAccessErr
	WCRemOpErr       = ibv.WCRemOpErr
	WCRetryExcErr    = ibv.WCRetryExcErr
	WCRNRRetryExcErr = ibv.WCRNRRetryExcErr
	WCRemInvRDReqErr = ibv.WCRemInvRDReqErr
	WCGeneralErr     = ibv.WCGeneralErr
)

// Work completion opcodes.
const (
	WCSend            = ibv.WCSend
	WCRDMAWrite       = ibv.WCRDMAWrite
	WCRDMARead        = ibv.WCRDMARead
	WCCompSwap        = ibv.WCCompSwap
	WCFetchAdd        = ibv.WCFetchAdd
	WCBindMW          = ibv.WCBindMW
	WCLocalInv        = ibv.WCLocalInv
	WCFlush           = ibv.WCFlush
	WCAtomicWrite     = ibv.WCAtomicWrite
	WCRecv            = ibv.WCRecv
	WCRecvRDMAWithImm = ibv.WCRecvRDMAWithImm
)

// Work completion flags.
const (
	WCWithImm = ibv.WCWithImm
	WCWithInv = ibv.WCWithInv
)

// Errors.
var (
	ErrInvalidArgument = ibv.ErrInvalidArgument
	ErrQueueFull       = ibv.ErrQueueFull
	ErrInvalidState    = ibv.ErrInvalidState
	ErrEmptyGID        = ibv.ErrEmptyGID
	ErrBusy            = ibv.ErrBusy
	ErrMcastLimit      = ibv.ErrMcastLimit
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
func (d *Device) Counters() *ibv.Counters { return d.ops.Counters() }

// GID returns entry index of the GID table (ibv_query_gid_ex): an
// entry that holds no GID gives ErrEmptyGID.
func (d *Device) GID(index int) (GID, error) { return d.ops.GID(index) }

// GIDTable returns the GID table's entries, each at its index, up to the
// last that holds a GID (a device's addresses come first, the empty
// entries after); an empty entry between them (an address that went,
// SetAddrs) is the zero GID, as ibv_query_gid gives it.
func (d *Device) GIDTable() []GID {
	var gids []GID
	n := 0 // entries up to the last that holds a GID
	for i := 0; ; i++ {
		g, err := d.GID(i)
		switch {
		case errors.Is(err, ErrEmptyGID):
			gids = append(gids, GID{})
			if len(gids)-n > maxEmptyRun {
				return gids[:n]
			}
			continue
		case err != nil:
			return gids[:n]
		}
		gids = append(gids, g)
		n = len(gids)
	}
}

// maxEmptyRun is how many empty entries in a row GIDTable reads past the
// last GID before it takes the rest of the table to be empty: a table is
// as long as its hardware's (ConnectX's 255), mostly empty.
const maxEmptyRun = 64

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
	ODP             ODPCaps // on-demand paging (odp.go)
	TM              TMCaps  // tag matching (tm.go)
	// The device clock (clock.go): its frequency in kHz and the bits of a
	// completion timestamp (ibv_device_attr_ex's hca_core_clock and
	// completion_timestamp_mask).
	HCACoreClockKHz         uint64
	CompletionTimestampMask uint64
	MaxDMSize               uint64 // bytes of device memory (AllocDM), every user's
	// Multicast: groups, QPs per group, and attachments in all
	// (max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach).
	MaxMcastGrp, MaxMcastQPAttach, MaxTotalMcastQPAttach int
}

// WithMcast returns a with the device's multicast limits, which both
// backends' devices share (ibv's).
func (a DeviceAttr) WithMcast() DeviceAttr {
	a.MaxMcastGrp, a.MaxMcastQPAttach, a.MaxTotalMcastQPAttach = ibv.MaxMcastGroups, ibv.MaxMcastQPAttach, ibv.MaxTotalMcastQPAttach
	return a
}

// Query returns the device's limits (ibv_query_device_ex).
func (d *Device) Query() DeviceAttr {
	a := d.ops.Query()
	a.HCACoreClockKHz, a.CompletionTimestampMask = HCACoreClockKHz, CompletionTimestampMask
	a.TM = ibv.DeviceTMCaps // both backends': the engine's
	return a
}

// ActiveMTU returns the port's active MTU (ibv_port_attr.active_mtu): the
// largest IB MTU whose packets fit the link.
func (d *Device) ActiveMTU() MTU { return d.ops.ActiveMTU() }
