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
	// and SetNeighbor has no entry (for example roce.ResolveNeighbor over the
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

// Device is a RoCEv2 adapter made of a Link and an ibtransport engine. One
// goroutine, started by NewDevice, runs the engine: it receives frames,
// checks and strips their encapsulation, hands the IB packets to the
// engine, and sends what the engine builds. An application that polls
// (Poll) runs those passes in its own thread instead, while it polls.
type Device struct {
	link    Link
	eng     *ibtransport.Engine
	addrs   []netip.Addr
	gids    []ibtransport.GID
	mac     [6]byte
	batch   int
	spin    time.Duration
	resolve func(netip.Addr) ([6]byte, error)
	Ctr     DeviceCounters
	neighMu sync.Mutex
	neigh   map[netip.Addr][6]byte

	// Engine goroutine state.
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
	// sets handBack. pollHold is the length of one nap.
	polls     atomic.Uint64
	seenPolls uint64
	handBack  atomic.Bool
	pollHold  time.Duration
	napping   atomic.Bool
	napFD     int
	// working is set while the engine goroutine's passes find work: an
	// application's Poll then leaves the passes to it.
	working atomic.Bool

	stop    atomic.Bool
	done    chan struct{}
	closeMu sync.Mutex
}

// NewDevice creates a device on link and starts its engine goroutine.
func NewDevice(link Link, cfg DeviceConfig) (*Device, error) {
	if len(cfg.Addrs) == 0 {
		return nil, fmt.Errorf("new RoCE device: no addresses: %w", ibtransport.ErrInvalidArgument)
	}
	d := &Device{link: link, mac: link.HardwareAddr(), batch: cfg.RxBatch, resolve: cfg.Resolve, neigh: map[netip.Addr][6]byte{},
		done: make(chan struct{})}
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
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("new RoCE device: eventfd: %w", err)
	}
	d.napFD = fd
	d.eng = ibtransport.NewEngine(d, d.wake)
	d.onFrame = d.receive
	go d.run()
	return d, nil
}

// wake is the engine's doorbell: it ends the engine goroutine's wait for
// packets, or its nap while an application polls.
func (d *Device) wake() {
	d.link.Wake()
	if d.napping.Load() {
		d.endNap()
	}
}

func (d *Device) endNap() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(d.napFD, one[:])
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
	d.polls.Add(1) // no clock: a clock read costs as much as a pass's other checks
	if d.working.Load() || !d.owner.CompareAndSwap(0, 1) {
		return false
	}
	worked, _, _ := d.pass()
	d.owner.Store(0)
	d.Ctr.PollPasses.Add(1)
	return worked
}

// Unpoll tells the device that the application stopped polling (it is
// about to block): the engine goroutine takes over at once.
func (d *Device) Unpoll() {
	if d.pollHold < 0 {
		return
	}
	d.handBack.Store(true)
	if d.napping.Load() {
		d.endNap()
	}
}

// appPolled reports whether an application called Poll since the engine
// goroutine last looked, and has not called Unpoll since.
func (d *Device) appPolled() bool {
	if d.pollHold < 0 {
		return false
	}
	p := d.polls.Load()
	polled := p != d.seenPolls
	d.seenPolls = p
	if d.handBack.Swap(false) {
		return false
	}
	return polled
}

// pass is one round of the engine: receive, process, transmit. The caller
// holds owner.
func (d *Device) pass() (worked, busy bool, wait time.Duration) {
	d.Ctr.Passes.Add(1)
	sent := d.eng.Ctr.TxPackets.Load()
	n := d.link.Receive(d.onFrame, d.batch)
	busy, wait = d.eng.Process()
	d.unflushed = 0
	if err := d.link.Flush(); errors.Is(err, ErrLinkClosed) {
		d.stop.Store(true)
	}
	looped := d.deliverLoopback()
	worked = n > 0 || busy || looped || d.eng.Ctr.TxPackets.Load() != sent
	return worked, busy, wait
}

// Engine returns the transport engine.
func (d *Device) Engine() *ibtransport.Engine { return d.eng }

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

// Close stops the engine goroutine. The link stays open; its owner closes
// it.
func (d *Device) Close() error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.stop.Swap(true) {
		return nil
	}
	d.wake()
	<-d.done
	unix.Close(d.napFD)
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

