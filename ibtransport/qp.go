package ibtransport

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
)

// QPState is the state of a queue pair (ibv_qp_state).
type QPState uint8

// Queue pair states, numbered as in libibverbs.
const (
	QPSReset QPState = iota
	QPSInit
	QPSRTR
	QPSRTS
	QPSSQD
	QPSSQE
	QPSErr
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// MTU is an IB path MTU code (ibv_mtu).
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// MTUFromBytes returns the code of an MTU of n bytes.
func MTUFromBytes(n int) (MTU, bool) {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, true
		}
	}
	return 0, false
}

// AddressVector says where a QP's packets go (ibv_ah_attr with its GRH).
type AddressVector struct {
	DGID         GID
	SGIDIndex    uint8
	FlowLabel    uint32
	HopLimit     uint8
	TrafficClass uint8
}

// QPAttrMask selects the attributes a ModifyQP call sets (ibv_qp_attr_mask).
type QPAttrMask uint32

// Attribute mask bits, with libibverbs' values.
const (
	QPAttrState           QPAttrMask = 1 << 0
	QPAttrCurState        QPAttrMask = 1 << 1
	QPAttrAccessFlags     QPAttrMask = 1 << 3
	QPAttrPKeyIndex       QPAttrMask = 1 << 4
	QPAttrPort            QPAttrMask = 1 << 5
	QPAttrAV              QPAttrMask = 1 << 7
	QPAttrPathMTU         QPAttrMask = 1 << 8
	QPAttrTimeout         QPAttrMask = 1 << 9
	QPAttrRetryCnt        QPAttrMask = 1 << 10
	QPAttrRNRRetry        QPAttrMask = 1 << 11
	QPAttrRQPSN           QPAttrMask = 1 << 12
	QPAttrMaxQPRdAtomic   QPAttrMask = 1 << 13
	QPAttrMinRNRTimer     QPAttrMask = 1 << 15
	QPAttrSQPSN           QPAttrMask = 1 << 16
	QPAttrMaxDestRdAtomic QPAttrMask = 1 << 17
	QPAttrDestQPN         QPAttrMask = 1 << 20
)

// QPAttr holds QP attributes (ibv_qp_attr).
type QPAttr struct {
	State           QPState
	CurState        QPState
	AccessFlags     Access // remote access the QP allows as a responder
	PKeyIndex       uint16
	Port            uint8
	AV              AddressVector
	PathMTU         MTU
	Timeout         uint8 // retransmit timeout 4.096 µs × 2^Timeout; 0 waits forever
	RetryCnt        uint8 // 0..7; 7 retries forever
	RNRRetry        uint8 // 0..7; 7 retries forever
	RQPSN           PSN
	SQPSN           PSN
	MaxRdAtomic     uint8 // READ/atomic requests in flight as requester
	MaxDestRdAtomic uint8 // READ/atomic responder resources
	MinRNRTimer     uint8 // RNR NAK timer code this QP sends
	DestQPN         uint32
}

// QPCap are the queue sizes of a QP (ibv_qp_cap).
type QPCap struct {
	MaxSendWR, MaxRecvWR   int
	MaxSendSGE, MaxRecvSGE int
	MaxInlineData          int
}

// QPConfig describes a QP to create: its queue sizes and the verbs objects
// it works with (package verbs fills it from ibv_qp_init_attr and the PD).
type QPConfig struct {
	// Memory resolves the memory keys of the QP's protection domain.
	Memory         Memory
	SendCQ, RecvCQ CompletionQueue
	// SRQ is the shared receive queue the QP takes receives from; nil
	// gives the QP its own receive queue of Cap.MaxRecvWR receives.
	SRQ SharedRecvQueue
	Cap QPCap
	// SigAll makes every send work request signaled.
	SigAll bool
}

