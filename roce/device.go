package roce

import (
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// DeviceConfig describes a RoCE device.
type DeviceConfig struct {
	// Addrs are the device's IP addresses; as GIDs they form its GID table,
	// index i being Addrs[i].
	Addrs []netip.Addr
	// RxBatch is how many frames the engine takes from the link at a time
	// (default 64).
	RxBatch int
	// Resolve finds the MAC address of a peer when a QP is connected to it
	// and SetNeighbor has no entry (for example xdplink.ResolveNeighbor over the
	// kernel's neighbour table). Without it such peers get the broadcast
	// address.
	Resolve func(netip.Addr) ([6]byte, error)
	// Spin is how long the engine goroutine keeps polling the link after
	// its last work before it blocks (default 50µs; negative: never). A
	// reply that comes within it needs no wake-up of a sleeping thread,
	// and posts need no doorbell system call.
	Spin time.Duration
	// PollHold is how long the engine goroutine's first nap lasts while an
	// application polls (Poll) and its own passes find nothing; it naps
	// again, each time twice as long up to 64 ms, as long as the
	// application polled meanwhile (default 1ms; negative: Poll never runs
	// the engine). An application that polls
	// drives the engine in its own thread, so a reply needs no hand-off
	// between threads.
	PollHold time.Duration
	// Priority is how the engine threads are raised where applications
	// take every CPU (priority.go; PriorityOff, the default, leaves them
	// at the process's priority); Device.Priority reports what
	// PriorityAuto became.
	Priority Priority
	// EngineCPUs, if set, are the CPUs the engine threads are kept on,
	// lane i on EngineCPUs[i%len], in place of the link's interrupt CPU
	// (whose vectors then stay where they are, see CPULink) and held
	// there however contested (cpupin.StartHeld): where engines
	// on one host would otherwise share a CPU (two daemons, each of a
	// veth's ends), and the scheduler, balancing threads by count, leaves
	// them together beside two spinning applications.
	EngineCPUs []int
	// Engines is how many engines run the device's QPs, each in its own
	// goroutine on its own share of the link's receive queues (Splitter).
	// 0 runs one per receive queue, up to the number of CPUs; a link that
	// is not a Splitter, or has one queue, gets one engine.
	Engines int
	// ECN is the ECN codepoint of the packets the device sends (default
	// ECT(0)); ECNNotECT sends the QPs' traffic class unchanged, as rxe.
	ECN ECN
	// CNPDSCP is the DSCP of the CNPs the device sends: 0 is ConnectX's
	// 48, a negative value DSCP 0.
	CNPDSCP int
	// Congestion configures ECN's notification and reaction points
	// (DCQCN); the zero value is ConnectX's defaults, both on.
	Congestion ibtransport.CongestionConfig
	// RxeFlushICRC is a compatibility mode for Linux rdma_rxe peers (6.2
	// through at least 6.12), which compute an RC FLUSH's ICRC over its
	// headers twice (RxeFlushICRC): the device gives the FLUSH requests
	// it sends rxe's ICRC, and takes a received FLUSH whose ICRC is
	// rxe's (counted in Rx.FlushICRCRxe) as well as one whose ICRC is
	// IBA's. Every other packet is as without it. Off by default: an
	// IBA-correct peer (ConnectX) drops the FLUSHes of a device in this
	// mode.
	RxeFlushICRC bool
}

// DeviceCounters count what the device did with frames, beyond the parse
// outcomes in Rx.
type DeviceCounters struct {
	Rx         RxCounters    `rdma:"rx_"`
	RxNotForUs atomic.Uint64 // RoCEv2 frames to an address not in the GID table
	TxFrames   atomic.Uint64
	TxNoBuffer atomic.Uint64 // times the link had no TX buffer free
	TxErrors   atomic.Uint64 `rdma:"send_err"` // frames that could not be finished
	Loopback   atomic.Uint64 // packets between two QPs of this device
	RxRaw      atomic.Uint64 // frames (or their copies) a flow steered to a raw packet QP
	TxRaw      atomic.Uint64 // frames raw packet QPs sent
	// LoopbackRaw are frames of raw packet QPs looped back to the
	// device's flows, LoopbackRawDrops those that found no buffer.
	LoopbackRaw      atomic.Uint64
	LoopbackRawDrops atomic.Uint64
	// LoopbackDrops are multicast datagrams whose copy for the device's
	// own QPs found no loopback buffer free.
	LoopbackDrops atomic.Uint64
	Passes        atomic.Uint64 // engine passes, by the engine goroutine and in Poll
	PollPasses    atomic.Uint64 // engine passes run by applications' Poll
	// Sleeps counts the engine goroutines' waits on the link (and the
	// hosts' doorbell), Contended the spins that found the CPU taken by
	// others (DeviceConfig.Priority: the engine then sleeps when idle).
	Sleeps    atomic.Uint64
	Contended atomic.Uint64
}

// Device is a RoCEv2 adapter made of a Link and ibtransport engines. Each
// engine has a lane: a goroutine, started by NewDevice, and the link (or
// the share of its receive queues) it drives. The goroutine receives
// frames, checks and strips their encapsulation, hands the IB packets to
// the engine, and sends what the engine builds. An application that polls
// (Poll) runs those passes in its own thread instead, while it polls.
type Device struct {
	link  Link
	group *ibtransport.Group
	lanes []*lane
	// table is the GID table (gidtable.go); SetAddrs replaces it under
	// gidMu.
	table   atomic.Pointer[gidTable]
	gidMu   sync.Mutex
	mac     [6]byte
	batch   int
	spin    time.Duration
	resolve func(netip.Addr) ([6]byte, error)
	neighMu sync.Mutex
	neigh   map[netip.Addr][6]byte

	pollHold time.Duration
	// prio is DeviceConfig.Priority, resolved (never PriorityAuto).
	prio Priority
	// rxeFlushICRC is DeviceConfig.RxeFlushICRC.
	rxeFlushICRC bool
	ecn          ECN
	cnpDSCP      uint8
	stop         atomic.Bool
	closeMu      sync.Mutex

	tapMu  sync.Mutex
	tapped bool // the lanes have taps (SetTaps)

	port port

	flows flowState // flow.go
}

// NewDevice creates a device on link and starts its engine goroutines.
func NewDevice(link Link, cfg DeviceConfig) (*Device, error) {
	if len(cfg.Addrs) == 0 {
		return nil, fmt.Errorf("new RoCE device: no addresses: %w", ibv.ErrInvalidArgument)
	}
	d := &Device{link: link, mac: link.HardwareAddr(), batch: cfg.RxBatch, spin: cfg.Spin, pollHold: cfg.PollHold,
		resolve: cfg.Resolve, neigh: map[netip.Addr][6]byte{}, rxeFlushICRC: cfg.RxeFlushICRC,
		prio: resolvePriority(cfg.Priority)}
	if d.batch <= 0 {
		d.batch = 64
	}
	if err := d.setCongestion(cfg); err != nil {
		return nil, err
	}
	if d.spin == 0 {
		d.spin = defaultSpin
	}
	if d.pollHold == 0 {
		d.pollHold = defaultPollHold
	}
	for _, a := range cfg.Addrs {
		if !a.IsValid() {
			return nil, fmt.Errorf("new RoCE device: invalid address: %w", ibv.ErrInvalidArgument)
		}
	}
	d.table.Store(newGIDTable(cfg.Addrs))
	links, err := laneLinks(link, cfg.Engines)
	if err != nil {
		return nil, fmt.Errorf("new RoCE device: %w", err)
	}
	ports := make([]ibtransport.Port, len(links))
	wakes := make([]func(), len(links))
	for i, l := range links {
		cpu := -1
		if len(cfg.EngineCPUs) > 0 {
			cpu = cfg.EngineCPUs[i%len(cfg.EngineCPUs)]
		}
		ln, err := newLane(d, l, cpu)
		if err != nil {
			for _, o := range d.lanes {
				o.napFile.Close()
			}
			return nil, fmt.Errorf("new RoCE device: %w", err)
		}
		d.lanes = append(d.lanes, ln)
		ports[i], wakes[i] = ln, ln.wake
	}
	d.group = ibtransport.NewGroup(ports, wakes)
	d.group.SetMcastJoin(d.joinGroup)
	if err := d.group.SetCongestion(cfg.Congestion); err != nil {
		for _, o := range d.lanes {
			o.napFile.Close()
		}
		return nil, fmt.Errorf("new RoCE device: %w", err)
	}
	for i, ln := range d.lanes {
		ln.eng = d.group.Engines()[i]
		go ln.run()
	}
	return d, nil
}

// Priority reports how the engine threads are raised: DeviceConfig's
// Priority, PriorityAuto resolved to what the process may use.
func (d *Device) Priority() Priority { return d.prio }

// laneLinks divides link among the device's engines (DeviceConfig.Engines).
func laneLinks(link Link, engines int) ([]Link, error) {
	sp, ok := link.(Splitter)
	if !ok || engines == 1 || sp.NumQueues() < 2 {
		return []Link{link}, nil
	}
	if engines <= 0 {
		engines = runtime.NumCPU()
	}
	engines = min(engines, sp.NumQueues())
	if engines == 1 {
		return []Link{link}, nil
	}
	return sp.Split(engines)
}

// Poll runs one engine pass in the calling goroutine, unless another
// goroutine is running one: it receives what arrived, sends what was
// posted, and fills the completion queues. It reports whether the pass
// did any of that. verbs' CQ.Poll calls it when the CQ is empty. While an
// application keeps polling, the engine goroutine naps and leaves the
// passes to it, so that a reply or a completion needs no hand-off between
// two polling threads: on cores shared by both ends each hand-off waits
// for the scheduler, which costs more than the round trip itself. An
// application that stops polling calls Unpoll, or the engine goroutine
// resumes at the end of its nap (PollHold) after the last Poll.
func (d *Device) Poll() bool {
	if d.pollHold < 0 {
		return false
	}
	worked := false
	for _, ln := range d.lanes {
		// A lane without QPs is left to its goroutine: its passes would
		// cost every poll, and the goroutine does not nap while no
		// application polls it.
		if (len(d.lanes) == 1 || ln.eng.HasQPs()) && ln.poll() {
			worked = true
		}
	}
	return worked
}

// Unpoll tells the device that the application stopped polling (it is
// about to block): the engine goroutines take over at once.
func (d *Device) Unpoll() {
	if d.pollHold < 0 {
		return
	}
	for _, ln := range d.lanes {
		ln.handBack.Store(true)
		if ln.napping.Load() {
			ln.endNap()
		}
	}
}

// EngineCPU returns the CPU engine i (a QP's EngineIndex) runs on: the
// one given it (DeviceConfig.EngineCPUs), else the one its link's
// interrupts arrive on, or -1 when its link has no such CPU (CPULink).
// An application that polls the engine's QPs does best to keep its
// polling thread there (see package cpupin).
func (d *Device) EngineCPU(i int) int {
	if i < 0 || i >= len(d.lanes) {
		return -1
	}
	return d.lanes[i].cpu
}

// Group returns the device's transport engines.
func (d *Device) Group() *ibtransport.Group { return d.group }

// Engines returns how many engines (and goroutines) run the device.
func (d *Device) Engines() int { return len(d.lanes) }

// Counters returns the device's counters: with one engine the live ones,
// with several their sum at the time of the call.
func (d *Device) Counters() *DeviceCounters {
	if len(d.lanes) == 1 {
		return &d.lanes[0].ctr
	}
	var sum DeviceCounters
	for _, ln := range d.lanes {
		ibv.AddCounters(&sum, &ln.ctr)
	}
	return &sum
}

// Link returns the device's link.
func (d *Device) Link() Link { return d.link }

// GID returns entry i of the GID table: an address's GID, or
// ibv.ErrEmptyGID for an empty entry (past the addresses, or one whose
// address went: SetAddrs).
func (d *Device) GID(i int) (ibv.GID, error) {
	t := d.table.Load()
	n := max(minGIDTableLen, len(t.gids))
	switch {
	case i < 0 || i >= n:
		return ibv.GID{}, fmt.Errorf("GID index %d of %d: %w", i, n, ibv.ErrInvalidArgument)
	case i >= len(t.gids) || !t.addrs[i].IsValid():
		return ibv.GID{}, fmt.Errorf("GID index %d: %w", i, ibv.ErrEmptyGID)
	}
	return t.gids[i], nil
}

// GIDTableLen is the GID table's length (the port's gid_tbl_len): the
// device's addresses, then empty entries up to minGIDTableLen.
func (d *Device) GIDTableLen() int { return max(minGIDTableLen, len(d.table.Load().gids)) }

// minGIDTableLen is the shortest GID table a device has. A kernel device's
// table is as long as its hardware's (ConnectX's 255 on RoCE, rxe's 1024),
// most entries empty; programs look for an empty one (rdma-core's tests)
// or read the table up to its end.
const minGIDTableLen = 16

// SetNeighbor records the MAC address of a peer IP address. Paths to
// addresses without an entry ask DeviceConfig.Resolve, or else use the
// broadcast address.
func (d *Device) SetNeighbor(a netip.Addr, mac [6]byte) {
	d.neighMu.Lock()
	d.neigh[a.Unmap()] = mac
	d.neighMu.Unlock()
}

// Close stops the engine goroutines. The link stays open; its owner closes
// it.
func (d *Device) Close() error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.stop.Swap(true) {
		return nil
	}
	for _, ln := range d.lanes {
		ln.wake()
	}
	for _, ln := range d.lanes {
		<-ln.done
		ln.napFile.Close()
	}
	return nil
}

// defaultSpin is DeviceConfig.Spin's default: a few round trips over
// AF_XDP in copy mode.
const defaultSpin = 50 * time.Microsecond

// defaultPollHold is DeviceConfig.PollHold's default: much longer than an
// application's pause between two polls (a sched_yield on a busy core).
// Each nap's end costs a wake-up that may displace the polling thread, so
// longer naps give a better tail latency. An
// application that stops polling without Unpoll waits up to this long for
// the engine goroutine.
const defaultPollHold = time.Millisecond

// maxNap bounds the engine goroutine's naps while an application keeps
// polling (see lane.nap): an application that stops polling without
// Unpoll, CQ.Wait or a post waits up to this long for the engine.
const maxNap = 64 * time.Millisecond
