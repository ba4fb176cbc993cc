package ibtransport

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// Group is the engines of one device: one per receive queue of its link,
// each run by its own goroutine, so that QPs spread over cores. A QP
// belongs to one engine at a time. It is placed when it connects (INIT to
// RTR): on the engine both ends pick from the pair of QP numbers (EngineFor),
// so that between two softnic devices whose links pair their queues (veth:
// a frame sent on queue k arrives on the peer's queue k) both directions
// of a connection stay on one engine a side. A packet that arrives at
// another engine than its QP's (a peer that picks its queues otherwise, an
// RSS hash) is copied over to the right one: correct, only slower; a
// connected QP whose packets keep arriving at another engine moves there
// (noteStray, follow).
//
// What all engines read without locks (the QP table, and the memory keys
// of package verbs) changes only under Do, which pauses every engine.
type Group struct {
	engines []*Engine
	epoch   time.Time
	doMu    sync.Mutex // one Do at a time: two could pause engines in opposite orders

	// Changed under Do only.
	qps     map[uint32]*QP
	nextQPN uint32
	// srqEngine is the engine of each SRQ's QPs: an SRQ's ring has one
	// consumer.
	srqEngine map[SharedRecvQueue]*Engine
	// xrcSRQs are the XRC SRQs by number, which XRC targets' requests
	// name; nextSRQN is the last number given.
	xrcSRQs  map[uint32]*XRCSRQ
	nextSRQN uint32

	// forward[i][j] carries packets engine i received for engine j's QPs;
	// allocated on first use.
	forward [][]atomic.Pointer[forwardRing]

	// mc is the multicast groups' attachments (mcast.go).
	mc mcastState

	// cc is the congestion control the QPs follow (congestion.go); set
	// before QPs connect, read only after.
	cc CongestionConfig
}

// NewGroup returns a group of len(ports) engines; engine i sends through
// ports[i], and wakes[i] makes its goroutine run Process soon.
func NewGroup(ports []Port, wakes []func()) *Group {
	if len(ports) == 0 || len(ports) != len(wakes) {
		panic(fmt.Sprintf("ibtransport: NewGroup with %d ports and %d wake functions", len(ports), len(wakes)))
	}
	g := &Group{epoch: time.Now(), qps: map[uint32]*QP{}, nextQPN: 0x11 + randUint32()%0x10000,
		srqEngine: map[SharedRecvQueue]*Engine{}, xrcSRQs: map[uint32]*XRCSRQ{}, cc: DefaultCongestionConfig()}
	g.forward = make([][]atomic.Pointer[forwardRing], len(ports))
	for i := range ports {
		g.forward[i] = make([]atomic.Pointer[forwardRing], len(ports))
		e := &Engine{g: g, index: i, port: ports[i], wakeF: wakes[i], clock: newEngineClock(g.epoch)}
		e.ud.e = e
		g.engines = append(g.engines, e)
	}
	return g
}

// Engines returns the group's engines; engine i serves link queue i.
func (g *Group) Engines() []*Engine { return g.engines }

// Do runs fn while every engine is paused between passes, and returns its
// error: state that all engines read without locks is changed that way.
func (g *Group) Do(fn func() error) error {
	if len(g.engines) == 1 {
		return g.engines[0].Do(fn)
	}
	g.doMu.Lock()
	defer g.doMu.Unlock()
	release := make(chan struct{})
	var paused sync.WaitGroup
	for _, e := range g.engines[1:] {
		paused.Add(1)
		go e.Do(func() error {
			paused.Done()
			<-release
			return nil
		})
	}
	paused.Wait()
	err := g.engines[0].Do(fn)
	close(release)
	return err
}

// Wake rings every engine's doorbell.
func (g *Group) Wake() {
	for _, e := range g.engines {
		e.Wake()
	}
}

// HandleEvents makes fn receive the QP events of every engine, on the
// engine's goroutine: fn must not block, and may be called by several
// engines at once. Without a handler events are dropped.
func (g *Group) HandleEvents(fn func(*QP, QPEvent)) {
	_ = g.Do(func() error {
		for _, e := range g.engines {
			e.onEvent = fn
		}
		return nil
	})
}

// QPs returns how many QPs the group has (QP1 included), for leak checks
// and statistics.
func (g *Group) QPs() int {
	var n int
	g.Do(func() error { n = len(g.qps); return nil })
	return n
}