// Limits of this implementation.
const (
	MaxQPWR        = 1 << 15
	MaxSGE         = 256
	MaxInline      = 4096
	MaxRdAtomic    = 16
	maxUnackedPSNs = 128 // like rxe: the requester's window of unacknowledged PSNs
	// The device's window: PSNs of started messages not yet acknowledged,
	// over all QPs (each counting at most maxUnackedPSNs); no QP starts a
	// message while it is full. Without it 1024 QPs put 128 × 1024
	// packets in flight, and the peer's AF_XDP receive ring (2048 chunks,
	// 1024 frames on a 9000-byte link) overflows: go-back-N and 67 ms
	// timeouts. A NIC should hold its own traffic back instead.
	maxDeviceUnacked = 512
	ackReqInterval   = 64 // AckReq at least every this many packets
	// READs of more response packets than this are requested in segments
	// of this many (see buildRequest).
	readSegmentPSNs = maxUnackedPSNs
	packetBudget    = 64 // packets a QP may send per engine pass
	// passBudget bounds the request packets all QPs together send per
	// engine pass, so that the engine goes back to its receive ring (ACKs)
	// between bursts; the next pass starts with the QP after the one that
	// spent it, so every QP gets its turn. Responses are not counted.
	passBudget      = 128
	infiniteRetries = 7
)

type wqeState uint8

const (
	wqeNew     wqeState = iota // posted, not yet started
	wqeSending                 // PSNs assigned; packets (re)transmitting
	wqeError                   // failed a local check; completes with status when it reaches the head
)

// sendWQE is a posted send work request with the requester's progress. An
// idle QP holds MaxSendWR of them, so a slot keeps only what the engine
// needs of the SendWR, and its first SGE: further SGEs, inline data and
// atomic operands live in arrays of the send queue (sendQueue.moreSGE,
// inline, atomics), indexed by slot.
type sendWQE struct {
	id         uint64
	remoteAddr uint64
	rkey       uint32
	imm        uint32 // Imm, or InvalidateRKey for SEND_WITH_INV
	length     uint32
	nsge       uint16 // SGEs in the SGL (0 with SendInline)
	opcode     WROpcode
	flags      SendFlags
	// Engine-owned.
	state    wqeState
	status   WCStatus
	firstPSN PSN
	lastPSN  PSN
	nextPSN  PSN // next PSN to transmit; its payload starts (nextPSN-firstPSN) × MTU bytes in
	sge0     SGE
	mr0      Region // the region behind sge0, resolved before the first packet
}

// atomicOperands are the operands of an atomic work request.
type atomicOperands struct {
	compareAdd, swap uint64
}

type sendQueue struct {
	mu        sync.Mutex
	slots     []sendWQE
	mask      uint32
	maxSGE    int
	maxInline int
	// SGEs 1..maxSGE-1 of each slot and the regions behind them
	// (maxSGE-1 per slot), allocated with the queue when maxSGE > 1.
	moreSGE []SGE
	moreMR  []Region
	// Allocated on the first post that needs them, so that QPs that never
	// send inline data or atomics do not pay for them: maxInline bytes and
	// one atomicOperands per slot. Posters set them under mu before
	// publishing the slot through tail.
	inline  []byte
	atomics []atomicOperands
	tail    atomic.Uint32 // posted
	head    atomic.Uint32 // retired by the completer
}

// sge returns SGE j of the WQE in slot i, and where its region is kept.
func (sq *sendQueue) sge(i uint32, w *sendWQE, j int) (*SGE, *Region) {
	if j == 0 {
		return &w.sge0, &w.mr0
	}
	k := int(i&sq.mask)*(sq.maxSGE-1) + j - 1
	return &sq.moreSGE[k], &sq.moreMR[k]
}

// inlineData returns the inline payload of the WQE in slot i.
func (sq *sendQueue) inlineData(i uint32, w *sendWQE) []byte {
	off := int(i&sq.mask) * sq.maxInline
	return sq.inline[off : off+int(w.length)]
}

// QP is a reliable-connected queue pair.
type QP struct {
	// e is the engine that owns the QP's protocol state; the QP moves to
	// another engine of the group only under Group.Do (place), which is
	// when e changes. home is e for posters' goroutines.
	e      *Engine
	home   atomic.Pointer[Engine]
	mem    Memory
	qpn    uint32
	sendCQ CompletionQueue
	recvCQ CompletionQueue
	srq    SharedRecvQueue
	srqRQ  *RecvQueue // srq's ring
	sigAll bool
	cap    QPCap

	state  atomic.Uint32 // mirror of st for posters
	kicked atomic.Bool   // on the engine's kick list
	attrMu sync.Mutex
	attr   QPAttr // last attributes set, for Query

	sq sendQueue
	rq RecvQueue // without an SRQ

	// Everything below is owned by the engine goroutine.
	inActive bool // on the engine's active list
	// waitsWindow: on the engine's windowWait queue, with a message to
	// start once the device window has room.
	waitsWindow bool
	destroyed   bool
	st          QPState
	path        TxPath
	mtu         uint32
	destQPN     uint32
	req         requester
	resp        responder
}

