package ibtransport

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

type command struct {
	fn   func() error
	done chan error
}

// One packet's way through the engine (roce/lane.go has the frame's way
// to and from the link):
//
//	Receive: ParsePacket reads the BTH and the extension headers
//	  (package header); the P_Key, the destination QP (forwarded to
//	  its engine if another of the group holds it), its service and state
//	  are checked, a CNP goes to the QP's reaction point (cnp.go), a UD
//	  datagram to udReceiver (udrecv.go); a connected QP's packet must
//	  come from its path, and then a UC one goes to the responder's
//	  onUCRequest (ucrecv.go), an RC request to onRequest (responder.go)
//	  and an RC response or ACK to the completer's onResponse;
//	Process: each active QP's service (service.go) sends the responder's
//	  queued responses, runs the completer's timers, then lets the
//	  requester build new packets from the send queue (reqbuild.go) into
//	  its TxPath, within its window and DCQCN's rate; completions go to
//	  the CQs through CompletionQueue.
//
// Engine runs the RC and UD transport of one device. All protocol state belongs to
// whoever calls Receive and Process, one goroutine at a time: the device's
// engine goroutine, or an application that polls (roce.Device.Poll), the
// two taking turns under the device's pass token. Verbs calls reach it
// through lock-free work queue rings, synchronous commands (Do: ModifyQP,
// memory registration) and the wake doorbell. It reaches the verbs objects
// through small interfaces (verbsobjects.go): registered memory through
// Memory and Region, and completion queues through CompletionQueue.
//
// As in Linux rxe, each QP has three parts, each a type with its own state
// that reaches the others through the QP:
//   - the requester (requester.go, reqbuild.go) segments send work requests
//     at the path MTU, assigns PSNs, sets AckReq on the last packet of a
//     message and at least every 64 packets, and keeps at most 128 PSNs and
//     max_rd_atomic READs/atomics unacknowledged;
//   - the responder (responder.go, recv.go, responses.go) checks PSN,
//     opcode sequence, lengths and keys, executes requests against
//     registered memory, answers duplicates (ACK again for SEND/WRITE,
//     replay from its resources for READ and atomics), sends one sequence
//     NAK per gap and RNR NAKs when no receive is posted, and queues its
//     responses so they leave in PSN order;
//   - the completer (completer.go) retires work requests on cumulative
//     ACKs and READ responses, and restarts transmission go-back-N on a NAK,
//     a gap in responses or the timeout (4.096 µs × 2^timeout), counting
//     retry_cnt and rnr_retry (7 is forever, like rxe).
type Engine struct {
	g     *Group
	index int // in g.engines
	port  Port
	// rawTx is the port's path for raw packet QPs' frames (raw.go).
	rawTx TxPath
	wakeF func()

	cmdMu   sync.Mutex
	cmds    []command
	hasCmds atomic.Bool // lets Process skip the lock when there is nothing
	exited  bool

	// active holds the QPs Process visits: those with work, responses or
	// timers. Quiet QPs leave it and come back when a packet arrives for
	// them, a verbs command touches them, or a poster kicks them.
	active  []*QP
	kickMu  sync.Mutex
	kicks   []*QP
	hasKick atomic.Bool
	// sleeping is set while the engine goroutine may block waiting for
	// packets: only then do posters ring the doorbell (a system call).
	sleeping atomic.Bool
	// nQPs counts the QPs on this engine (changed under Group.Do).
	nQPs atomic.Int32
	// unacked is the device-wide window in use: the sum of the QPs'
	// requester credits (requester.go).
	unacked int
	// passLeft is what this pass may still send (passBudget); reqNext is
	// where in active the next pass starts sending requests.
	passLeft int
	reqNext  int
	// windowWait holds, in arrival order, QPs that have a message to start
	// but found the device window full. Those with nothing else to do
	// leave the active list meanwhile, so that a pass does not visit a
	// thousand QPs that can only wait.
	windowWait []*QP

	onEvent func(*QP, QPEvent)
	clock   engineClock
	// ceAt is when the last CE-marked packet arrived at the earliest, as
	// the notification point reckons it (cnp.go noteCE).
	ceAt int64

	rx header.Packet // parse scratch
	tx header.Packet // build scratch
	// reads and writes are the copies to and from memory that defers them,
	// queued until the port settles them (deferred.go); copyFailed the QPs
	// of failed ones.
	reads, writes copyQueue
	copyFailed    []*QP
	ud            udReceiver
	Ctr           ibv.Counters
}

