package ibtransport

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// QPConfig describes a QP to create: its queue sizes and the verbs objects
// it works with (package verbs fills it from ibv_qp_init_attr and the PD).
type QPConfig struct {
	// Memory resolves the memory keys of the QP's protection domain.
	Memory         Memory
	SendCQ, RecvCQ CompletionQueue
	// SRQ is the shared receive queue the QP takes receives from; nil
	// gives the QP its own receive queue of Cap.MaxRecvWR receives.
	SRQ SharedRecvQueue
	Cap ibv.QPCap
	// SigAll makes every send work request signaled.
	SigAll bool
	// Type is the transport service; the zero value is RC.
	Type ibv.QPType
	// GSI makes the QP the device's general services QP, QP1 (a UD QP
	// that carries management datagrams); a group has at most one.
	GSI bool
	// XRCDomain is an XRC target's domain (XRCSRQ.Domain): the SRQs its
	// requests may name.
	XRCDomain uint32
}

// Limits of the engine.
const (
	// The requester's window of unacknowledged PSNs (windowFor): 512 KiB
	// of payload, and between 128 and 256 packets. rxe's is 128 packets at
	// any MTU, and with an AckReq every ackReqInterval packets that is two
	// ACKs' worth: where each hop is slow (virtio-net in a guest, IB MTU
	// 1024) a sender that waited for the first ACK left the path idle, and
	// softnic and rxe both moved 128 packets per round trip.
	// At IB MTU 4096 the window stays 128
	// packets, the bytes that queues and receive rings were sized for.
	minUnackedPSNs = 128
	maxUnackedPSNs = 256
	windowBytes    = 512 << 10
	// The device's window: PSNs of started messages not yet acknowledged,
	// over all QPs (each counting at most maxUnackedPSNs); no QP starts a
	// message while it is full. Without it 1024 QPs put maxUnackedPSNs × 1024
	// packets in flight, and the peer's AF_XDP receive ring (2048 chunks,
	// 1024 frames on a 9000-byte link) overflows: go-back-N and retransmit
	// timeouts. A NIC should hold its own traffic back instead.
	maxDeviceUnacked = 512
	ackReqInterval   = 64 // AckReq at least every this many packets
	packetBudget     = 64 // packets a QP may send per engine pass
	// passBudget bounds the request packets all QPs together send per
	// engine pass, so that the engine goes back to its receive ring (ACKs)
	// between bursts; the next pass starts with the QP after the one that
	// spent it, so every QP gets its turn. Responses are not counted.
	passBudget      = 128
	infiniteRetries = 7
)

// inlineRoom is the inline data a QP of capabilities c takes: what it
// asked for, or the bytes its SGEs would take in a send queue entry if
// that is more (16 each), as rxe's send queue gives it (rxe_qp.c,
// rxe_init_sq) and ConnectX rounds it up to its WQE's room: programs that
// ask for none and post small inline sends (rdma_xclient) count on it.
func inlineRoom(c ibv.QPCap) int {
	return max(c.MaxInlineData, inlineBytesPerSGE*max(c.MaxSendSGE, 1))
}

// inlineBytesPerSGE is the size of an SGE in a send queue entry (struct
// ib_sge's in rxe's, softnic's in hostif's).
const inlineBytesPerSGE = 16

