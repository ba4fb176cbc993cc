package roce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/ibtransport"
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
	// PollHold is how long the engine goroutine naps at a time while an
	// application polls (Poll) and its own passes find nothing; it naps
	// again as long as the application polled meanwhile (default 1ms;
	// negative: Poll never runs the engine). An application that polls
	// drives the engine in its own thread, so a reply needs no hand-off
	// between threads.
	PollHold time.Duration
	// Engines is how many engines run the device's QPs, each in its own
	// goroutine on its own share of the link's receive queues (Splitter).
	// 0 runs one per receive queue, up to the number of CPUs; a link that
	// is not a Splitter, or has one queue, gets one engine.
	Engines int
}

// DeviceCounters count what the device did with frames, beyond the parse
// outcomes in Rx.
type DeviceCounters struct {
	Rx         RxCounters
	RxNotForUs atomic.Uint64 // RoCEv2 frames to an address not in the GID table
	TxFrames   atomic.Uint64
	TxNoBuffer atomic.Uint64 // times the link had no TX buffer free
	TxErrors   atomic.Uint64 // frames that could not be finished
	Loopback   atomic.Uint64 // packets between two QPs of this device
	Passes     atomic.Uint64 // engine passes, by the engine goroutine and in Poll
	PollPasses atomic.Uint64 // engine passes run by applications' Poll
}

// Device is a RoCEv2 adapter made of a Link and ibtransport engines. Each
// engine has a lane: a goroutine, started by NewDevice, and the link (or
// the share of its receive queues) it drives. The goroutine receives
// frames, checks and strips their encapsulation, hands the IB packets to
// the engine, and sends what the engine builds. An application that polls
// (Poll) runs those passes in its own thread instead, while it polls.
type Device struct {
	link    Link
	group   *ibtransport.Group
	lanes   []*lane
	addrs   []netip.Addr
	gids    []ibtransport.GID
	mac     [6]byte
	batch   int
	spin    time.Duration
	resolve func(netip.Addr) ([6]byte, error)
	neighMu sync.Mutex
	neigh   map[netip.Addr][6]byte

	pollHold time.Duration
	stop     atomic.Bool
	closeMu  sync.Mutex
}

// lane is one engine of a device with the link it drives and the state of
// the goroutine that runs it.
type lane struct {
	d    *Device
	link Link
	eng  *ibtransport.Engine
	ctr  DeviceCounters

	rxFrame Frame
	rxInfo  ibtransport.RecvInfo
	onFrame func([]byte)
	txBuf   []byte
	// unflushed counts the bytes of frames sent since the last Flush.
	unflushed int
	// Loopback: packets to one of the device's own GIDs never reach the
	// link; they wait in loopQ, in buffers of the device's own, until the
	// engine loop hands them back to the engine.
	loopFree [][]byte
	loopBuf  []byte
	loopQ    []loopPacket

	// owner is held (1) by whichever goroutine runs an engine pass: the
	// engine goroutine or an application in Poll. It orders all the
	// engine-side state above and the engine's between them.
	owner atomic.Int32
	// polls counts applications' Poll calls; the engine goroutine naps
	// while it keeps changing (seenPolls is its last look), until Unpoll
	// sets handBack. The device's pollHold is the length of one nap.
	polls     atomic.Uint64
	seenPolls uint64
	handBack  atomic.Bool
	napping   atomic.Bool
	napFD     int
	// working is set while the engine goroutine's passes find work: an
	// application's Poll then leaves the passes to it.
	working atomic.Bool

	done chan struct{}
}