// Counters returns the engines' counters: with one engine the live ones,
// with several their sum at the time of the call.
func (g *Group) Counters() *ibv.Counters {
	if len(g.engines) == 1 {
		return &g.engines[0].Ctr
	}
	var sum ibv.Counters
	for _, e := range g.engines {
		ibv.AddCounters(&sum, &e.Ctr)
	}
	return &sum
}

// EngineFor returns which of n engines serves the connection between QPs a and
// b: the same on both ends, since it depends only on the unordered pair.
func EngineFor(a, b uint32, n int) int {
	if n <= 1 {
		return 0
	}
	lo, hi := min(a, b), max(a, b)
	h := uint64(lo)<<32 | uint64(hi)
	// splitmix64's finalizer: consecutive QP numbers spread evenly.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	hi64, _ := bits.Mul64(h, uint64(n))
	return int(hi64)
}

// place moves q to the engine of its connection to destQPN (or of its
// SRQ's other QPs). Called under Do, before the INIT to RTR transition.
func (g *Group) place(q *QP, destQPN uint32) {
	to := g.engines[EngineFor(q.qpn, destQPN, len(g.engines))]
	if q.srq != nil {
		to = g.srqEngineOr(q.srq, to)
	}
	if q.typ == ibv.QPTypeXRCRecv {
		to = g.engines[0] // where the XRC SRQs' receives are taken
	}
	from := q.e
	if to == from {
		return
	}
	// In INIT the QP holds no share of from's device window and waits for
	// none. Not releaseCredit: that would leave it out of to's window
	// until its first ACK, and a thousand fresh QPs would send unchecked
	// and overrun the peer's receive ring.
	from.removeActive(q)
	moveQP(q, to)
	// A kick still on from's list is passed on by from's takeKicks.
}

// srqEngineOr returns the engine of srq's QPs, making it e if srq has
// none yet. Called under Do.
func (g *Group) srqEngineOr(srq SharedRecvQueue, e *Engine) *Engine {
	if to, ok := g.srqEngine[srq]; ok {
		return to
	}
	g.srqEngine[srq] = e
	return e
}

// moveQP moves q from its engine to engine to, another, with its share of
// the device window. Called under Do.
func moveQP(q *QP, to *Engine) {
	from := q.e
	from.unacked -= q.req.credit
	to.unacked += q.req.credit
	q.e = to
	q.home.Store(to)
	from.nQPs.Add(-1)
	to.nQPs.Add(1)
}

// followAfter is how many packets in a row of a connected QP may arrive at
// another engine than the QP's before the QP moves there.
const followAfter = 64

// noteStray counts a packet of q that arrived at e, not at q's engine. A
// peer's packets for one connected QP keep to one receive queue (the NIC's
// flow hash of their fixed addresses and UDP ports, which softnic does not
// choose), so after followAfter of them in a row the QP follows its
// packets to e: handing each over costs a copy and a wake-up of the other
// engine (in a two-vCPU guest with four queues, write_lat 11.5 x rxe's
// with two engines against 6.2 x with one).
// Datagram QPs hear from many peers and stay; so do QPs on an SRQ, which
// keeps its QPs on one engine.
func (e *Engine) noteStray(q *QP) {
	if q.typ == ibv.QPTypeUD || q.typ == ibv.QPTypeXRCRecv || q.srq != nil {
		return
	}
	if q.strays.Add(1) == followAfter {
		go e.g.follow(q, e) // Do waits for every engine; e's goroutine must go on
	}
}

// follow moves connected QP q to engine to, at which its packets arrive.
func (g *Group) follow(q *QP, to *Engine) {
	_ = g.Do(func() error {
		from := q.e
		if g.qps[q.qpn] != q || from == to || q.srq != nil || q.typ == ibv.QPTypeXRCRecv {
			return nil
		}
		// The QP's packets leave through its engine's port: a path on
		// to's. The neighbour is known since the QP connected.
		var path TxPath
		if q.path != nil {
			var err error
			if path, err = to.port.Path(&q.attr.AV, q.qpn, q.attr.PathMTU.Bytes()); err != nil {
				return nil
			}
		}
		// The packets to already handed to from wait in from's forward
		// rings: from receives them now, or those that to receives
		// after the move would overtake them.
		from.takeForwarded()
		from.removeActive(q)
		from.leaveWindowWait(q)
		moveQP(q, to)
		if path != nil {
			q.path = path
		}
		to.activate(q)
		inc(&to.Ctr.Followed)
		return nil
	})
}