// QP is a queue pair: reliable connected (RC) or unreliable datagram (UD,
// ud.go).
type QP struct {
	// Owner is free for the layer above (ib_qp's qp_context): package verbs
	// keeps its QP there, which the events it receives name.
	Owner any
	// e is the engine that owns the QP's protocol state; the QP moves to
	// another engine of the group only under Group.Do (place, follow),
	// which is when e changes. home is e for posters' goroutines.
	e      *Engine
	home   atomic.Pointer[Engine]
	mem    Memory
	qpn    uint32
	sendCQ CompletionQueue
	recvCQ CompletionQueue
	srq    SharedRecvQueue
	srqRQ  *RecvQueue // srq's ring
	sigAll bool
	typ    ibv.QPType
	cap    ibv.QPCap
	xrcd   uint32 // an XRC target's domain

	state atomic.Uint32 // mirror of st for posters
	// mirrors, if set, are words of memory shared with the QP's owner (a
	// daemon's client) that the engine keeps current: the state
	// (MirrorState) and the queues' retired counts (MirrorRetired).
	mirrors atomic.Pointer[ownerMirrors]
	kicked  atomic.Bool // on the engine's kick list
	// strays counts the QP's packets in a row that arrived at another
	// engine than e (noteStray).
	strays atomic.Uint32
	attrMu sync.Mutex
	attr   ibv.QPAttr // last attributes set, for Query

	sq sendQueue
	rq RecvQueue // without an SRQ

	// Everything below is owned by the engine goroutine.
	inActive bool // on the engine's active list
	// waitsWindow: on the engine's windowWait queue, with a message to
	// start once the device window has room.
	waitsWindow bool
	destroyed   bool
	st          ibv.QPState
	// sqDrained: the SQ drained event for the current SQD state went out.
	sqDrained bool
	// commEst: the QP received a packet since it entered RTR and raised
	// QPEventCommEst for it.
	commEst bool
	// cnpPending: CNPs waiting to be sent (cnp.go); cnpSent: one was,
	// for a packet that arrived at cnpAt.
	cnpPending uint8
	cnpSent    bool
	path       TxPath
	mtu        uint32
	destQPN    uint32
	// The three roles, as in rxe, each with its own state; they reach one
	// another through q.
	req  requester
	comp completer
	resp responder
	// ctr is apart from the QP: it keeps the QP in its allocation size
	// class (footprint_test.go) and its lines apart from the posters'.
	ctr *ibv.QPCounters
	// Congestion control: the reaction point (dcqcn.go) and, for the
	// notification point (cnp.go), when the last CNP was queued.
	rp    reactionPoint
	cnpAt int64
}

// Counters returns the QP's counters, which any goroutine may read while
// the QP runs.
func (q *QP) Counters() *ibv.QPCounters { return q.ctr }

// countSent counts a packet of n bytes the QP sent, for the device and
// for the QP.
func (q *QP) countSent(n int) {
	inc(&q.e.Ctr.TxPackets)
	inc(&q.ctr.TxPackets)
	add(&q.ctr.TxBytes, uint64(n))
}