// NewDevice creates a device on link and starts its engine goroutines.
func NewDevice(link Link, cfg DeviceConfig) (*Device, error) {
	if len(cfg.Addrs) == 0 {
		return nil, fmt.Errorf("new RoCE device: no addresses: %w", ibtransport.ErrInvalidArgument)
	}
	d := &Device{link: link, mac: link.HardwareAddr(), batch: cfg.RxBatch, resolve: cfg.Resolve, neigh: map[netip.Addr][6]byte{}}
	if d.batch <= 0 {
		d.batch = 64
	}
	d.spin = cfg.Spin
	if d.spin == 0 {
		d.spin = defaultSpin
	}
	d.pollHold = cfg.PollHold
	if d.pollHold == 0 {
		d.pollHold = defaultPollHold
	}
	for _, a := range cfg.Addrs {
		if !a.IsValid() {
			return nil, fmt.Errorf("new RoCE device: invalid address: %w", ibtransport.ErrInvalidArgument)
		}
		d.addrs = append(d.addrs, a.Unmap())
		d.gids = append(d.gids, GIDFromAddr(a))
	}
	links, err := laneLinks(link, cfg.Engines)
	if err != nil {
		return nil, fmt.Errorf("new RoCE device: %w", err)
	}
	ports := make([]ibtransport.Port, len(links))
	wakes := make([]func(), len(links))
	for i, l := range links {
		ln := &lane{d: d, link: l, done: make(chan struct{}), napFD: -1}
		ln.onFrame = ln.receive
		if ln.napFD, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
			for _, o := range d.lanes {
				unix.Close(o.napFD)
			}
			return nil, fmt.Errorf("new RoCE device: eventfd: %w", err)
		}
		d.lanes = append(d.lanes, ln)
		ports[i], wakes[i] = ln, ln.wake
	}
	d.group = ibtransport.NewGroup(ports, wakes)
	for i, ln := range d.lanes {
		ln.eng = d.group.Engines()[i]
		go ln.run()
	}
	return d, nil
}

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

// wake is the engine's doorbell: it ends the engine goroutine's wait for
// packets, or its nap while an application polls.
func (ln *lane) wake() {
	ln.link.Wake()
	if ln.napping.Load() {
		ln.endNap()
	}
}

func (ln *lane) endNap() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(ln.napFD, one[:])
}

// Poll runs one engine pass in the calling goroutine, unless another
// goroutine is running one: it receives what arrived, sends what was
// posted, and fills the completion queues. It reports whether the pass
// did any of that. verbs' CQ.Poll calls it when the CQ is empty. While an
// application keeps
// polling, the engine goroutine naps and leaves the passes to it, so that
// a reply or a completion needs no hand-off between two polling threads
// (on two cores shared by both ends, each hand-off waited for the
// scheduler: write_lat 6.2µs against 1.5µs for a raw AF_XDP ping-pong).
// An application that stops polling calls Unpoll, or the engine goroutine
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

func (ln *lane) poll() bool {
	ln.polls.Add(1) // no clock: a clock read costs as much as a pass's other checks
	if ln.working.Load() || !ln.owner.CompareAndSwap(0, 1) {
		return false
	}
	worked, _, _ := ln.pass()
	ln.owner.Store(0)
	ln.ctr.PollPasses.Add(1)
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

// appPolled reports whether an application called Poll since the engine
// goroutine last looked, and has not called Unpoll since.
func (ln *lane) appPolled() bool {
	if ln.d.pollHold < 0 {
		return false
	}
	p := ln.polls.Load()
	polled := p != ln.seenPolls
	ln.seenPolls = p
	if ln.handBack.Swap(false) {
		return false
	}
	return polled
}

// pass is one round of the engine: receive, process, transmit. The caller
// holds owner.
func (ln *lane) pass() (worked, busy bool, wait time.Duration) {
	ln.ctr.Passes.Add(1)
	sent := ln.eng.Ctr.TxPackets.Load()
	n := ln.link.Receive(ln.onFrame, ln.d.batch)
	busy, wait = ln.eng.Process()
	ln.unflushed = 0
	if err := ln.link.Flush(); errors.Is(err, ErrLinkClosed) {
		ln.d.stop.Store(true)
	}
	looped := ln.deliverLoopback()
	worked = n > 0 || busy || looped || ln.eng.Ctr.TxPackets.Load() != sent
	return worked, busy, wait
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
		ibtransport.AddCounters(&sum, &ln.ctr)
	}
	return &sum
}