// forwardRing carries packets from one engine to another: one producer,
// one consumer, copies of whole IB packets.
type forwardRing struct {
	slots [forwardSlots]forwardSlot
	head  atomic.Uint32 // next to take
	tail  atomic.Uint32 // next to fill
}

type forwardSlot struct {
	n    int
	info RecvInfo
	buf  [maxForwardPacket]byte
	net  [ibv.GRHLen]byte // info.NetHeader's copy
}

const (
	forwardSlots = 256
	// The largest IB packet: BTH, RETH and ImmDt, 4096 bytes of payload,
	// and pad.
	maxForwardPacket = header.BTHLen + header.RETHLen + header.ImmDtLen + 4096 + 4
)

// forwardTo copies a packet that arrived at e for a QP of engine to into
// to's ring from e. A full ring drops it, as a full receive ring would.
func (e *Engine) forwardTo(to *Engine, ib []byte, info *RecvInfo) {
	slot := &e.g.forward[e.index][to.index]
	r := slot.Load()
	if r == nil {
		r = new(forwardRing) // once per pair of engines
		slot.Store(r)
	}
	t := r.tail.Load()
	h := r.head.Load()
	if t-h >= forwardSlots || len(ib) > maxForwardPacket {
		inc(&e.Ctr.ForwardDrops)
		return
	}
	s := &r.slots[t%forwardSlots]
	s.n = copy(s.buf[:], ib)
	s.info = *info
	s.info.NetHeader = s.net[:copy(s.net[:], info.NetHeader)]
	r.tail.Store(t + 1)
	inc(&e.Ctr.Forwarded)
	// As with kicks: to set sleeping before its last look at the rings
	// (PrepareSleep), so one of the two sees the other's store.
	if to.sleeping.Load() {
		to.Wake()
	}
}

// takeForwarded receives the packets other engines forwarded to e.
func (e *Engine) takeForwarded() {
	if len(e.g.engines) == 1 {
		return
	}
	for i := range e.g.forward {
		r := e.g.forward[i][e.index].Load()
		if r == nil {
			continue
		}
		h, t := r.head.Load(), r.tail.Load()
		for ; h != t; h++ {
			s := &r.slots[h%forwardSlots]
			e.receive(s.buf[:s.n], &s.info, true)
		}
		e.SettleWrites() // before the slots go back to the sender
		r.head.Store(h)
	}
}

// hasForwarded reports whether packets wait in e's forward rings.
func (e *Engine) hasForwarded() bool {
	if len(e.g.engines) == 1 {
		return false
	}
	for i := range e.g.forward {
		if r := e.g.forward[i][e.index].Load(); r != nil && r.head.Load() != r.tail.Load() {
			return true
		}
	}
	return false
}

// QPCounterRefs appends every QP's number and counters to dst, in QPN
// order. It pauses the engines only to copy the table (Do); the counters
// are read after, while they run.
func (g *Group) QPCounterRefs(dst []ibv.QPCountersRef) []ibv.QPCountersRef {
	start := len(dst)
	g.Do(func() error {
		for qpn, q := range g.qps {
			dst = append(dst, ibv.QPCountersRef{QPN: qpn, Ctr: q.ctr})
		}
		return nil
	})
	slices.SortFunc(dst[start:], func(a, b ibv.QPCountersRef) int { return cmp.Compare(a.QPN, b.QPN) })
	return dst
}

// QPCongestionRate returns QP qpn's DCQCN rate in bits per second (0:
// not rate limited), and false when the group has no such QP.
func (g *Group) QPCongestionRate(qpn uint32) (uint64, bool) {
	var q *QP
	g.Do(func() error {
		q = g.qps[qpn]
		return nil
	})
	if q == nil {
		return 0, false
	}
	return q.CongestionRate(), true
}

// QPCounters returns the counters of QP qpn, or nil when the group has no
// such QP.
func (g *Group) QPCounters(qpn uint32) *ibv.QPCounters {
	var c *ibv.QPCounters
	g.Do(func() error {
		if q := g.qps[qpn]; q != nil {
			c = q.ctr
		}
		return nil
	})
	return c
}