// CreateQP creates an RC queue pair (ibv_create_qp) in e's group. It
// starts in RESET.
func (e *Engine) CreateQP(init *QPConfig) (*QP, error) { return e.g.CreateQP(init) }

// CreateQP creates an RC queue pair (ibv_create_qp). It starts in RESET,
// on the group's first engine; connecting it (INIT to RTR) places it on
// the engine of its connection.
func (g *Group) CreateQP(init *QPConfig) (*QP, error) {
	c := init.Cap
	if init.Memory == nil || init.SendCQ == nil || init.RecvCQ == nil {
		return nil, fmt.Errorf("create QP: memory, send and receive CQs are required: %w", ErrInvalidArgument)
	}
	if c.MaxSendWR <= 0 || c.MaxSendWR > MaxQPWR || c.MaxRecvWR < 0 || c.MaxRecvWR > MaxQPWR ||
		c.MaxSendSGE < 0 || c.MaxSendSGE > MaxSGE || c.MaxRecvSGE < 0 || c.MaxRecvSGE > MaxSGE ||
		c.MaxInlineData < 0 || c.MaxInlineData > MaxInline {
		return nil, fmt.Errorf("create QP: capabilities %+v out of range: %w", c, ErrInvalidArgument)
	}
	if init.SRQ == nil && c.MaxRecvWR == 0 {
		return nil, fmt.Errorf("create QP: no SRQ and no receive queue: %w", ErrInvalidArgument)
	}
	if c.MaxSendSGE == 0 {
		c.MaxSendSGE = 1
	}
	if c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = 1
	}
	e := g.engines[0]
	q := &QP{e: e, mem: init.Memory, sendCQ: init.SendCQ, recvCQ: init.RecvCQ, srq: init.SRQ, sigAll: init.SigAll}
	if init.SRQ != nil {
		q.srqRQ = init.SRQ.RecvQueue()
	}
	size := 1 << bits.Len(uint(c.MaxSendWR-1))
	q.sq.slots = make([]sendWQE, size)
	q.sq.mask = uint32(size - 1)
	q.sq.maxSGE = c.MaxSendSGE
	q.sq.maxInline = c.MaxInlineData
	if c.MaxSendSGE > 1 {
		q.sq.moreSGE = make([]SGE, size*(c.MaxSendSGE-1))
		q.sq.moreMR = make([]Region, size*(c.MaxSendSGE-1))
	}
	if init.SRQ == nil {
		q.rq.Init(c.MaxRecvWR, c.MaxRecvSGE)
		c.MaxRecvWR = q.rq.Cap()
	}
	c.MaxSendWR = size
	q.cap = c
	recvSGE := c.MaxRecvSGE
	if init.SRQ != nil {
		recvSGE = max(recvSGE, q.srqRQ.MaxSGE())
	}
	q.resp.recv.sge = make([]SGE, 0, recvSGE)
	q.resp.recvMRs = make([]Region, recvSGE)
	q.home.Store(e)
	err := g.Do(func() error {
		for {
			q.qpn = g.nextQPN & PSNMask
			g.nextQPN++
			if _, used := g.qps[q.qpn]; !used && q.qpn > 1 {
				break
			}
		}
		g.qps[q.qpn] = q
		e.nQPs.Add(1)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("create QP: %w", err)
	}
	return q, nil
}

// QPN returns the queue pair number.
func (q *QP) QPN() uint32 { return q.qpn }

// Engine returns the index of the engine of its group that runs the QP
// (see Group): 0 until the QP connects.
func (q *QP) Engine() int { return q.home.Load().index }

// Cap returns the queue sizes actually allocated.
func (q *QP) Cap() QPCap { return q.cap }

// State returns the current state.
func (q *QP) State() QPState { return QPState(q.state.Load()) }