// Link returns the device's link.
func (d *Device) Link() Link { return d.link }

// GID returns entry i of the GID table.
func (d *Device) GID(i int) (ibtransport.GID, error) {
	if i < 0 || i >= len(d.gids) {
		return ibtransport.GID{}, fmt.Errorf("GID index %d of %d: %w", i, len(d.gids), ibtransport.ErrInvalidArgument)
	}
	return d.gids[i], nil
}

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
		unix.Close(ln.napFD)
	}
	return nil
}

// defaultSpin is DeviceConfig.Spin's default: a few round trips over
// AF_XDP in copy mode.
const defaultSpin = 50 * time.Microsecond

// defaultPollHold is DeviceConfig.PollHold's default: much longer than an
// application's pause between two polls (a sched_yield on a busy core).
// Each nap's end costs a wake-up that may displace the polling thread:
// write_lat's p99 was 34-41us with 200us naps, 27-36us with 1ms (4 runs
// each). An application that stops polling without Unpoll waits up to
// this long for the engine goroutine.
const defaultPollHold = time.Millisecond

func (ln *lane) run() {
	defer close(ln.done)
	defer ln.eng.Stop()
	// On the way out, keep owner for good: an application's Poll then
	// never runs a pass on a stopped engine.
	defer func() {
		for !ln.owner.CompareAndSwap(0, 1) {
			osYield()
		}
	}()
	var lastWork time.Time
	for !ln.d.stop.Load() {
		if !ln.owner.CompareAndSwap(0, 1) {
			osYield() // an application is in a pass
			continue
		}
		worked, _, wait := ln.pass()
		ln.working.Store(worked)
		if worked {
			ln.owner.Store(0)
			lastWork = time.Now()
			continue
		}
		if ln.appPolled() {
			ln.owner.Store(0)
			ln.nap()
			continue
		}
		if ln.d.spin > 0 && time.Since(lastWork) < ln.d.spin {
			ln.owner.Store(0)
			// Poll again soon, but let other threads (a poller of this
			// process or of the peer) have the CPU meanwhile. Gosched
			// first runs the goroutines this one readied (a CQ.Wait or
			// completion channel reader): the runtime queues them on
			// this goroutine's P, and while it spins here another thread
			// took them only about 75µs later (go tool trace).
			runtime.Gosched()
			osYield()
			continue
		}
		// The wait keeps owner: the link's Wait looks at its TX state.
		// An application's Poll meanwhile returns at once; its posts ring
		// the doorbell.
		if ln.eng.PrepareSleep() {
			err := ln.link.Wait(wait)
			ln.eng.Awake()
			if errors.Is(err, ErrLinkClosed) {
				ln.owner.Store(0)
				return
			}
		}
		ln.owner.Store(0)
	}
}

// nap sleeps while an application polls: until Unpoll, a command or the
// doorbell, or for pollHold, after which run looks again whether the
// application still polls.
func (ln *lane) nap() {
	ln.napping.Store(true)
	// A command or Unpoll that came before napping was set did not end
	// the nap: look for them after setting it.
	if ln.eng.HasWork() || ln.handBack.Load() {
		ln.napping.Store(false)
		return
	}
	fds := [1]unix.PollFd{{Fd: int32(ln.napFD), Events: unix.POLLIN}}
	ts := unix.NsecToTimespec(int64(ln.d.pollHold))
	unix.Ppoll(fds[:], &ts, nil) // EINTR just ends the nap early
	ln.napping.Store(false)
	if fds[0].Revents&unix.POLLIN != 0 {
		var v [8]byte
		unix.Read(ln.napFD, v[:])
	}
}

