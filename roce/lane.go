package roce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/internal/cpupin"
)

// One frame's way through a lane (each lane is an engine of the device
// and the link queue it drives):
//
//	receive: Link.Receive hands each frame to lane.receive, which shows
//	  it to the lane's Tap if any (tap.go), parses Ethernet, IP and UDP
//	  and checks the ICRC (ParseFrame, frame.go), finds the destination
//	  GID's index, and gives the IB packet to ibtransport.Engine.Receive;
//	process: Engine.Process runs each active QP's responder, completer
//	  and requester (ibtransport/engine.go);
//	transmit: a QP's packets go out through its TxPath (path, txpath.go):
//	  Buffer lends the IB part of a link frame, Send writes Ethernet, IP,
//	  UDP (the path's template of them, encaptmpl.go) and the ICRC
//	  around it (icrc.go), the Tap see it, and Link.Send queue it;
//	  Link.Flush kicks the link once a pass (and every flushBytes).
//	  Packets between two QPs of the device go through loopPath
//	  (loopback.go) instead of the link.
//
// pass is one round of the three; run is the lane's goroutine, which
// spins, naps or sleeps between passes.

// lane is one engine of a device with the link it drives and the state of
// the goroutine that runs it.
type lane struct {
	d    *Device
	link Link
	eng  *ibtransport.Engine
	ctr  DeviceCounters

	rxFrame Frame
	flowKey flowKey // steerRaw's (flow.go)
	rxInfo  ibtransport.RecvInfo
	onFrame func([]byte)
	txBuf   []byte
	// unflushed counts the bytes of frames sent since the last Flush.
	unflushed int
	// held are the frames waiting for their payloads (held.go); spare the
	// TX buffers of frames not sent, used before the link's.
	held  []heldFrame
	spare [][]byte
	// Loopback (loopback.go): packets to one of the device's own GIDs
	// never reach the link; they wait in loopQ, in the lane's own buffers,
	// until its next pass hands them back to the engine.
	loopFree [][]byte
	loopBuf  []byte
	loopQ    []loopPacket
	// Raw packet QPs' frames to the device's flows (raw.go) wait in
	// rawLoopQ, in buffers of rawLoopFree, likewise.
	rawLoopFree [][]byte
	rawLoopQ    [][]byte

	// owner is held (1) by whichever goroutine runs an engine pass: the
	// engine goroutine or an application in Poll. It orders all the
	// engine-side state above and the engine's between them.
	owner atomic.Int32
	// polls counts applications' Poll calls; the engine goroutine naps
	// while it keeps changing (seenPolls is its last look), until Unpoll
	// sets handBack. The first nap lasts the device's pollHold, each next
	// one twice the last, up to maxNap (napLen: the last nap's length; 0
	// once the application stopped polling).
	polls     atomic.Uint64
	seenPolls uint64
	napLen    time.Duration
	handBack  atomic.Bool
	napping   atomic.Bool
	// napFile is an eventfd in the runtime's network poller: a nap parks
	// the goroutine instead of holding its P in a system call.
	napFile *os.File
	// working is set while the engine goroutine's passes find work: an
	// application's Poll then leaves the passes to it.
	working atomic.Bool

	// cpu is where the link's interrupts arrive (CPULink), -1 if nowhere
	// known, or the device's EngineCPUs (holdCPU): the engine goroutine's
	// thread stays there.
	cpu     int
	holdCPU bool
	// The engine goroutine's own: its idle passes in a row since the last
	// that worked, when the first was (spin, on monoClock), and whether it
	// napped since its last pass.
	spins     int
	idleSince time.Duration
	napped    bool
	// raiser raises the engine goroutine's thread (DeviceConfig.Priority;
	// nil without), and contended is until when its CPU is taken to be
	// contested (contention.go; 0: not).
	raiser    *raiser
	contended time.Duration

	// doorbell, if set, is the hosts' eventfd the link's Wait waits on
	// (host.go, first lane only).
	doorbell atomic.Pointer[hostDoorbell]

	// tap, if set, sees the lane's frames (tap.go).
	tap atomic.Pointer[tapHolder]

	// host, if set, are the daemon's clients' queues (first lane only).
	host atomic.Pointer[HostQueues]

	done chan struct{}
}

// newLane makes d's lane on link l; NewDevice sets its engine and starts it.
func newLane(d *Device, l Link, cpu int) (*lane, error) {
	ln := &lane{d: d, link: l, done: make(chan struct{}), cpu: -1}
	switch c, ok := l.(CPULink); {
	case cpu >= 0:
		// Not asked of the link: CPU moves the link's interrupts there.
		ln.cpu, ln.holdCPU = cpu, true
	case ok:
		ln.cpu = c.CPU()
	}
	ln.onFrame = ln.receive
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	ln.napFile = os.NewFile(uintptr(fd), "softnic-nap")
	return ln, nil
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
	ln.napFile.Write(one[:])
}

