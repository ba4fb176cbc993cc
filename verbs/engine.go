package verbs

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/ibtransport/cm"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce"
)

// Config describes a device to open.
type Config struct {
	// Addrs are the device's IP addresses; GID index i is Addrs[i].
	Addrs []netip.Addr
	// Resolve finds a peer's MAC address when a QP connects to it (see
	// roce.DeviceConfig.Resolve); nil uses the broadcast address.
	Resolve func(netip.Addr) ([6]byte, error)
	// Priority is how the engine threads are raised where applications
	// take every CPU (roce.DeviceConfig.Priority; the zero value leaves
	// them at the process's priority).
	Priority roce.Priority
	// EngineCPUs are the CPUs the engine threads are kept on
	// (roce.DeviceConfig.EngineCPUs; nil: the link's interrupt CPU).
	EngineCPUs []int
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
	// RxeFlushICRC gives the RC FLUSH packets the device sends and takes
	// Linux rdma_rxe's ICRC, for rxe peers only (see
	// roce.DeviceConfig.RxeFlushICRC).
	RxeFlushICRC bool
}

// engine is the in-process backend of a device (Open): the RoCE device,
// whose engines (group) run the transport, and the state of the verbs
// objects that the engines read.
type engine struct {
	d     *Device
	cfg   Config
	dev   *roce.Device
	group *ibtransport.Group
	// keys and mrs are the memory keys of all the device's regions: the
	// engines read mrs without locks (see keyTable).
	keys *keySource
	mrs  keyTable
	// atomics serialises the atomics on other processes' memory.
	atomics atomicUnit
	gsi     *gsi
	cm      *cm.Manager
	// commEst holds OnCommEst's functions by *QP.
	commEst sync.Map
	// dmUsed is the device memory allocated (engine_dm.go).
	dmUsed atomic.Uint64
	// xrc holds the XRC domains (engine_xrc.go).
	xrc xrcDomains
}

// Open opens a device on link (ibv_open_device). The device runs an engine
// goroutine until Close.
func Open(link roce.Link, cfg Config) (*Device, error) {
	rd, err := roce.NewDevice(link, roce.DeviceConfig{Addrs: cfg.Addrs, Resolve: cfg.Resolve, PollHold: cfg.PollHold, Engines: cfg.Engines,
		Priority: cfg.Priority, EngineCPUs: cfg.EngineCPUs, ECN: cfg.ECN, CNPDSCP: cfg.CNPDSCP, Congestion: cfg.Congestion, RxeFlushICRC: cfg.RxeFlushICRC})
	if err != nil {
		return nil, fmt.Errorf("open device: %w", err)
	}
	var e *engine
	d := NewDevice(func(d *Device, _ func(Event)) DeviceOps {
		e = &engine{d: d, cfg: cfg, dev: rd, group: rd.Group(), keys: newKeySource(), mrs: newKeyTable()}
		return e
	})
	e.group.HandleEvents(e.onQPEvent)
	if e.gsi, err = openGSI(e); err != nil {
		rd.Close()
		return nil, fmt.Errorf("open device: QP1: %w", err)
	}
	e.startCM()
	return d, nil
}

// engineOf returns the engine of an in-process device; what only the
// daemon does with a device (host its clients' objects) needs one.
func engineOf(d *Device, what string) (*engine, error) {
	if e, ok := d.ops.(*engine); ok {
		return e, nil
	}
	return nil, fmt.Errorf("%s: only on a device opened in process: %w", what, ErrInvalidArgument)
}

func (e *engine) Close() error {
	e.cm.Close()
	e.gsi.close()
	return e.dev.Close()
}

func (e *engine) Poll() bool                             { return e.dev.Poll() }
func (e *engine) Unpoll()                                { e.dev.Unpoll() }
func (e *engine) Done() <-chan struct{}                  { return nil }
func (e *engine) Err() error                             { return nil }
func (e *engine) QPs() int                               { return e.group.QPs() }
func (e *engine) GSICounters() *GSICounters              { return &e.gsi.ctr }
func (e *engine) Counters() *ibv.Counters                { return e.group.Counters() }
func (e *engine) GID(index int) (GID, error)             { return e.dev.GID(index) }
func (e *engine) RoCE() *roce.Device                     { return e.dev }
func (e *engine) CM() *cm.Manager                        { return e.cm }
func (e *engine) NewCompChannel(*CompChannel) ChannelOps { return engineChannel{} }

func (e *engine) Query() DeviceAttr {
	return DeviceAttr{MaxQPWR: ibv.MaxQPWR, MaxSGE: ibv.MaxSGE, MaxCQE: MaxCQE,
		MaxInlineData: ibv.MaxInline, MaxQPRdAtom: ibv.MaxRdAtomic, MaxMsgSize: 1 << 31,
		AtomicHostOrder: true, PhysPortCnt: 1, ODP: DeviceODPCaps, MaxDMSize: MaxDMSize}.WithMcast()
}

func (e *engine) ActiveMTU() MTU {
	room := roce.ActiveIBMTU(e.dev.Link().MTU())
	m := MTU4096
	for m > MTU256 && m.Bytes() > room {
		m--
	}
	return m
}

func (e *engine) PortState() PortState {
	if e.dev.LinkUp() {
		return PortActive
	}
	return PortDown
}

func (e *engine) SetLinkUp(up bool) bool { return e.dev.SetLinkUp(up) }

func (e *engine) DeviceCounters() []counters.Counter {
	cs := counters.Append(nil, "", e.group.Counters())
	cs = e.dev.AppendCounters(cs)
	cs = counters.Append(cs, "gsi_", &e.gsi.ctr)
	cs = counters.Append(cs, "cm_", e.cm.Counters())
	return rxeFirst(cs)
}

func (e *engine) QPCounters(qpn uint32) ([]counters.Counter, bool) {
	c := e.group.QPCounters(qpn)
	if c == nil {
		return nil, false
	}
	cs := rxeFirst(counters.Append(nil, "", c))
	// A gauge, not a count: the QP's DCQCN rate, 0 while it is not rate
	// limited (it sends at the line rate).
	rate, _ := e.group.QPCongestionRate(qpn)
	return append(cs, counters.Counter{Name: "rp_current_rate_mbps", Value: rate / 1e6}), true
}

func (e *engine) QPCounterRefs() []ibv.QPCountersRef { return e.group.QPCounterRefs(nil) }

func (e *engine) AllocMemory(n int) ([]byte, uint32, error) {
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, 0, fmt.Errorf("alloc memory: %w", err)
	}
	return mem, 0, nil
}

func (e *engine) FreeMemory([]byte, uint32) error { return nil }

// engineChannel is a completion channel of an in-process device: the
// engines send on its C, and there is nothing else to it.
type engineChannel struct{}

func (engineChannel) Destroy() error { return nil }