// osYield gives the CPU to another runnable thread, if any (sched_yield).
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// receive handles one frame from the link.
func (ln *lane) receive(frame []byte) {
	f := &ln.rxFrame
	err := ParseFrame(frame, f)
	ln.ctr.Rx.Count(err)
	if err != nil {
		return
	}
	dst := GIDFromAddr(f.Dst)
	idx := -1
	for i := range ln.d.gids {
		if ln.d.gids[i] == dst {
			idx = i
			break
		}
	}
	if idx < 0 {
		ln.ctr.RxNotForUs.Add(1)
		return
	}
	ln.rxInfo.SGID = GIDFromAddr(f.Src)
	ln.rxInfo.DGID = dst
	ln.rxInfo.DGIDIndex = idx
	ln.eng.Receive(f.IB, &ln.rxInfo)
}

type loopPacket struct {
	buf  []byte
	n    int
	info ibtransport.RecvInfo
}

// loopBuffers is the number of loopback packets that may wait at once.
const loopBuffers = 256

// deliverLoopback hands the packets QPs sent to QPs of the same device to
// the engine. It reports whether there were any.
func (ln *lane) deliverLoopback() bool {
	if len(ln.loopQ) == 0 {
		return false
	}
	// Receive queues responses for the next Process but sends nothing, so
	// the queue does not grow while it is walked.
	for i := range ln.loopQ {
		lp := &ln.loopQ[i]
		ln.eng.Receive(lp.buf[:lp.n], &lp.info)
		ln.loopFree = append(ln.loopFree, lp.buf)
		lp.buf = nil
	}
	ln.loopQ = ln.loopQ[:0]
	return true
}

// largest header before a payload: BTH + RETH + ImmDt (WRITE ONLY with
// immediate).
const maxPayloadHeaders = ibtransport.BTHLen + ibtransport.RETHLen + ibtransport.ImmDtLen

// Path prepares transmission to av as connecting a QP does, on the
// device's first engine: it resolves the neighbour and checks the MTU.
func (d *Device) Path(av *ibtransport.AddressVector, qpn uint32, pathMTU int) (ibtransport.TxPath, error) {
	return d.lanes[0].Path(av, qpn, pathMTU)
}

