package ibtransport

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Port is what an Engine sends through: the RoCE device, which knows the
// link, the addresses and the framing.
type Port interface {
	// Path prepares transmission for local QP qpn to av, with IB packets of
	// up to pathMTU bytes of payload. It fails when av cannot be reached or
	// such packets do not fit the link.
	Path(av *AddressVector, qpn uint32, pathMTU int) (TxPath, error)
}

// TxPath sends the IB packets of one QP. The engine builds each packet in
// place in the buffer Buffer returns; the port wraps it and queues it.
type TxPath interface {
	// Buffer returns room for one IB packet (BTH through pad, ICRC
	// excluded), or nil when the link has no free buffer now.
	Buffer() []byte
	// Send sends the first n bytes of the buffer last returned.
	Send(n int)
}

// RecvInfo describes where a received IB packet came from.
type RecvInfo struct {
	SGID, DGID GID
	// DGIDIndex is the index of DGID in the device's GID table.
	DGIDIndex int
}

// Counters count engine events; they may be read while the engine runs.
type Counters struct {
	RxPackets      atomic.Uint64
	RxBadPacket    atomic.Uint64 // failed ParsePacket
	RxUnsupported  atomic.Uint64 // not an RC opcode
	RxNoQP         atomic.Uint64 // unknown destination QP
	RxFiltered     atomic.Uint64 // QP not ready, or GIDs not the QP's path
	RxBadPKey      atomic.Uint64 // P_Key not the default partition
	RxDuplicate    atomic.Uint64 // duplicate requests (re-ACKed or replayed)
	RxOutOfSeq     atomic.Uint64 // requests ahead of the expected PSN
	RxBadResponse  atomic.Uint64 // responses that fit no outstanding request
	TxPackets      atomic.Uint64
	TxNAKSeq       atomic.Uint64
	TxRNRNAK       atomic.Uint64
	TxNAKError     atomic.Uint64 // NAKs for invalid request, access and operational errors
	Retransmits    atomic.Uint64 // go-back-N restarts (timeout, NAK, response gap, RNR)
	Timeouts       atomic.Uint64
	TxWindowStalls atomic.Uint64 // new requests held back by the device-wide window
	RNRNAKsHandled atomic.Uint64
	Forwarded      atomic.Uint64 // packets received for another engine's QP, passed on to it
	ForwardDrops   atomic.Uint64 // such packets dropped: the engines' ring was full
}

type command struct {
	fn   func() error
	done chan error
}

// Engine runs the RC transport of one device. All protocol state belongs to
// whoever calls Receive and Process, one goroutine at a time: the device's
// engine goroutine, or an application that polls (roce.Device.Poll), the
// two taking turns under the device's pass token. Verbs calls reach it
// through lock-free work queue rings,
// synchronous commands (Do: ModifyQP, memory registration) and the wake
// doorbell. It reaches the verbs objects through small interfaces
// (verbsobjects.go): registered memory through Memory and Region, and
// completion queues through CompletionQueue.
//
// As in Linux rxe, each QP has three parts:
//   - the requester (requester.go) segments send work requests at the path
//     MTU, assigns PSNs, sets AckReq on the last packet of a message and at
//     least every 64 packets, and keeps at most 128 PSNs and max_rd_atomic
//     READs/atomics unacknowledged;
//   - the responder (responder.go) checks PSN, opcode sequence, lengths and
//     keys, executes requests against registered memory, answers duplicates
//     (ACK again for SEND/WRITE, replay from its resources for READ and
//     atomics), sends one sequence NAK per gap and RNR NAKs when no receive
//     is posted, and queues its responses so they leave in PSN order;
//   - the completer (completer.go) retires work requests on cumulative
//     ACKs and READ responses, and restarts transmission go-back-N on a NAK,
//     a gap in responses or the timeout (4.096 µs × 2^timeout), counting
//     retry_cnt and rnr_retry (7 is forever, like rxe).
type Engine struct {
	g     *Group
	index int // in g.engines
	port  Port
	wakeF func()

	cmdMu   sync.Mutex
	cmds    []command
	hasCmds atomic.Bool // lets Process skip the lock when there is nothing
	stopped bool

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

	rx  Packet // parse scratch
	tx  Packet // build scratch
	Ctr Counters
}