// Group returns the engines of the device this engine belongs to.
func (e *Engine) Group() *Group { return e.g }

// Wake rings the doorbell: the engine goroutine will run Process soon.
// Verbs objects that hand the engine work without a QP (SRQ receives) call
// it.
func (e *Engine) Wake() { e.wakeF() }

func (e *Engine) now() int64 { return e.clock.now() }

// Do runs fn on the engine goroutine and returns its error: state only
// this engine reads (its QPs' protocol state) is changed that way; what
// all the group's engines read goes through Group.Do. Once the engine
// exited, fn runs on the caller's goroutine, which is then the only one
// touching engine state.
func (e *Engine) Do(fn func() error) error {
	e.cmdMu.Lock()
	if e.exited {
		defer e.cmdMu.Unlock()
		return fn()
	}
	c := command{fn: fn, done: make(chan error, 1)}
	e.cmds = append(e.cmds, c)
	e.hasCmds.Store(true)
	e.cmdMu.Unlock()
	e.Wake()
	return <-c.done
}

// Exit is called by the engine goroutine as it exits, and by nothing
// else: commands queued or issued later run on their callers' goroutines.
func (e *Engine) Exit() {
	e.cmdMu.Lock()
	e.exited = true
	cmds := e.cmds
	e.cmds = nil
	e.cmdMu.Unlock()
	for _, c := range cmds {
		c.done <- c.fn()
	}
}

// runCommands runs the verbs commands queued since the last pass and
// reports whether there were any.
func (e *Engine) runCommands() bool {
	if !e.hasCmds.Load() {
		return false
	}
	e.cmdMu.Lock()
	e.hasCmds.Store(false)
	if len(e.cmds) == 0 {
		e.cmdMu.Unlock()
		return false
	}
	cmds := e.cmds
	e.cmds = nil
	e.cmdMu.Unlock()
	for _, c := range cmds {
		c.done <- c.fn()
	}
	return true
}

// Process runs the engine's periodic work: verbs commands, timers, and
// transmission of requests and responses. It returns busy when it stopped
// for fairness with work left, and otherwise how long the caller may wait
// for packets before the next timer (negative: no timer).
func (e *Engine) Process() (busy bool, wait time.Duration) {
	e.failCopyQPs()
	// Commands run after the QPs' service, so that what the packets
	// received before this pass asked for goes out first: a client that
	// saw its receive complete and at once destroyed its QP (a daemon's
	// session ending) had the ACK of that SEND discarded with the QP, and
	// the peer retried it for ever. Whatever they change, the next pass
	// (at once: busy) acts on.
	defer func() {
		if e.runCommands() {
			busy, wait = true, 0
		}
	}()
	e.takeForwarded()
	e.takeKicks()
	e.admitWaiting()
	now := e.clock.forTimers()
	defer e.clock.endPass()
	next := int64(-1)
	// The pass starts where the last one spent its budget (passBudget), so
	// that every QP gets its turn to send however many share the device.
	e.passLeft = passBudget
	n := len(e.active)
	start, spent, removed := 0, -1, false
	if n > 0 {
		start = e.reqNext % n
	}
	for k := range n {
		i := (start + k) % n
		q := e.active[i]
		qbusy := !q.destroyed && q.service(now)
		if qbusy {
			busy = true
		}
		if spent < 0 && e.passLeft <= 0 {
			spent = i
		}
		if q.destroyed || (!qbusy && (q.quiet() || q.onlyWaitsWindow())) {
			q.inActive = false
			e.active[i] = nil // compacted below, keeping the order
			removed = true
			continue
		}
		for _, t := range [3]int64{q.comp.retransAt, q.comp.rnrAt, q.pacedUntil(now)} {
			if t != 0 && (next < 0 || t < next) {
				next = t
			}
		}
	}
	e.reqNext = start
	if spent >= 0 {
		e.reqNext = spent + 1
	}
	if removed {
		e.compactActive()
	}
	if next < 0 {
		return busy, -1
	}
	return busy, time.Duration(max(next-now, 0))
}