func (ln *lane) poll() bool {
	ln.polls.Add(1) // no clock: a clock read costs as much as a pass's other checks
	// Once the device stops, no poll takes owner: the stopping engine
	// goroutine waits to take it for good (keepOwner), and pollers that
	// kept taking it between passes starved it (Close hung in a test).
	if ln.d.stop.Load() || ln.working.Load() || !ln.owner.CompareAndSwap(0, 1) {
		return false
	}
	worked, _, _ := ln.pass()
	ln.owner.Store(0)
	ln.ctr.PollPasses.Add(1)
	return worked
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
// (the engine goroutine, or an application in Poll) holds owner.
func (ln *lane) pass() (worked, busy bool, wait time.Duration) {
	ln.ctr.Passes.Add(1)
	sent := ln.eng.Ctr.TxPackets.Load()
	posted := ln.pollHost()
	n := ln.link.Receive(ln.onFrame, ln.d.batch)
	busy, wait = ln.eng.Process()
	ln.release()
	ln.unflushed = 0
	if err := ln.link.Flush(); errors.Is(err, ErrLinkClosed) {
		ln.d.stop.Store(true)
	}
	looped := ln.deliverLoopback()
	worked = n > 0 || busy || looped || posted || ln.eng.Ctr.TxPackets.Load() != sent
	return worked, busy, wait
}

func (ln *lane) run() {
	defer close(ln.done)
	defer ln.eng.Exit()
	defer ln.keepOwner()
	pin := ln.pinToCPU()
	defer pin.Stop()
	ln.startRaiser()
	defer ln.stopRaiser()
	for !ln.d.stop.Load() {
		pin.Check()
		if !ln.owner.CompareAndSwap(0, 1) {
			// An application is in a pass: it polls. Waiting for the
			// pass to end in a loop of yields took a whole second CPU
			// from a two-vCPU guest, as
			// the application begins its next pass at once.
			ln.nap()
			continue
		}
		if ln.napped {
			// The application's passes may have stopped long ago.
			ln.eng.Awake()
			ln.napped = false
		}
		worked, _, wait := ln.pass()
		ln.working.Store(worked)
		switch {
		case worked:
			ln.owner.Store(0)
			ln.spins = 0
			if ln.raiser != nil {
				ln.afterWork()
			}
		case ln.appPolled():
			ln.lower()
			ln.owner.Store(0)
			ln.nap()
		case ln.isContended():
			// Idle where applications take the CPU: sleep now, as an
			// interrupt-driven NIC does, and be woken at priority.
			if ln.sleep(wait) {
				return
			}
		case ln.spin():
		case ln.sleep(wait):
			return
		}
	}
}

// keepOwner takes owner for good as the engine stops: an application's
// Poll then never runs a pass on a stopped engine.
func (ln *lane) keepOwner() {
	for !ln.owner.CompareAndSwap(0, 1) {
		osYield()
	}
}

// pinToCPU keeps the engine goroutine on the CPU of the link's interrupts,
// if it has one, as a NIC driver's NAPI runs: in copy mode the receive
// softirq has just copied the frames there (package cpupin says why moving
// hurts), or on the CPU the device gave it (EngineCPUs), held. The Pin is
// nil otherwise.
func (ln *lane) pinToCPU() *cpupin.Pin {
	switch {
	case ln.holdCPU:
		return cpupin.StartHeld(ln.cpu)
	case ln.cpu < 0:
		return nil
	}
	return cpupin.StartOn(ln.cpu)
}

// spin, after a pass that found nothing, gives owner back and yields if
// the engine has not been idle for the device's spin yet, and reports
// whether it did. The spin is timed from the first idle pass, and the
// clock read then and every few spins only, the monotonic clock alone
// (monoClock): where reading it is slow (a guest on the HPET, a system
// call and an emulated device each time) a reading after every pass that
// worked took 5 % of a write_bw client's CPU time.
func (ln *lane) spin() bool {
	ln.napLen = 0
	if ln.spins == 0 {
		ln.lower() // spin at normal priority: a raised spin starves the CPU
		ln.idleSince = monoClock()
	}
	ln.spins++
	if ln.d.spin <= 0 {
		return false
	}
	if ln.spins&7 == 0 {
		if idle := monoClock() - ln.idleSince; idle >= ln.d.spin {
			ln.noteSpin(idle)
			return false
		}
	}
	ln.owner.Store(0)
	// Poll again soon, but let other threads (a poller of this process or
	// of the peer) have the CPU meanwhile. The first spin after work also
	// runs the goroutines the work readied (a CQ.Wait or completion
	// channel reader): the runtime queues them on this goroutine's P, and
	// while it spins here another thread steals them only much later.
	// Only the first: with several Ps each Gosched wakes an idle one's
	// thread, and on a goroutine locked to its thread (pinned) hands the P
	// over and back; in a two-vCPU guest those wake-ups were a quarter of
	// a write_bw server's CPU time.
	if ln.spins == 1 {
		runtime.Gosched()
	}
	osYield()
	return true
}

// monoClock reads the monotonic clock alone; time.Now reads the wall clock
// as well, a second reading of the clock source.
func monoClock() time.Duration { return time.Since(monoEpoch) }

var monoEpoch = time.Now()

// sleep waits for packets, the doorbell or the next timer (wait), then
// gives owner back; it reports whether the link closed. The wait keeps
// owner: the link's Wait looks at its TX state. An application's Poll
// meanwhile returns at once; its posts ring the doorbell.
func (ln *lane) sleep(wait time.Duration) (closed bool) {
	if ln.eng.PrepareSleep() {
		var err error
		if ln.hostSleep() {
			ln.ctr.Sleeps.Add(1)
			since := ln.raiseToSleep()
			err = ln.waitLink(wait)
			ln.wokeRaised(since)
		}
		ln.eng.Awake()
		closed = errors.Is(err, ErrLinkClosed)
	}
	ln.hostAwake()
	ln.owner.Store(0)
	return closed
}

// nap sleeps while an application polls: until Unpoll, a command or the
// doorbell, or for napLen, after which run looks again whether the
// application still polls. The naps lengthen while it does: each nap's end
// wakes this goroutine, and where CPUs are scarce (one vCPU for the
// application and the engine) the wake-up takes the CPU from the polling
// thread; 1 ms naps made write_lat 4x rdma_rxe's in a one-vCPU guest, 50 ms
// ones 1.5x.
func (ln *lane) nap() {
	ln.napping.Store(true)
	// A command or Unpoll that came before napping was set did not end
	// the nap: look for them after setting it.
	if ln.eng.HasWork() || ln.handBack.Load() {
		ln.napping.Store(false)
		return
	}
	ln.napLen = max(ln.d.pollHold, min(2*ln.napLen, maxNap))
	// In the network poller, not ppoll: a goroutine in a system call keeps
	// its P, and with one P (a one-vCPU guest) the polling application
	// then waited for sysmon to take it back; each take also restarts
	// sysmon's 20 µs polling. The read returns at the doorbell (eventfd)
	// or at the deadline.
	ln.napFile.SetReadDeadline(time.Now().Add(ln.napLen))
	var v [8]byte
	ln.napFile.Read(v[:])
	ln.napping.Store(false)
	ln.napped = true
}

// osYield gives the CPU to another runnable thread, if any (sched_yield),
// as a raw system call: it never blocks, and sysmon, finding a goroutine
// in a system call, takes its P and polls again every 20 µs (see
// tools/perftest's osYield).
func osYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// receive handles one frame from the link.
func (ln *lane) receive(frame []byte) {
	if frame == nil {
		ln.eng.SettleWrites() // the link reuses the frames' buffers next
		return
	}
	ln.tapFrame(frame)
	f := &ln.rxFrame
	err := parseFrame(frame, f, ln.d.rxeFlushICRC)
	ln.ctr.Rx.Count(err)
	if err != nil {
		ln.steerRaw(frame) // not RoCEv2: perhaps a flow's
		return
	}
	if f.RxeFlushICRC {
		ln.ctr.Rx.FlushICRCRxe.Add(1)
	}
	dst := GIDFromAddr(f.Dst)
	idx := ln.d.table.Load().index(dst)
	if idx < 0 {
		idx = ln.mcastDst(dst) // a group the device joined
	}
	if idx < 0 {
		if !ln.steerRaw(frame) {
			ln.ctr.RxNotForUs.Add(1)
		}
		return
	}
	ln.rxInfo.SGID = GIDFromAddr(f.Src)
	ln.rxInfo.DGID = dst
	ln.rxInfo.DGIDIndex = idx
	ln.rxInfo.NetHeader = f.IPHeader
	ln.rxInfo.CE = f.TrafficClass&3 == ecnCE
	ln.eng.Receive(f.IB, &ln.rxInfo)
}
