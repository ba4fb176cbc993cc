package verbs

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/ibtransport/cm"
	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce"
)

// The queue pair and the vocabulary of work requests, completions and QP
// attributes are the transport engine's; they keep their libibverbs names
// here. PD, MR, CQ, CompChannel and SRQ are this package's own.
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
)

// Access flags.
const (
	AccessLocalWrite   = ibv.AccessLocalWrite
	AccessRemoteWrite  = ibv.AccessRemoteWrite
	AccessRemoteRead   = ibv.AccessRemoteRead
	AccessRemoteAtomic = ibv.AccessRemoteAtomic
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
)

// Config describes a device to open.
type Config struct {
	// Addrs are the device's IP addresses; GID index i is Addrs[i].
	Addrs []netip.Addr
	// Resolve finds a peer's MAC address when a QP connects to it (see
	// roce.DeviceConfig.Resolve); nil uses the broadcast address.
	Resolve func(netip.Addr) ([6]byte, error)
	// PollHold is how long the engine goroutine naps at a time while an
	// application polls and leaves the engine to it (see
	// roce.DeviceConfig.PollHold; 0 is its default).
	PollHold time.Duration
	// Engines is how many engines run the device's QPs, each in its own
	// goroutine (see roce.DeviceConfig.Engines; 0: one per receive queue
	// of the link, up to the number of CPUs).
	Engines int
	// CMMillisecond is how long one millisecond of the connection
	// manager's timeouts lasts (see cm.Config.Millisecond); zero is a
	// millisecond. Tests shrink it to see retries run out quickly.
	CMMillisecond time.Duration
	// ECN, CNPDSCP and Congestion are the device's congestion control:
	// the ECN codepoint of its packets, the DSCP of its CNPs and DCQCN's
	// notification and reaction points (see roce.DeviceConfig; the zero
	// values are ConnectX's defaults).
	ECN        roce.ECN
	CNPDSCP    int
	Congestion ibtransport.CongestionConfig
}

// Device is an opened RDMA device (ibv_context): a RoCE device, whose
// engines (group) run the transport, and the verbs objects' device-wide
// state.
type Device struct {
	cfg   Config
	dev   *roce.Device
	group *ibtransport.Group
	// keys and mrs are the memory keys of all the device's regions: the
	// engines read mrs without locks (see keyTable).
	keys *keySource
	mrs  keyTable
	// atomics serialises the atomics on other processes' memory.
	atomics atomicUnit
	nextPD  atomic.Uint32
	events  chan Event
	// memory are the blocks AllocMemory gave.
	memory allocations
	gsi    *gsi
	cm     *cm.Manager
	// commEst holds OnCommEst's functions by *QP.
	commEst sync.Map
	// remote is set, and dev, group, gsi and cm are not, on a device
	// reached through a daemon (Dial).
	remote *remote
}

// Open opens a device on link (ibv_open_device). The device runs an engine
// goroutine until Close.
func Open(link roce.Link, cfg Config) (*Device, error) {
	d, err := roce.NewDevice(link, roce.DeviceConfig{Addrs: cfg.Addrs, Resolve: cfg.Resolve, PollHold: cfg.PollHold, Engines: cfg.Engines,
		ECN: cfg.ECN, CNPDSCP: cfg.CNPDSCP, Congestion: cfg.Congestion})
	if err != nil {
		return nil, fmt.Errorf("open device: %w", err)
	}
	dev := &Device{cfg: cfg, dev: d, group: d.Group(), keys: newKeySource(), mrs: newKeyTable(), events: make(chan Event, 256)}
	dev.group.HandleEvents(dev.onQPEvent)
	if dev.gsi, err = openGSI(dev); err != nil {
		d.Close()
		return nil, fmt.Errorf("open device: QP1: %w", err)
	}
	dev.startCM()
	return dev, nil
}

// Poll runs one pass of the device's engine in the caller's goroutine, if
// no other goroutine is running one, and reports whether the pass received
// or sent anything. CQ.Poll does this when its CQ is empty; an application
// that waits for remote writes by watching memory calls it between looks
// (like ucp_worker_progress). While an application keeps polling, the
// engine goroutine leaves the work to it (roce.Device.Poll); before
// blocking on something other than CQ.Wait or CompChannel.Get, call
// Unpoll.
func (d *Device) Poll() bool { return d.remote == nil && d.dev.Poll() }

// Unpoll hands the engine back to the engine goroutine at once: the
// application stops polling.
func (d *Device) Unpoll() {
	if d.remote == nil {
		d.dev.Unpoll()
	}
}

// Close stops the device; the link stays open.
func (d *Device) Close() error {
	if d.remote != nil {
		return d.remote.close()
	}
	d.cm.Close()
	d.gsi.close()
	return d.dev.Close()
}

// QPs returns how many QPs the device has, QP1 included.
//
// On a device reached through a daemon it is 0: the engines, and the
// counts, are the daemon's (softnic stat).
func (d *Device) QPs() int {
	if d.remote != nil {
		return 0
	}
	return d.group.QPs()
}

// GSICounters returns the counters of the device's QP1; all zero on a
// device reached through a daemon, whose QP1 is the daemon's.
func (d *Device) GSICounters() *GSICounters {
	if d.remote != nil {
		return &GSICounters{}
	}
	return &d.gsi.ctr
}

// RoCE returns the underlying RoCE device (counters, neighbours); nil on
// a device reached through a daemon.
func (d *Device) RoCE() *roce.Device { return d.dev }

// Counters returns the transport engines' counters (their sum at the time
// of the call when the device has several); all zero on a device reached
// through a daemon, whose engines count in the daemon.
func (d *Device) Counters() *ibv.Counters {
	if d.remote != nil {
		return &ibv.Counters{}
	}
	return d.group.Counters()
}

// GID returns entry index of the GID table (ibv_query_gid).
func (d *Device) GID(index int) (GID, error) {
	if d.remote != nil {
		return d.remoteGID(index)
	}
	return d.dev.GID(index)
}

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
func (d *Device) Query() DeviceAttr {
	if d.remote != nil {
		return d.remoteQuery()
	}
	return DeviceAttr{MaxQPWR: ibv.MaxQPWR, MaxSGE: ibv.MaxSGE, MaxCQE: MaxCQE,
		MaxInlineData: ibv.MaxInline, MaxQPRdAtom: ibv.MaxRdAtomic, MaxMsgSize: 1 << 31,
		AtomicHostOrder: true, PhysPortCnt: 1}
}

// ActiveMTU returns the port's active MTU (ibv_port_attr.active_mtu): the
// largest IB MTU whose packets fit the link.
func (d *Device) ActiveMTU() MTU {
	if d.remote != nil {
		return MTU(d.remote.c.Device.ActiveMTU)
	}
	room := roce.ActiveIBMTU(d.dev.Link().MTU())
	m := MTU4096
	for m > MTU256 && m.Bytes() > room {
		m--
	}
	return m
}