// CreateQP creates a queue pair (ibv_create_qp). It starts in RESET, on
// the group's first engine; connecting an RC or UC QP (INIT to RTR) places it on
// the engine of its connection, a UD QP stays where it is.
func (g *Group) CreateQP(init *QPConfig) (*QP, error) {
	c := init.Cap
	if init.Type.IsXRC() {
		if err := checkXRCConfig(init); err != nil {
			return nil, err
		}
		c.MaxSendWR = max(c.MaxSendWR, 1) // a target posts nothing; its ring stays empty
	} else if init.Memory == nil || init.SendCQ == nil || init.RecvCQ == nil {
		return nil, fmt.Errorf("create QP: memory, send and receive CQs are required: %w", ibv.ErrInvalidArgument)
	}
	tm, _ := init.SRQ.(TagMatchingSRQ)
	if tm != nil && init.Type == ibv.QPTypeRC {
		// The SRQ takes over the send queue for its rendezvous READs and
		// FINs: the owner may ask for no room of its own.
		c.MaxSendWR += tmSQReserve
		c.MaxInlineData = max(c.MaxInlineData, finLen)
	}
	if c.MaxSendWR <= 0 || c.MaxSendWR > ibv.MaxQPWR || c.MaxRecvWR < 0 || c.MaxRecvWR > ibv.MaxQPWR ||
		c.MaxSendSGE < 0 || c.MaxSendSGE > ibv.MaxSGE || c.MaxRecvSGE < 0 || c.MaxRecvSGE > ibv.MaxSGE ||
		c.MaxInlineData < 0 || c.MaxInlineData > ibv.MaxInline {
		return nil, fmt.Errorf("create QP: capabilities %+v out of range: %w", c, ibv.ErrInvalidArgument)
	}
	if init.Type > ibv.QPTypeXRCRecv {
		return nil, fmt.Errorf("create QP: type %v: %w", init.Type, ibv.ErrInvalidArgument)
	}
	if init.GSI && init.Type != ibv.QPTypeUD {
		return nil, fmt.Errorf("create QP: the GSI QP is a UD QP: %w", ibv.ErrInvalidArgument)
	}
	if init.SRQ == nil && c.MaxRecvWR == 0 && !init.Type.IsXRC() {
		return nil, fmt.Errorf("create QP: no SRQ and no receive queue: %w", ibv.ErrInvalidArgument)
	}
	if c.MaxSendSGE == 0 {
		c.MaxSendSGE = 1
	}
	if c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = 1
	}
	c.MaxInlineData = inlineRoom(c)
	e := g.engines[0]
	q := &QP{e: e, ctr: new(ibv.QPCounters), mem: init.Memory, sendCQ: init.SendCQ, recvCQ: init.RecvCQ, srq: init.SRQ, sigAll: init.SigAll, typ: init.Type}
	if init.SRQ != nil {
		q.srqRQ = init.SRQ.RecvQueue()
	}
	q.xrcd = init.XRCDomain
	size := 1 << bits.Len(uint(c.MaxSendWR-1))
	q.sq.init(size, c.MaxSendSGE, c.MaxInlineData)
	if q.typ == ibv.QPTypeUD {
		q.initUD(e)
	}
	if _, ok := e.port.(RawPort); q.typ == ibv.QPTypeRawPacket && !ok {
		return nil, fmt.Errorf("create QP: %w", ErrNoRawPort)
	}
	if q.typ == ibv.QPTypeXRCSend {
		q.sq.atomics = make([]atomicOperands, size) // the remote SRQ numbers
	}
	if init.SRQ == nil && !q.typ.IsXRC() {
		q.rq.Init(c.MaxRecvWR, c.MaxRecvSGE)
		c.MaxRecvWR = q.rq.Cap()
	}
	c.MaxSendWR = size
	q.cap = c
	recvSGE := c.MaxRecvSGE
	if init.SRQ != nil {
		recvSGE = max(recvSGE, q.srqRQ.MaxSGE())
	}
	q.req.qp, q.comp.qp, q.resp.qp = q, q, q
	q.resp.recv.sge = make([]ibv.SGE, 0, recvSGE)
	q.resp.recvMRs = make([]Region, recvSGE)
	if tm != nil && init.Type == ibv.QPTypeRC {
		q.resp.tm = &tmState{srq: tm}
	}
	q.home.Store(e)
	err := g.Do(func() error {
		if err := g.numberQP(q, init.GSI); err != nil {
			return err
		}
		g.qps[q.qpn] = q
		e.nQPs.Add(1)
		if (q.typ == ibv.QPTypeUD || q.typ == ibv.QPTypeRawPacket) && q.srq != nil {
			g.placeUD(q)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("create QP: %w", err)
	}
	return q, nil
}

// gsiQPN is the number of the general services QP.
const gsiQPN = 1

// numberQP gives q the next free QP number, or QP1 for the GSI QP.
// QP0 (subnet management) has no meaning on RoCE and is never given.
// Called under Do.
func (g *Group) numberQP(q *QP, gsi bool) error {
	if gsi {
		if g.qps[gsiQPN] != nil {
			return fmt.Errorf("the group has a GSI QP already: %w", ibv.ErrInvalidArgument)
		}
		q.qpn = gsiQPN
		return nil
	}
	for {
		q.qpn = g.nextQPN & header.PSNMask
		g.nextQPN++
		if _, used := g.qps[q.qpn]; !used && q.qpn > gsiQPN {
			return nil
		}
	}
}

// Type returns the QP's transport service.
func (q *QP) Type() ibv.QPType { return q.typ }

// QPN returns the queue pair number.
func (q *QP) QPN() uint32 { return q.qpn }

// EngineIndex returns the index of the engine of its group that runs the
// QP (see Group): 0 until the QP connects.
func (q *QP) EngineIndex() int { return q.home.Load().index }

// Cap returns the queue sizes actually allocated.
func (q *QP) Cap() ibv.QPCap { return q.cap }

// State returns the current state.
func (q *QP) State() ibv.QPState { return ibv.QPState(q.state.Load()) }

// Query returns the current attributes (ibv_query_qp).
func (q *QP) Query() ibv.QPAttr {
	q.attrMu.Lock()
	defer q.attrMu.Unlock()
	a := q.attr
	a.State = q.State()
	a.CurState = a.State
	return a
}

// Destroy destroys the QP (ibv_destroy_qp): it stops sending and receiving
// at once, without completions.
func (q *QP) Destroy() error {
	g := q.home.Load().g
	// After the QP left the table: an attach that raced with Destroy
	// finds it gone, or is undone here. Until then a multicast datagram
	// finds it in RESET and is filtered.
	defer g.detachAllMcast(q)
	return g.Do(func() error {
		if g.qps[q.qpn] != q {
			return fmt.Errorf("destroy QP %d: %w", q.qpn, ibv.ErrInvalidArgument)
		}
		// Unmirrored first: the QP's owner sees no RESET it did not ask
		// for (a daemon's shutdown destroys its clients' QPs, and they are
		// to learn that the daemon went), and the word's memory may go
		// when Destroy returns.
		q.mirrors.Store(nil)
		q.reset()
		delete(g.qps, q.qpn)
		q.e.nQPs.Add(-1)
		q.destroyed = true // Process drops it from the active list
		return nil
	})
}

func (q *QP) setState(s ibv.QPState) {
	if s == ibv.QPSRTR {
		q.commEst = false
	}
	q.st = s
	q.state.Store(uint32(s))
	if m := q.mirrors.Load(); m != nil && m.state != nil {
		atomic.StoreUint32(m.state, uint32(s))
	}
}

// MirrorState keeps *word equal to the QP's state from now until Destroy,
// through Modify and the engine's own moves to ERR: a daemon publishes it
// so to its client, as a kernel driver answers ibv_query_qp. Call it
// before the QP leaves RESET.
func (q *QP) MirrorState(word *uint32) {
	m := q.ownerMirrors()
	m.state = word
	q.mirrors.Store(m)
	atomic.StoreUint32(word, q.state.Load())
}

// reset returns the QP to RESET: queues emptied without completions, all
// protocol state cleared. Engine goroutine only.
func (q *QP) reset() {
	q.setState(ibv.QPSReset)
	q.sq.mu.Lock()
	q.sq.head.Store(q.sq.tail.Load())
	q.sq.mu.Unlock()
	if q.srq == nil {
		q.rq.mu.Lock()
		q.rq.head.Store(q.rq.tail.Load())
		q.rq.mu.Unlock()
	}
	q.publishRetired()
	q.req.releaseCredit()
	head := q.sq.head.Load()
	q.req = requester{qp: q, reqIdx: head}
	q.comp = completer{qp: q, compIdx: head}
	q.sqDrained = false
	q.resetCongestion()
	recv, mrs, tm := q.resp.recv.sge, q.resp.recvMRs, q.resp.tm
	q.resp = responder{qp: q}
	q.resp.recv.sge = recv[:0]
	q.resp.recvMRs = mrs
	if tm != nil { // still on its TM SRQ; its rendezvous went with the SQ
		q.resp.tm = &tmState{srq: tm.srq}
	}
	q.attrMu.Lock()
	q.attr = ibv.QPAttr{}
	q.attrMu.Unlock()
	q.path = nil
}

// DebugState describes the QP's protocol state (PSNs, queue positions,
// timers) for diagnostics; it is taken on the engine goroutine.
func (q *QP) DebugState() string {
	var s string
	_ = q.do(func() error {
		r, c, p := &q.req, &q.comp, &q.resp
		s = fmt.Sprintf("QP %d %v: sq tail %d req %d comp %d sqPSN %d compPSN %d rdAtomic %d retries %d/%d retransAt %d rnrAt %d retried %v@%d; "+
			"resp ePSN %d msn %d mode %d nakSent %v jobs %d errPending %v; now %d",
			q.qpn, q.st, q.sq.tail.Load(), r.reqIdx, c.compIdx, r.sqPSN, c.compPSN, r.rdAtomicOut, c.retryLeft, c.rnrLeft,
			c.retransAt, c.rnrAt, c.retried, c.retryPSN, p.ePSN, p.msn, p.mode, p.nakSent, p.jobTail-p.jobHead, p.errPending, int64(time.Since(q.e.g.epoch)))
		if c.compIdx != q.sq.tail.Load() {
			w := q.sqSlot(c.compIdx)
			s += fmt.Sprintf("; head WQE %v len %d state %d PSNs %d..%d next %d", w.opcode, w.length, w.state, w.firstPSN, w.lastPSN, w.nextPSN)
		}
		return nil
	})
	return s
}

// String describes the QP for error messages.
func (q *QP) String() string { return fmt.Sprintf("QP %d (%v)", q.qpn, q.State()) }

// timeout is the retransmit timeout in nanoseconds: 4.096 µs × 2^Timeout.
func (q *QP) timeout() int64 { return 4096 << q.attr.Timeout }

func (q *QP) maxRdAtomic() int { return max(int(q.attr.MaxRdAtomic), 1) }

// awaitingAck reports whether packets were sent that are not acknowledged.
func (q *QP) awaitingAck() bool { return q.req.sentPSN.After(q.comp.compPSN) }

// windowFor returns the requester's window of unacknowledged PSNs at a
// path MTU of mtu bytes.
func windowFor(mtu uint32) int32 {
	if mtu == 0 {
		return minUnackedPSNs
	}
	return int32(min(max(windowBytes/mtu, minUnackedPSNs), maxUnackedPSNs))
}