// Query returns the current attributes (ibv_query_qp).
func (q *QP) Query() QPAttr {
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
	return g.Do(func() error {
		if g.qps[q.qpn] != q {
			return fmt.Errorf("destroy QP %d: %w", q.qpn, ErrInvalidArgument)
		}
		q.reset()
		delete(g.qps, q.qpn)
		q.e.nQPs.Add(-1)
		q.destroyed = true // Process drops it from the active list
		return nil
	})
}

// Transition rules (IBA table 93, as the kernel's ib_modify_qp_is_ok keeps
// them for RC): the attributes a transition needs and those it allows.
type transition struct {
	required, optional QPAttrMask
}

var transitions = map[[2]QPState]transition{
	{QPSReset, QPSInit}: {0, QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
	{QPSInit, QPSInit}:  {0, QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
	{QPSInit, QPSRTR}: {QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer,
		QPAttrPKeyIndex | QPAttrAccessFlags},
	{QPSRTR, QPSRTS}: {QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic,
		QPAttrCurState | QPAttrAccessFlags | QPAttrMinRNRTimer},
	{QPSRTS, QPSRTS}: {0, QPAttrCurState | QPAttrAccessFlags | QPAttrMinRNRTimer},
	{QPSRTS, QPSSQD}: {0, 0},
	{QPSSQD, QPSRTS}: {0, QPAttrCurState | QPAttrAccessFlags | QPAttrMinRNRTimer},
	{QPSSQD, QPSSQD}: {0, QPAttrAV | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrMinRNRTimer | QPAttrTimeout |
		QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic | QPAttrMaxDestRdAtomic},
	{QPSSQE, QPSRTS}: {0, QPAttrCurState | QPAttrAccessFlags},
}

// Modify changes the QP's attributes and state (ibv_modify_qp). Only the
// attributes in mask are read. A transition the QP state machine does not
// have, a missing required attribute or an out-of-range value is an error
// and changes nothing.
func (q *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	var err error
	if g := q.home.Load().g; len(g.engines) > 1 && mask&QPAttrState != 0 && attr.State == QPSRTR && mask&QPAttrDestQPN != 0 {
		// Connecting: the QP moves to its connection's engine first, so
		// that its path is that engine's.
		err = g.Do(func() error {
			if q.st == QPSInit {
				g.place(q, attr.DestQPN)
			}
			return q.modify(attr, mask)
		})
	} else {
		err = q.do(func() error { return q.modify(attr, mask) })
	}
	if err != nil {
		return fmt.Errorf("modify QP %d: %w", q.qpn, err)
	}
	return nil
}

// do runs fn on the goroutine of the QP's engine.
func (q *QP) do(fn func() error) error {
	for {
		e := q.home.Load()
		moved := false
		err := e.Do(func() error {
			if q.e != e {
				moved = true // placed on another engine meanwhile
				return nil
			}
			return fn()
		})
		if !moved {
			return err
		}
	}
}

func (q *QP) modify(attr *QPAttr, mask QPAttrMask) error {
	q.e.activate(q)
	cur := q.st
	next := cur
	if mask&QPAttrState != 0 {
		next = attr.State
	}
	if mask&QPAttrCurState != 0 && attr.CurState != cur {
		return fmt.Errorf("current state is %v, not %v: %w", cur, attr.CurState, ErrInvalidArgument)
	}
	if next == QPSReset || next == QPSErr {
		if mask&^(QPAttrState|QPAttrCurState) != 0 {
			return fmt.Errorf("%v to %v takes no attributes: %w", cur, next, ErrInvalidArgument)
		}
		if next == QPSReset {
			q.reset()
		} else {
			q.toError()
		}
		return nil
	}
	tr, ok := transitions[[2]QPState{cur, next}]
	if !ok {
		return fmt.Errorf("no transition from %v to %v: %w", cur, next, ErrInvalidState)
	}
	given := mask &^ QPAttrState
	if missing := tr.required &^ given; missing != 0 {
		return fmt.Errorf("%v to %v needs attributes %#x: %w", cur, next, uint32(missing), ErrInvalidArgument)
	}
	if extra := given &^ (tr.required | tr.optional); extra != 0 {
		return fmt.Errorf("%v to %v does not take attributes %#x: %w", cur, next, uint32(extra), ErrInvalidArgument)
	}
	if err := validateAttr(attr, mask); err != nil {
		return err
	}
	var path TxPath
	if mask&QPAttrAV != 0 || mask&QPAttrPathMTU != 0 {
		av := q.attr.AV
		if mask&QPAttrAV != 0 {
			av = attr.AV
		}
		mtu := q.attr.PathMTU
		if mask&QPAttrPathMTU != 0 {
			mtu = attr.PathMTU
		}
		p, err := q.e.port.Path(&av, q.qpn, mtu.Bytes())
		if err != nil {
			return fmt.Errorf("address vector: %w", err)
		}
		path = p
	}
	// All checks passed: apply.
	q.attrMu.Lock()
	a := &q.attr
	if mask&QPAttrAccessFlags != 0 {
		a.AccessFlags = attr.AccessFlags
	}
	if mask&QPAttrPKeyIndex != 0 {
		a.PKeyIndex = attr.PKeyIndex
	}
	if mask&QPAttrPort != 0 {
		a.Port = attr.Port
	}
	if mask&QPAttrAV != 0 {
		a.AV = attr.AV
	}
	if mask&QPAttrPathMTU != 0 {
		a.PathMTU = attr.PathMTU
	}
	if mask&QPAttrTimeout != 0 {
		a.Timeout = attr.Timeout
	}
	if mask&QPAttrRetryCnt != 0 {
		a.RetryCnt = attr.RetryCnt
	}
	if mask&QPAttrRNRRetry != 0 {
		a.RNRRetry = attr.RNRRetry
	}
	if mask&QPAttrRQPSN != 0 {
		a.RQPSN = attr.RQPSN & PSNMask
	}
	if mask&QPAttrSQPSN != 0 {
		a.SQPSN = attr.SQPSN & PSNMask
	}
	if mask&QPAttrMaxQPRdAtomic != 0 {
		a.MaxRdAtomic = attr.MaxRdAtomic
	}
	if mask&QPAttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = attr.MaxDestRdAtomic
	}
	if mask&QPAttrMinRNRTimer != 0 {
		a.MinRNRTimer = attr.MinRNRTimer
	}
	if mask&QPAttrDestQPN != 0 {
		a.DestQPN = attr.DestQPN
	}
	q.attrMu.Unlock()
	if path != nil {
		q.path = path
		q.mtu = uint32(q.attr.PathMTU.Bytes())
	}
	q.destQPN = q.attr.DestQPN
	if mask&QPAttrRQPSN != 0 {
		q.resp.ePSN = q.attr.RQPSN
	}
	if mask&QPAttrMaxDestRdAtomic != 0 {
		q.resp.initResources(int(q.attr.MaxDestRdAtomic))
	}
	if mask&QPAttrSQPSN != 0 {
		q.req.sqPSN = q.attr.SQPSN
		q.req.compPSN = q.attr.SQPSN
		q.req.sentPSN = q.attr.SQPSN
		q.recount()
	}
	q.req.retryLeft = q.attr.RetryCnt
	q.req.rnrLeft = q.attr.RNRRetry
	if next == QPSSQD && cur != QPSSQD {
		q.req.drained = false
	}
	q.setState(next)
	return nil
}

func validateAttr(a *QPAttr, mask QPAttrMask) error {
	bad := func(what string, v any) error {
		return fmt.Errorf("%s %v out of range: %w", what, v, ErrInvalidArgument)
	}
	switch {
	case mask&QPAttrPathMTU != 0 && a.PathMTU.Bytes() == 0:
		return bad("path MTU", a.PathMTU)
	case mask&QPAttrTimeout != 0 && a.Timeout > 31:
		return bad("timeout", a.Timeout)
	case mask&QPAttrRetryCnt != 0 && a.RetryCnt > 7:
		return bad("retry count", a.RetryCnt)
	case mask&QPAttrRNRRetry != 0 && a.RNRRetry > 7:
		return bad("RNR retry", a.RNRRetry)
	case mask&QPAttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return bad("min RNR timer", a.MinRNRTimer)
	case mask&QPAttrMaxQPRdAtomic != 0 && a.MaxRdAtomic > MaxRdAtomic:
		return bad("max_rd_atomic", a.MaxRdAtomic)
	case mask&QPAttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > MaxRdAtomic:
		return bad("max_dest_rd_atomic", a.MaxDestRdAtomic)
	case mask&QPAttrDestQPN != 0 && a.DestQPN > PSNMask:
		return bad("dest QPN", a.DestQPN)
	case mask&QPAttrRQPSN != 0 && a.RQPSN > PSNMask:
		return bad("RQ PSN", a.RQPSN)
	case mask&QPAttrSQPSN != 0 && a.SQPSN > PSNMask:
		return bad("SQ PSN", a.SQPSN)
	case mask&QPAttrPort != 0 && a.Port != 1:
		return bad("port", a.Port)
	case mask&QPAttrAccessFlags != 0 && a.AccessFlags&^AccessAll != 0:
		return bad("access flags", a.AccessFlags)
	}
	return nil
}

func (q *QP) setState(s QPState) {
	q.st = s
	q.state.Store(uint32(s))
}

// reset returns the QP to RESET: queues emptied without completions, all
// protocol state cleared. Engine goroutine only.
func (q *QP) reset() {
	q.setState(QPSReset)
	q.sq.mu.Lock()
	q.sq.head.Store(q.sq.tail.Load())
	q.sq.mu.Unlock()
	if q.srq == nil {
		q.rq.mu.Lock()
		q.rq.head.Store(q.rq.tail.Load())
		q.rq.mu.Unlock()
	}
	q.releaseCredit()
	q.req = requester{compIdx: q.sq.head.Load(), reqIdx: q.sq.head.Load()}
	recv, mrs := q.resp.recv.sge, q.resp.recvMRs
	q.resp = responder{}
	q.resp.recv.sge = recv[:0]
	q.resp.recvMRs = mrs
	q.attrMu.Lock()
	q.attr = QPAttr{}
	q.attrMu.Unlock()
	q.path = nil
}

// PostSend posts a send work request (ibv_post_send). The request's SGL and
// inline data are copied, so wr may be reused when PostSend returns.
func (q *QP) PostSend(wr *SendWR) error {
	if err := q.checkPostSend(); err != nil {
		return err
	}
	q.sq.mu.Lock()
	err := q.postSendLocked(wr)
	q.sq.mu.Unlock()
	if err != nil {
		return err
	}
	q.home.Load().kick(q)
	return nil
}

// PostSendList posts several send work requests at once, in order, with one
// doorbell (ibv_post_send with a list). It returns how many were posted; on
// an error, wrs[n] is the request that failed (libibverbs' bad_wr).
func (q *QP) PostSendList(wrs []SendWR) (int, error) {
	if err := q.checkPostSend(); err != nil {
		return 0, err
	}
	q.sq.mu.Lock()
	n := 0
	var err error
	for i := range wrs {
		if err = q.postSendLocked(&wrs[i]); err != nil {
			break
		}
		n++
	}
	q.sq.mu.Unlock()
	if n > 0 {
		q.home.Load().kick(q)
	}
	return n, err
}

func (q *QP) checkPostSend() error {
	switch q.State() {
	case QPSReset, QPSInit, QPSRTR:
		return fmt.Errorf("post send on QP %d: %w (%v)", q.qpn, ErrInvalidState, q.State())
	}
	return nil
}

// postSendLocked validates wr and copies it into the next SQ slot; sq.mu is
// held.
func (q *QP) postSendLocked(wr *SendWR) error {
	if wr.Opcode > WRAtomicFetchAndAdd {
		return fmt.Errorf("post send: opcode %v: %w", wr.Opcode, ErrInvalidArgument)
	}
	inline := wr.Flags&SendInline != 0
	if inline {
		if !(wr.Opcode.isSend() || wr.Opcode.isWrite()) || len(wr.InlineData) > q.sq.maxInline {
			return fmt.Errorf("post send: inline %v of %d bytes (max %d): %w", wr.Opcode, len(wr.InlineData), q.sq.maxInline, ErrInvalidArgument)
		}
	} else if len(wr.SGL) > q.sq.maxSGE {
		return fmt.Errorf("post send: %d SGEs, at most %d: %w", len(wr.SGL), q.sq.maxSGE, ErrInvalidArgument)
	}
	sq := &q.sq
	t := sq.tail.Load()
	if t-sq.head.Load() >= uint32(len(sq.slots)) {
		return fmt.Errorf("post send on QP %d: %w", q.qpn, ErrQueueFull)
	}
	i := t & sq.mask
	s := &sq.slots[i]
	*s = sendWQE{id: wr.ID, remoteAddr: wr.RemoteAddr, rkey: wr.RKey, imm: wr.Imm, opcode: wr.Opcode, flags: wr.Flags}
	if wr.Opcode == WRSendWithInv {
		s.imm = wr.InvalidateRKey
	}
	if q.sigAll {
		s.flags |= SendSignaled
	}
	var n uint64
	if inline {
		if sq.inline == nil {
			sq.inline = make([]byte, len(sq.slots)*sq.maxInline)
		}
		copy(sq.inline[int(i)*sq.maxInline:], wr.InlineData)
		n = uint64(len(wr.InlineData))
	} else {
		s.nsge = uint16(len(wr.SGL))
		for j, g := range wr.SGL {
			p, _ := sq.sge(i, s, j)
			*p = g
			n += uint64(g.Length)
		}
	}
	if wr.Opcode.isAtomic() {
		if sq.atomics == nil {
			sq.atomics = make([]atomicOperands, len(sq.slots))
		}
		sq.atomics[i] = atomicOperands{compareAdd: wr.CompareAdd, swap: wr.Swap}
	}
	s.length = uint32(min(n, 1<<32-1))
	s.state = wqeNew
	s.status = WCSuccess
	if n > 1<<31 {
		s.state = wqeError
		s.status = WCLocLenErr
	}
	sq.tail.Store(t + 1)
	return nil
}

// PostRecv posts a receive work request (ibv_post_recv).
func (q *QP) PostRecv(wr *RecvWR) error {
	if q.srq != nil {
		return fmt.Errorf("post receive on QP %d: the QP uses an SRQ: %w", q.qpn, ErrInvalidArgument)
	}
	if q.State() == QPSReset {
		return fmt.Errorf("post receive on QP %d: %w (RESET)", q.qpn, ErrInvalidState)
	}
	if err := q.rq.Post(wr); err != nil {
		return fmt.Errorf("QP %d: %w", q.qpn, err)
	}
	q.home.Load().kick(q)
	return nil
}

// DebugState describes the QP's protocol state (PSNs, queue positions,
// timers) for diagnostics; it is taken on the engine goroutine.
func (q *QP) DebugState() string {
	var s string
	_ = q.do(func() error {
		r, p := &q.req, &q.resp
		s = fmt.Sprintf("QP %d %v: sq tail %d req %d comp %d sqPSN %d compPSN %d rdAtomic %d retries %d/%d retransAt %d rnrAt %d retried %v@%d; "+
			"resp ePSN %d msn %d mode %d nakSent %v jobs %d errPending %v; now %d",
			q.qpn, q.st, q.sq.tail.Load(), r.reqIdx, r.compIdx, r.sqPSN, r.compPSN, r.rdAtomicOut, r.retryLeft, r.rnrLeft,
			r.retransAt, r.rnrAt, r.retried, r.retryPSN, p.ePSN, p.msn, p.mode, p.nakSent, p.jobTail-p.jobHead, p.errPending, q.e.now())
		if r.compIdx != q.sq.tail.Load() {
			w := q.sqSlot(r.compIdx)
			s += fmt.Sprintf("; head WQE %v len %d state %d PSNs %d..%d next %d", w.opcode, w.length, w.state, w.firstPSN, w.lastPSN, w.nextPSN)
		}
		return nil
	})
	return s
}

// PostRecvList posts several receives with one doorbell; it returns how many
// it posted (on an error, wrs[n] failed).
func (q *QP) PostRecvList(wrs []RecvWR) (int, error) {
	if q.srq != nil {
		return 0, fmt.Errorf("post receive on QP %d: the QP uses an SRQ: %w", q.qpn, ErrInvalidArgument)
	}
	if q.State() == QPSReset {
		return 0, fmt.Errorf("post receive on QP %d: %w (RESET)", q.qpn, ErrInvalidState)
	}
	n, err := q.rq.PostList(wrs)
	if n > 0 {
		q.home.Load().kick(q)
	}
	if err != nil {
		return n, fmt.Errorf("QP %d: %w", q.qpn, err)
	}
	return n, nil
}