// NewEngine returns a device's only engine (a Group of one), sending
// through port; wake must make the engine goroutine run Process soon (ring
// the link's doorbell).
func NewEngine(port Port, wake func()) *Engine {
	return NewGroup([]Port{port}, []func(){wake}).engines[0]
}

// Group returns the engines of the device this engine belongs to.
func (e *Engine) Group() *Group { return e.g }

// Wake rings the doorbell: the engine goroutine will run Process soon.
// Verbs objects that hand the engine work without a QP (SRQ receives) call
// it.
func (e *Engine) Wake() { e.wakeF() }

func (e *Engine) now() int64 { return int64(time.Since(e.g.epoch)) }

// Do runs fn on the engine goroutine and returns its error: state only
// this engine reads (its QPs' protocol state) is changed that way; what
// all the group's engines read goes through Group.Do. Once the engine
// stopped, fn runs on the caller's goroutine, which is then the only one
// touching engine state.
func (e *Engine) Do(fn func() error) error {
	e.cmdMu.Lock()
	if e.stopped {
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

// Stop is called by the engine goroutine when it exits: commands queued or
// issued later run on their callers' goroutines.
func (e *Engine) Stop() {
	e.cmdMu.Lock()
	e.stopped = true
	cmds := e.cmds
	e.cmds = nil
	e.cmdMu.Unlock()
	for _, c := range cmds {
		c.done <- c.fn()
	}
}

func (e *Engine) runCommands() {
	if !e.hasCmds.Load() {
		return
	}
	e.cmdMu.Lock()
	e.hasCmds.Store(false)
	if len(e.cmds) == 0 {
		e.cmdMu.Unlock()
		return
	}
	cmds := e.cmds
	e.cmds = nil
	e.cmdMu.Unlock()
	for _, c := range cmds {
		c.done <- c.fn()
	}
}

// Process runs the engine's periodic work: verbs commands, timers, and
// transmission of requests and responses. It returns busy when it stopped
// for fairness with work left, and otherwise how long the caller may wait
// for packets before the next timer (negative: no timer).
func (e *Engine) Process() (busy bool, wait time.Duration) {
	e.runCommands()
	e.takeForwarded()
	e.takeKicks()
	e.admitWaiting()
	now := e.now()
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
		for _, t := range [2]int64{q.req.retransAt, q.req.rnrAt} {
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
	if next < 0 {
		return busy, -1
	}
	return busy, time.Duration(max(next-now, 0))
}

// removeActive takes q off the active list (q moves to another engine).
func (e *Engine) removeActive(q *QP) {
	if !q.inActive {
		return
	}
	if i := slices.Index(e.active, q); i >= 0 {
		e.active = slices.Delete(e.active, i, i+1)
		if i < e.reqNext {
			e.reqNext--
		}
	}
	q.inActive = false
}

// waitWindow queues q to start its next message when the device window
// has room.
func (e *Engine) waitWindow(q *QP) {
	if !q.waitsWindow {
		q.waitsWindow = true
		e.windowWait = append(e.windowWait, q)
	}
}

// admitWaiting moves QPs waiting for the device window back to the end of
// the active list, first come first, as many as the free window could take
// messages of (counting a message as 16 packets: a 64 KiB message at IB
// MTU 4096). The pass cursor comes to them in turn.
func (e *Engine) admitWaiting() {
	free := maxDeviceUnacked - e.unacked
	n := 0
	for ; n < len(e.windowWait) && free > 0; n++ {
		q := e.windowWait[n]
		q.waitsWindow = false
		if !q.destroyed {
			e.activate(q)
			free -= 16
		}
	}
	if n > 0 {
		rest := copy(e.windowWait, e.windowWait[n:])
		clear(e.windowWait[rest:])
		e.windowWait = e.windowWait[:rest]
	}
}

// onlyWaitsWindow reports whether the QP's only work is a message waiting
// for the device window: nothing in flight, no response, no timer. It can
// leave the active list until admitWaiting brings it back.
func (q *QP) onlyWaitsWindow() bool {
	r := &q.req
	return q.waitsWindow && !q.awaitingAck() && r.retransAt == 0 && r.rnrAt == 0 &&
		q.resp.jobHead == q.resp.jobTail && !q.resp.errPending && q.st == QPSRTS
}

// activate puts q on the active list; engine goroutine only.
func (e *Engine) activate(q *QP) {
	if !q.inActive && !q.destroyed {
		q.inActive = true
		e.active = append(e.active, q)
	}
}

// kick asks the engine to visit q: posters call it after queueing work.
// The lock is taken once per quiet period of the QP, not once per post.
func (e *Engine) kick(q *QP) {
	if q.kicked.CompareAndSwap(false, true) {
		e.kickMu.Lock()
		e.kicks = append(e.kicks, q)
		e.hasKick.Store(true)
		e.kickMu.Unlock()
	}
	// An engine that is awake sees the kick on its next pass. Otherwise it
	// set sleeping before its last look at hasKick (PrepareSleep): one of
	// the two sees the other's store.
	if e.sleeping.Load() {
		e.Wake()
	}
}

// PrepareSleep is called by the engine goroutine before it blocks waiting
// for packets. It reports false, and the engine must not block, when posts
// or commands came in since its last pass. Until Awake, posters ring the
// doorbell.
func (e *Engine) PrepareSleep() bool {
	e.sleeping.Store(true)
	if e.hasKick.Load() || e.hasCmds.Load() || e.hasForwarded() {
		e.sleeping.Store(false)
		return false
	}
	return true
}

// HasQPs reports whether any QP lives on the engine: an application's
// poll leaves the passes of an engine without QPs to its goroutine.
func (e *Engine) HasQPs() bool { return e.nQPs.Load() > 0 }

// HasWork reports whether verbs commands (Do) or packets from the group's
// other engines wait for a pass: they wake the engine goroutine even from
// a nap while an application polls.
func (e *Engine) HasWork() bool { return e.hasCmds.Load() || e.hasForwarded() }

// Awake is called by the engine goroutine when it stopped waiting.
func (e *Engine) Awake() { e.sleeping.Store(false) }

func (e *Engine) takeKicks() {
	if !e.hasKick.Load() {
		return
	}
	e.kickMu.Lock()
	e.hasKick.Store(false)
	for i, q := range e.kicks {
		// Cleared before the QP's queues are looked at, so a post after
		// this kicks again.
		q.kicked.Store(false)
		if q.e != e {
			q.e.kick(q) // the QP moved to another engine since the post
		} else {
			e.activate(q)
		}
		e.kicks[i] = nil
	}
	e.kicks = e.kicks[:0]
	e.kickMu.Unlock()
}

// quiet reports whether the QP has nothing to do until a packet, a post or
// a command arrives: no work request in flight or waiting, no response to
// send, no timer.
func (q *QP) quiet() bool {
	switch q.st {
	case QPSReset, QPSInit:
		return true
	}
	r := &q.req
	switch {
	case q.resp.jobHead != q.resp.jobTail, q.resp.errPending:
		return false
	case r.retransAt != 0, r.rnrAt != 0:
		return false
	case r.compIdx != q.sq.tail.Load():
		return false
	case q.st == QPSErr && q.srq == nil && q.rq.Len() > 0:
		return false
	case q.st == QPSSQD && !r.drained:
		return false
	}
	return true
}

// Receive handles one received IB packet (BTH through pad, ICRC checked and
// removed). It never panics on bad input: malformed packets are counted and
// dropped.
func (e *Engine) Receive(ib []byte, info *RecvInfo) {
	e.Ctr.RxPackets.Add(1)
	e.receive(ib, info)
}

// receive is Receive without the count: packets another engine of the
// group forwarded were counted there.
func (e *Engine) receive(ib []byte, info *RecvInfo) {
	p := &e.rx
	if err := ParsePacket(ib, p); err != nil {
		e.Ctr.RxBadPacket.Add(1)
		return
	}
	oi := p.Info()
	if oi.Transport != TransportRC {
		e.Ctr.RxUnsupported.Add(1)
		return
	}
	// Like rxe, accept the default partition only (full or limited
	// membership, not both limited).
	if pk := p.BTH.PKey(); pk&0x7fff != DefaultPKey&0x7fff || pk&0x8000 == 0 {
		e.Ctr.RxBadPKey.Add(1)
		return
	}
	q := e.g.qps[p.BTH.DestQPN()]
	if q == nil {
		e.Ctr.RxNoQP.Add(1)
		return
	}
	if q.e != e {
		e.forwardTo(q.e, ib, info)
		return
	}
	if q.st < QPSRTR || q.st == QPSErr || info.SGID != q.attr.AV.DGID || info.DGIDIndex != int(q.attr.AV.SGIDIndex) {
		e.Ctr.RxFiltered.Add(1)
		return
	}
	e.activate(q)
	switch oi.Kind {
	case KindSend, KindWrite, KindReadRequest, KindAtomicRequest:
		q.onRequest(p, oi)
	case KindReadResponse, KindAck, KindAtomicAck:
		q.onResponse(p, oi)
	default:
		e.Ctr.RxUnsupported.Add(1)
	}
}

// service does a QP's share of Process. It reports whether the QP has more
// to send right now.
func (q *QP) service(now int64) bool {
	switch q.st {
	case QPSReset, QPSInit:
		return false
	case QPSErr:
		q.flush()
		return false
	}
	busy := q.sendResponses()
	if q.st == QPSErr {
		q.flush()
		return false
	}
	if q.st == QPSSQD && !q.req.drained && q.req.compIdx == q.req.reqIdx && !q.outstanding() {
		q.req.drained = true
		q.e.emit(q, QPEventSQDrained)
	}
	if q.st == QPSRTS || q.st == QPSSQD {
		q.checkTimers(now)
		q.completeLocalErrors()
		if q.st == QPSErr {
			q.flush()
			return false
		}
		if q.sendRequests() {
			busy = true
		}
	}
	return busy
}

// toError moves the QP to ERR; the next service flushes its queues.
func (q *QP) toError() {
	if q.st == QPSErr {
		return
	}
	q.setState(QPSErr)
	q.req.retransAt, q.req.rnrAt = 0, 0
	q.resp.jobHead, q.resp.jobTail = 0, 0
	q.resp.errPending = false
	if q.resp.recvActive {
		q.completeRecv(WCWRFlushErr, 0)
	}
	q.flush()
	if q.srq != nil {
		q.e.emit(q, QPEventLastWQEReached)
	}
}

// flush completes every outstanding work request with WR_FLUSH_ERR.
func (q *QP) flush() {
	r := &q.req
	tail := q.sq.tail.Load()
	for r.compIdx != tail {
		w := q.sqSlot(r.compIdx)
		wc := WC{WRID: w.id, Status: WCWRFlushErr, Opcode: wcOpcodeOf(w.opcode), QPN: q.qpn, SrcQP: q.destQPN}
		r.compIdx++
		q.sq.head.Store(r.compIdx) // the slot is free before its completion shows
		q.complete(q.sendCQ, wc, false)
	}
	r.reqIdx = r.compIdx
	r.rdAtomicOut = 0
	q.releaseCredit()
	if q.srq == nil {
		for w := q.rq.peek(); w != nil; w = q.rq.peek() {
			wc := WC{WRID: w.id, Status: WCWRFlushErr, Opcode: WCRecv, QPN: q.qpn, SrcQP: q.destQPN}
			q.rq.pop()
			q.complete(q.recvCQ, wc, false)
		}
	}
}

// String describes the QP for error messages.
func (q *QP) String() string { return fmt.Sprintf("QP %d (%v)", q.qpn, q.State()) }