// compactActive drops the nil entries Process left in the active list,
// keeping the order and the pass cursor on the same QP.
func (e *Engine) compactActive() {
	kept := 0
	nextAt := 0
	for i, q := range e.active {
		if i == e.reqNext {
			nextAt = kept
		}
		if q != nil {
			e.active[kept] = q
			kept++
		}
	}
	clear(e.active[kept:])
	e.active = e.active[:kept]
	e.reqNext = nextAt
}

// Receive handles one received IB packet (BTH through pad, ICRC checked and
// removed). It never panics on bad input: malformed packets are counted and
// dropped. The packets received before a Process call share one reading of
// the clock (for the timers they restart): a driver calls Process after
// each batch it receives.
func (e *Engine) Receive(ib []byte, info *RecvInfo) {
	inc(&e.Ctr.RxPackets)
	e.receive(ib, info, false)
}

// receive is Receive without the count: packets another engine of the
// group forwarded (forwarded) were counted there.
func (e *Engine) receive(ib []byte, info *RecvInfo, forwarded bool) {
	if info.Raw {
		if q := e.g.qps[info.RawQPN]; q != nil && q.e == e && q.typ == ibv.QPTypeRawPacket {
			e.receiveRaw(q, ib)
		}
		return
	}
	p := &e.rx
	if err := header.ParsePacket(ib, p); err != nil {
		inc(&e.Ctr.RxBadPacket)
		return
	}
	oi := p.Info()
	if oi.Transport == 0 {
		inc(&e.Ctr.RxUnsupported)
		return
	}
	// Like rxe, accept the default partition only (full or limited
	// membership, not both limited).
	if pk := p.BTH.PKey(); pk&0x7fff != header.DefaultPKey&0x7fff || pk&0x8000 == 0 {
		inc(&e.Ctr.RxBadPKey)
		return
	}
	if p.BTH.DestQPN() == ibv.MulticastQPN {
		if oi.Transport != header.TransportUD {
			inc(&e.Ctr.RxWrongService)
			return
		}
		e.receiveMcast(ib, p, info, forwarded)
		return
	}
	q := e.g.qps[p.BTH.DestQPN()]
	if q == nil {
		inc(&e.Ctr.RxNoQP)
		return
	}
	if q.e != e {
		e.forwardTo(q.e, ib, info)
		e.noteStray(q)
		return
	}
	inc(&q.ctr.RxPackets)
	add(&q.ctr.RxBytes, uint64(len(ib)))
	if !forwarded && q.strays.Load() != 0 {
		q.strays.Store(0) // a packet that came in at q's engine ends a run of strays
	}
	if oi.Transport == header.TransportCNP {
		e.onCNP(q, info)
		return
	}
	if wireTransport(q.typ) != oi.Transport {
		inc(&e.Ctr.RxWrongService)
		return
	}
	if q.st < ibv.QPSRTR || q.st == ibv.QPSErr {
		inc(&e.Ctr.RxFiltered)
		return
	}
	if oi.Transport == header.TransportUD {
		// Datagrams come from anywhere: no path to match.
		e.ud.receive(q, p, info)
		return
	}
	if info.SGID != q.attr.AV.DGID || info.DGIDIndex != int(q.attr.AV.SGIDIndex) {
		inc(&e.Ctr.RxFiltered)
		return
	}
	e.activate(q)
	if info.CE {
		e.noteCE(q, len(ib))
	}
	if !q.commEst {
		q.commEst = true
		e.emit(q, QPEventCommEst)
	}
	if q.typ == ibv.QPTypeUC {
		q.resp.onUCRequest(p, oi)
		return
	}
	switch oi.Kind {
	case header.KindSend, header.KindWrite, header.KindReadRequest, header.KindAtomicRequest,
		header.KindAtomicWrite, header.KindFlush:
		if q.typ == ibv.QPTypeXRCSend {
			inc(&e.Ctr.RxWrongService) // an initiator takes responses only
			return
		}
		q.resp.onRequest(p, oi)
	case header.KindReadResponse, header.KindAck, header.KindAtomicAck:
		if q.typ == ibv.QPTypeXRCRecv {
			inc(&e.Ctr.RxWrongService) // a target takes requests only
			return
		}
		q.comp.onResponse(p, oi)
	default:
		inc(&e.Ctr.RxUnsupported)
	}
}

// service does a QP's share of Process. It reports whether the QP has more
