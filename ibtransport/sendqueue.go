package ibtransport

import (
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

type wqeState uint8

const (
	wqeNew       wqeState = iota // posted, not yet started
	wqeSending                   // PSNs assigned; packets (re)transmitting
	wqeError                     // failed a local check; completes with status when it reaches the head
	wqeLocalDone                 // a local operation (bind, local invalidation) executed; completes at the head
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
	// imm is the immediate data; a SEND_WITH_INV keeps the rkey to
	// invalidate there instead (invalidateRKey), the two never meeting in
	// one request.
	imm    uint32
	length uint32
	nsge   uint16 // SGEs in the SGL (0 with SendInline)
	opcode ibv.WROpcode
	flags  ibv.SendFlags
	// Engine-owned.
	state    wqeState
	status   ibv.WCStatus
	firstPSN header.PSN
	lastPSN  header.PSN
	nextPSN  header.PSN // next PSN to transmit; its payload starts (nextPSN-firstPSN) × MTU bytes in
	sge0     ibv.SGE
	mr0      Region // the region behind sge0, resolved before the first packet
}

// invalidateRKey returns the rkey a SEND_WITH_INV or LOCAL_INV
// invalidates.
func (w *sendWQE) invalidateRKey() uint32 { return w.imm }

// flushSpec packs a FLUSH's placement type and selectivity level into the
// slot's imm, which a FLUSH has no other use for.
func flushSpec(t ibv.FlushType, l ibv.FlushLevel) uint32 { return uint32(t) | uint32(l)<<8 }

// flushSpec returns a FLUSH's placement type and selectivity level.
func (w *sendWQE) flushSpec() (t, l uint8) { return uint8(w.imm), uint8(w.imm >> 8) }

// usesRdAtomic reports whether op takes one of the responder's READ and
// atomic resources, counted against max_rd_atomic: READs, atomics and,
// as rxe's requester counts it, ATOMIC_WRITE (not FLUSH).
func usesRdAtomic(op ibv.WROpcode) bool { return op.IsRead() || op.IsAtomic() || op.IsAtomicWrite() }

// needsResponse reports whether op is retired only by its own response,
// which carries data (READ, atomics): an ACK of a later PSN means it was
// lost. ATOMIC_WRITE and FLUSH answer with no data, and a later ACK
// acknowledges them (rxe's completer does the same).
func needsResponse(op ibv.WROpcode) bool { return op.IsRead() || op.IsAtomic() }

// atomicOperands are the operands of an atomic work request. A BIND_MW
// keeps its window's length and rights there (bindOf), the rest of its
// binding in the slot's remoteAddr, rkey and imm: a field more in the
// send queue would cost every idle QP.
// An XRC initiator's slots keep their remote SRQ number there too
// (allocated with the QP).
type atomicOperands struct {
	compareAdd, swap uint64
	srqn             uint32
}

// sendQueue is a QP's ring of send WQEs: posters fill it under mu and
// publish through tail; the engine goroutine consumes it, and the
// completer frees slots through head.
type sendQueue struct {
	mu        sync.Mutex
	slots     []sendWQE
	mask      uint32
	maxSGE    int
	maxInline int
	// SGEs 1..maxSGE-1 of each slot and the regions behind them
	// (maxSGE-1 per slot), allocated with the queue when maxSGE > 1.
	moreSGE []ibv.SGE
	moreMR  []Region
	// Allocated on the first post that needs them, so that QPs that never
	// send inline data or atomics do not pay for them: maxInline bytes and
	// one atomicOperands per slot. Posters set them under mu before
	// publishing the slot through tail.
	inline  []byte
	atomics []atomicOperands
	// ud holds each slot's destination on UD QPs (nil on RC).
	ud   []udDest
	tail atomic.Uint32 // posted
	head atomic.Uint32 // retired by the completer
}

// init allocates the ring for size (a power of two) WQEs.
func (sq *sendQueue) init(size, maxSGE, maxInline int) {
	sq.slots = make([]sendWQE, size)
	sq.mask = uint32(size - 1)
	sq.maxSGE = maxSGE
	sq.maxInline = maxInline
	if maxSGE > 1 {
		sq.moreSGE = make([]ibv.SGE, size*(maxSGE-1))
		sq.moreMR = make([]Region, size*(maxSGE-1))
	}
}

// sge returns SGE j of the WQE in slot i, and where its region is kept.
func (sq *sendQueue) sge(i uint32, w *sendWQE, j int) (*ibv.SGE, *Region) {
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

// gather copies the message bytes at offset off of the WQE in slot i into
// dst, a packet's payload: now, or at SettleReads from a region that
// defers its reads.
func (q *QP) gather(i uint32, w *sendWQE, off uint32, dst []byte) bool {
	sq := &q.sq
	if w.flags&ibv.SendInline != 0 {
		copy(dst, sq.inlineData(i, w)[off:])
		return true
	}
	for j := range int(w.nsge) {
		if len(dst) == 0 {
			break
		}
		mr, n, va := sq.sgePiece(i, w, j, &off, len(dst))
		if n == 0 {
			continue
		}
		if *mr == nil || !q.readPayload(*mr, dst[:n], va) {
			return false
		}
		dst = dst[n:]
	}
	return true
}

// scatter copies src into the SGL of the WQE in slot i at offset off, now
// (atomic results). It reports false if a region is missing or the SGL
// too short.
func (sq *sendQueue) scatter(i uint32, w *sendWQE, off uint32, src []byte) bool {
	return sq.scatterWith(i, w, off, src, Region.WriteAt)
}

// scatterPayload is scatter for a READ response's payload: into a region
// that defers its copies, at SettleWrites.
func (q *QP) scatterPayload(i uint32, w *sendWQE, off uint32, src []byte) bool {
	return q.sq.scatterWith(i, w, off, src, func(mr Region, b []byte, va uint64) bool {
		return q.writePayload(mr, b, va)
	})
}

func (sq *sendQueue) scatterWith(i uint32, w *sendWQE, off uint32, src []byte, write func(Region, []byte, uint64) bool) bool {
	for j := range int(w.nsge) {
		if len(src) == 0 {
			break
		}
		mr, n, va := sq.sgePiece(i, w, j, &off, len(src))
		if n == 0 {
			continue
		}
		if *mr == nil || !write(*mr, src[:n], va) {
			return false
		}
		src = src[n:]
	}
	return len(src) == 0
}

// sgePiece returns the region of SGE j of the WQE in slot i and the part
// of up to want bytes of the message at *off that falls in that SGE: n
// bytes at va. It moves *off past the SGE, or to 0 once the part begins
// inside it.
func (sq *sendQueue) sgePiece(i uint32, w *sendWQE, j int, off *uint32, want int) (*Region, uint32, uint64) {
	s, mr := sq.sge(i, w, j)
	if *off >= s.Length {
		*off -= s.Length
		return mr, 0, 0
	}
	n := min(s.Length-*off, uint32(want))
	va := s.Addr + uint64(*off)
	*off = 0
	return mr, n, va
}

// packetCount returns how many packets of up to mtu bytes carry n bytes:
// at least one, even for no data.
func packetCount(n, mtu uint32) uint32 { return max((n+mtu-1)/mtu, 1) }

// packets returns how many PSNs a WQE uses.
func (q *QP) packets(w *sendWQE) uint32 {
	if w.opcode.IsAtomic() || w.opcode.IsAtomicWrite() || w.opcode.IsFlush() {
		return 1
	}
	return packetCount(w.length, q.mtu)
}

func (q *QP) sqSlot(i uint32) *sendWQE { return &q.sq.slots[i&q.sq.mask] }

// sendWC returns the completion of w with status st.
func (q *QP) sendWC(w *sendWQE, st ibv.WCStatus) ibv.WC {
	return ibv.WC{WRID: w.id, Status: st, Opcode: w.opcode.WCOpcode(), QPN: q.qpn, SrcQP: q.destQPN}
}