// Path implements ibtransport.Port.
func (ln *lane) Path(av *ibtransport.AddressVector, qpn uint32, pathMTU int) (ibtransport.TxPath, error) {
	if int(av.SGIDIndex) >= len(ln.d.addrs) {
		return nil, fmt.Errorf("source GID index %d of %d: %w", av.SGIDIndex, len(ln.d.addrs), ibtransport.ErrInvalidArgument)
	}
	src := ln.d.addrs[av.SGIDIndex]
	dst := AddrFromGID(av.DGID)
	if src.Is4() != dst.Is4() {
		return nil, fmt.Errorf("GIDs %v and %v: %w", src, dst, ErrAddressFamily)
	}
	for i, a := range ln.d.addrs {
		if a == dst {
			if ln.loopFree == nil && ln.loopQ == nil {
				size := maxPayloadHeaders + ibtransport.MTU4096.Bytes() + 8
				backing := make([]byte, loopBuffers*size)
				for j := range loopBuffers {
					ln.loopFree = append(ln.loopFree, backing[j*size:(j+1)*size:(j+1)*size])
				}
				ln.loopQ = make([]loopPacket, 0, loopBuffers)
			}
			return &loopPath{ln: ln, info: ibtransport.RecvInfo{SGID: ln.d.gids[av.SGIDIndex], DGID: ln.d.gids[i], DGIDIndex: i}}, nil
		}
	}
	p := &path{ln: ln, encap: Encap{SrcMAC: ln.d.mac, DstMAC: [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		Src: src, Dst: dst, TrafficClass: av.TrafficClass, HopLimit: av.HopLimit, FlowLabel: av.FlowLabel,
		SrcPort: SourcePort(qpn)}}
	if p.encap.HopLimit == 0 {
		p.encap.HopLimit = 64
	}
	ln.d.neighMu.Lock()
	mac, ok := ln.d.neigh[dst]
	ln.d.neighMu.Unlock()
	switch {
	case ok:
		p.encap.DstMAC = mac
	case ln.d.resolve != nil:
		// Runs on the engine goroutine, during ModifyQP to RTR: resolution
		// is not on the packet path.
		mac, err := ln.d.resolve(dst)
		if err != nil {
			return nil, fmt.Errorf("resolve %v: %w", dst, err)
		}
		p.encap.DstMAC = mac
		ln.d.SetNeighbor(dst, mac)
	}
	p.hl = p.encap.HeaderLen()
	ipLen := p.hl - ethHeaderLen
	p.maxIB = ln.link.MTU() - ipLen - ibtransport.ICRCLen
	if maxPayloadHeaders+pathMTU > p.maxIB {
		return nil, fmt.Errorf("path MTU %d does not fit the link MTU %d: %w", pathMTU, ln.link.MTU(), ibtransport.ErrInvalidArgument)
	}
	return p, nil
}

// path sends one QP's packets: it caches the QP's encapsulation.
type path struct {
	ln    *lane
	encap Encap
	hl    int
	maxIB int
}

// Buffer implements ibtransport.TxPath: room after the headers in a TX frame.
func (p *path) Buffer() []byte {
	ln := p.ln
	if ln.txBuf == nil {
		if ln.txBuf = ln.link.TxFrame(); ln.txBuf == nil {
			ln.ctr.TxNoBuffer.Add(1)
			return nil
		}
	}
	return ln.txBuf[p.hl : p.hl+p.maxIB]
}

// Send implements ibtransport.TxPath.
func (p *path) Send(n int) {
	ln := p.ln
	l, err := p.encap.Finish(ln.txBuf, n)
	if err != nil {
		ln.ctr.TxErrors.Add(1)
		return // the buffer stays for the next packet
	}
	ln.link.Send(ln.txBuf[:l])
	ln.txBuf = nil
	ln.ctr.TxFrames.Add(1)
	// Kick the link in the middle of a long pass too: the peer starts on
	// the first frames while this side builds the rest, and it does not
	// fall asleep waiting for a whole pass (each wake-up of a sleeping
	// peer costs this side's sendto a good microsecond). 1024 QPs of 64
	// KiB WRITEs: 13.3 -> 14.7 Gb/s (a kick per pass of up to 128 frames
	// before, one per 32 4-KiB frames now); small frames still go in one
	// kick per pass.
	if ln.unflushed += l; ln.unflushed >= flushBytes {
		ln.link.Flush()
		ln.unflushed = 0
	}
}

// flushBytes is how many bytes of frames Send queues before it kicks the
// link, even in the middle of a pass.
const flushBytes = 128 << 10

// loopPath sends one QP's packets to another QP of the same device, the way
// a NIC loops back traffic to its own GIDs.
type loopPath struct {
	ln   *lane
	info ibtransport.RecvInfo
}

// Buffer implements ibtransport.TxPath.
func (p *loopPath) Buffer() []byte {
	ln := p.ln
	if ln.loopBuf == nil {
		if len(ln.loopFree) == 0 {
			return nil // freed when the engine loop delivers the queue
		}
		ln.loopBuf = ln.loopFree[len(ln.loopFree)-1]
		ln.loopFree = ln.loopFree[:len(ln.loopFree)-1]
	}
	return ln.loopBuf
}

// Send implements ibtransport.TxPath.
func (p *loopPath) Send(n int) {
	ln := p.ln
	ln.loopQ = append(ln.loopQ, loopPacket{buf: ln.loopBuf, n: n, info: p.info})
	ln.loopBuf = nil
	ln.ctr.Loopback.Add(1)
}