func (d *Device) run() {
	defer close(d.done)
	defer d.eng.Stop()
	// On the way out, keep owner for good: an application's Poll then
	// never runs a pass on a stopped engine.
	defer func() {
		for !d.owner.CompareAndSwap(0, 1) {
			osYield()
		}
	}()
	var lastWork time.Time
	for !d.stop.Load() {
		if !d.owner.CompareAndSwap(0, 1) {
			osYield() // an application is in a pass
			continue
		}
		worked, _, wait := d.pass()
		d.working.Store(worked)
		if worked {
			d.owner.Store(0)
			lastWork = time.Now()
			continue
		}
		if d.appPolled() {
			d.owner.Store(0)
			d.nap()
			continue
		}
		if d.spin > 0 && time.Since(lastWork) < d.spin {
			d.owner.Store(0)
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
		if d.eng.PrepareSleep() {
			err := d.link.Wait(wait)
			d.eng.Awake()
			if errors.Is(err, ErrLinkClosed) {
				d.owner.Store(0)
				return
			}
		}
		d.owner.Store(0)
	}
}

// nap sleeps while an application polls: until Unpoll, a command or the
// doorbell, or for pollHold, after which run looks again whether the
// application still polls.
func (d *Device) nap() {
	d.napping.Store(true)
	// A command or Unpoll that came before napping was set did not end
	// the nap: look for them after setting it.
	if d.eng.HasCommands() || d.handBack.Load() {
		d.napping.Store(false)
		return
	}
	fds := [1]unix.PollFd{{Fd: int32(d.napFD), Events: unix.POLLIN}}
	ts := unix.NsecToTimespec(int64(d.pollHold))
	unix.Ppoll(fds[:], &ts, nil) // EINTR just ends the nap early
	d.napping.Store(false)
	if fds[0].Revents&unix.POLLIN != 0 {
		var v [8]byte
		unix.Read(d.napFD, v[:])
	}
}

// osYield gives the CPU to another runnable thread, if any (sched_yield).
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// receive handles one frame from the link.
func (d *Device) receive(frame []byte) {
	f := &d.rxFrame
	err := ParseFrame(frame, f)
	d.Ctr.Rx.Count(err)
	if err != nil {
		return
	}
	dst := GIDFromAddr(f.Dst)
	idx := -1
	for i := range d.gids {
		if d.gids[i] == dst {
			idx = i
			break
		}
	}
	if idx < 0 {
		d.Ctr.RxNotForUs.Add(1)
		return
	}
	d.rxInfo.SGID = GIDFromAddr(f.Src)
	d.rxInfo.DGID = dst
	d.rxInfo.DGIDIndex = idx
	d.eng.Receive(f.IB, &d.rxInfo)
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
func (d *Device) deliverLoopback() bool {
	if len(d.loopQ) == 0 {
		return false
	}
	// Receive queues responses for the next Process but sends nothing, so
	// the queue does not grow while it is walked.
	for i := range d.loopQ {
		lp := &d.loopQ[i]
		d.eng.Receive(lp.buf[:lp.n], &lp.info)
		d.loopFree = append(d.loopFree, lp.buf)
		lp.buf = nil
	}
	d.loopQ = d.loopQ[:0]
	return true
}

// largest header before a payload: BTH + RETH + ImmDt (WRITE ONLY with
// immediate).
const maxPayloadHeaders = ibtransport.BTHLen + ibtransport.RETHLen + ibtransport.ImmDtLen

// Path implements ibtransport.Port.
func (d *Device) Path(av *ibtransport.AddressVector, qpn uint32, pathMTU int) (ibtransport.TxPath, error) {
	if int(av.SGIDIndex) >= len(d.addrs) {
		return nil, fmt.Errorf("source GID index %d of %d: %w", av.SGIDIndex, len(d.addrs), ibtransport.ErrInvalidArgument)
	}
	src := d.addrs[av.SGIDIndex]
	dst := AddrFromGID(av.DGID)
	if src.Is4() != dst.Is4() {
		return nil, fmt.Errorf("GIDs %v and %v: %w", src, dst, ErrAddressFamily)
	}
	for i, a := range d.addrs {
		if a == dst {
			if d.loopFree == nil && d.loopQ == nil {
				size := maxPayloadHeaders + ibtransport.MTU4096.Bytes() + 8
				backing := make([]byte, loopBuffers*size)
				for j := range loopBuffers {
					d.loopFree = append(d.loopFree, backing[j*size:(j+1)*size:(j+1)*size])
				}
				d.loopQ = make([]loopPacket, 0, loopBuffers)
			}
			return &loopPath{d: d, info: ibtransport.RecvInfo{SGID: d.gids[av.SGIDIndex], DGID: d.gids[i], DGIDIndex: i}}, nil
		}
	}
	p := &path{d: d, encap: Encap{SrcMAC: d.mac, DstMAC: [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		Src: src, Dst: dst, TrafficClass: av.TrafficClass, HopLimit: av.HopLimit, FlowLabel: av.FlowLabel,
		SrcPort: SourcePort(qpn)}}
	if p.encap.HopLimit == 0 {
		p.encap.HopLimit = 64
	}
	d.neighMu.Lock()
	mac, ok := d.neigh[dst]
	d.neighMu.Unlock()
	switch {
	case ok:
		p.encap.DstMAC = mac
	case d.resolve != nil:
		// Runs on the engine goroutine, during ModifyQP to RTR: resolution
		// is not on the packet path.
		mac, err := d.resolve(dst)
		if err != nil {
			return nil, fmt.Errorf("resolve %v: %w", dst, err)
		}
		p.encap.DstMAC = mac
		d.SetNeighbor(dst, mac)
	}
	p.hl = p.encap.HeaderLen()
	ipLen := p.hl - ethHeaderLen
	p.maxIB = d.link.MTU() - ipLen - ibtransport.ICRCLen
	if maxPayloadHeaders+pathMTU > p.maxIB {
		return nil, fmt.Errorf("path MTU %d does not fit the link MTU %d: %w", pathMTU, d.link.MTU(), ibtransport.ErrInvalidArgument)
	}
	return p, nil
}

// path sends one QP's packets: it caches the QP's encapsulation.
type path struct {
	d     *Device
	encap Encap
	hl    int
	maxIB int
}

// Buffer implements ibtransport.TxPath: room after the headers in a TX frame.
func (p *path) Buffer() []byte {
	d := p.d
	if d.txBuf == nil {
		if d.txBuf = d.link.TxFrame(); d.txBuf == nil {
			d.Ctr.TxNoBuffer.Add(1)
			return nil
		}
	}
	return d.txBuf[p.hl : p.hl+p.maxIB]
}

// Send implements ibtransport.TxPath.
func (p *path) Send(n int) {
	d := p.d
	l, err := p.encap.Finish(d.txBuf, n)
	if err != nil {
		d.Ctr.TxErrors.Add(1)
		return // the buffer stays for the next packet
	}
	d.link.Send(d.txBuf[:l])
	d.txBuf = nil
	d.Ctr.TxFrames.Add(1)
	// Kick the link in the middle of a long pass too: the peer starts on
	// the first frames while this side builds the rest, and it does not
	// fall asleep waiting for a whole pass (each wake-up of a sleeping
	// peer costs this side's sendto a good microsecond). 1024 QPs of 64
	// KiB WRITEs: 13.3 -> 14.7 Gb/s (a kick per pass of up to 128 frames
	// before, one per 32 4-KiB frames now); small frames still go in one
	// kick per pass.
	if d.unflushed += l; d.unflushed >= flushBytes {
		d.link.Flush()
		d.unflushed = 0
	}
}

// flushBytes is how many bytes of frames Send queues before it kicks the
// link, even in the middle of a pass.
const flushBytes = 128 << 10

// loopPath sends one QP's packets to another QP of the same device, the way
// a NIC loops back traffic to its own GIDs.
type loopPath struct {
	d    *Device
	info ibtransport.RecvInfo
}

// Buffer implements ibtransport.TxPath.
func (p *loopPath) Buffer() []byte {
	d := p.d
	if d.loopBuf == nil {
		if len(d.loopFree) == 0 {
			return nil // freed when the engine loop delivers the queue
		}
		d.loopBuf = d.loopFree[len(d.loopFree)-1]
		d.loopFree = d.loopFree[:len(d.loopFree)-1]
	}
	return d.loopBuf
}

// Send implements ibtransport.TxPath.
func (p *loopPath) Send(n int) {
	d := p.d
	d.loopQ = append(d.loopQ, loopPacket{buf: d.loopBuf, n: n, info: p.info})
	d.loopBuf = nil
	d.Ctr.Loopback.Add(1)
}
