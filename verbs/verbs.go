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
	PSN           = header.PSN
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
func (d *Device) Counters() *ibtransport.Counters {
	if d.remote != nil {
		return &ibtransport.Counters{}
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
	return DeviceAttr{MaxQPWR: ibtransport.MaxQPWR, MaxSGE: ibtransport.MaxSGE, MaxCQE: MaxCQE,
		MaxInlineData: ibtransport.MaxInline, MaxQPRdAtom: ibtransport.MaxRdAtomic, MaxMsgSize: 1 << 31,
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
