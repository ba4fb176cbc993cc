package ibtransport

import (
	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// requester is the send side of a QP (rxe_req.c): it turns send work
// requests into request packets, assigning PSNs, within the QP's window,
// max_rd_atomic and the device-wide window. What was sent is retired or
// rewound by the completer.
type requester struct {
	qp          *QP
	reqIdx      uint32     // next WQE to transmit (SQ counter)
	sqPSN       header.PSN // PSN of the next new packet
	rdAtomicOut int        // READ/atomic WQEs in [compIdx, reqIdx)
	sinceAckReq int        // packets sent since the last AckReq
	// sentPSN is one past the highest PSN transmitted (for a READ, its
	// last response's): packets from the completer's compPSN up to it
	// await their ACK and keep the retransmit timer running.
	sentPSN header.PSN
	// localErr: the requester met a WQE that failed local checks, which
	// the completer retires once it reaches the head. Until then it has
	// nothing to look at (it runs for every active QP on every pass).
	localErr bool
	// localDone: the requester executed a local operation, which the
	// completer completes once every earlier WQE is retired.
	localDone bool
	// credit is what the QP counts in the device-wide window
	// (Engine.unacked): its PSNs assigned and not acknowledged, at most
	// window (what it lets out at once). None while creditFreed: after a
	// retransmit timeout, until progress, so that a dead peer does not
	// hold the device's window.
	credit      int
	creditFreed bool
	// window is the QP's window of unacknowledged PSNs at its path MTU
	// (windowFor). A READ of more response packets is requested in
	// segments of this many (see buildRead).
	window int32
}

// start sets the first PSN the requester sends (SQ PSN).
func (r *requester) start(psn header.PSN) {
	r.sqPSN = psn
	r.sentPSN = psn
}

// recount brings the QP's share of the device-wide window up to date.
func (r *requester) recount() {
	c := 0
	if !r.creditFreed {
		c = min(max(int(r.sqPSN.Diff(r.qp.comp.compPSN)), 0), int(r.window))
	}
	r.qp.e.unacked += c - r.credit
	r.credit = c
}

// releaseCredit takes the QP's packets out of the device-wide window until
// its next progress.
func (r *requester) releaseCredit() {
	r.creditFreed = true
	r.recount()
}

// regainCredit puts the QP's packets back into the device-wide window: the
// peer made progress.
func (r *requester) regainCredit() {
	r.creditFreed = false
	r.recount()
}

// retire accounts for the completer retiring WQE idx, the oldest.
func (r *requester) retire(idx uint32, w *sendWQE) {
	if r.reqIdx == idx {
		// Retired before the requester re-sent it after a go-back.
		r.reqIdx++
	} else if usesRdAtomic(w.opcode) {
		r.rdAtomicOut--
	}
}

// restartAt makes WQE idx the next to transmit, with no READ or atomic
// outstanding.
func (r *requester) restartAt(idx uint32) {
	r.reqIdx = idx
	r.rdAtomicOut = 0
}

// rewind makes the requester send everything again from compPSN, in WQE
// compIdx (go-back-N). Only WQEs up to reqIdx (which may be half sent)
// have been transmitted.
func (r *requester) rewind(compIdx uint32, compPSN header.PSN) {
	q := r.qp
	end := r.reqIdx
	if end != q.sq.tail.Load() {
		end++
	}
	for i := compIdx; i != end; i++ {
		w := q.sqSlot(i)
		if w.state != wqeSending {
			continue
		}
		w.nextPSN = w.firstPSN
		if i == compIdx && compPSN.After(w.firstPSN) && !compPSN.After(w.lastPSN) {
			w.nextPSN = compPSN
		}
	}
	r.restartAt(compIdx)
}

// sendRequests transmits request packets, new or retransmitted, until the
// window, the packet budget or the link stops it. It reports whether it
// stopped only for the budget.
func (r *requester) sendRequests() bool {
	q := r.qp
	if q.comp.rnrAt != 0 || q.path == nil {
		return false
	}
	tail := q.sq.tail.Load()
	for budget := packetBudget; budget > 0; budget-- {
		if r.reqIdx == tail {
			return false
		}
		if q.e.passLeft <= 0 {
			return true
		}
		if q.rp.limited && !q.rp.maySend(&q.e.g.cc, q.e.now()) {
			// Over its rate: the engine comes back (or wakes) at sendAt
			// (pacedUntil).
			return false
		}
		w := q.sqSlot(r.reqIdx)
		if w.opcode.IsLocal() && w.state != wqeError {
			if !r.doLocal(w) {
				return false
			}
			continue
		}
		if !r.mayTransmit(w) || !r.transmit(w) {
			return false
		}
	}
	return true
}

// mayTransmit reports whether the next packet of w may go out now,
// starting w if it is new.
func (r *requester) mayTransmit(w *sendWQE) bool {
	switch w.state {
	case wqeError:
		r.localErr = true
		return false
	case wqeNew:
		return r.startWQE(w)
	default:
		return w.nextPSN.Diff(r.qp.comp.compPSN) < r.window
	}
}

// startWQE assigns PSNs to the new WQE at reqIdx once the fence, the
// READ/atomic limit and the windows let it start and its SGL checks out.
func (r *requester) startWQE(w *sendWQE) bool {
	q := r.qp
	c := &q.comp
	if q.st == ibv.QPSSQD {
		return false
	}
	if w.flags&ibv.SendFence != 0 && c.compIdx != r.reqIdx {
		return false
	}
	if usesRdAtomic(w.opcode) && r.rdAtomicOut >= q.maxRdAtomic() {
		return false
	}
	if c.compIdx != r.reqIdx && r.sqPSN.Diff(c.compPSN) >= r.window {
		return false
	}
	if q.e.unacked >= maxDeviceUnacked {
		// New messages wait for ACKs of the device's other QPs, so that
		// the peer's receive ring does not overflow; messages started go
		// on, so their ACKs come.
		inc(&q.e.Ctr.TxWindowStalls)
		q.e.waitWindow(q)
		return false
	}
	if st := r.prepare(r.reqIdx, w); st != ibv.WCSuccess {
		r.failWQE(w, st)
		return false
	}
	r.assignPSNs(w)
	r.recount()
	return true
}

// assignPSNs gives w, a WQE starting, the next PSNs of the send queue, one
// a packet, and marks it sending.
func (r *requester) assignPSNs(w *sendWQE) {
	w.firstPSN = r.sqPSN
	w.lastPSN = r.sqPSN.Add(r.qp.packets(w) - 1)
	w.nextPSN = w.firstPSN
	w.state = wqeSending
	r.sqPSN = w.lastPSN.Add(1)
}

// failWQE marks w failed with st; the completer completes it at the head.
func (r *requester) failWQE(w *sendWQE, st ibv.WCStatus) {
	w.state, w.status = wqeError, st
	r.localErr = true
}

// transmit sends the next packet of w, the WQE at reqIdx, and moves on to
// the next WQE after its last.
func (r *requester) transmit(w *sendWQE) bool {
	q := r.qp
	buf := q.path.Buffer()
	if buf == nil {
		return false
	}
	n, ok := r.buildRequest(buf, r.reqIdx, w)
	if !ok {
		// The memory behind the SGL was deregistered under the WQE.
		r.failWQE(w, ibv.WCLocProtErr)
		return false
	}
	q.path.Send(n)
	if q.rp.limited {
		q.rp.sent(&q.e.g.cc, n)
	}
	q.e.passLeft--
	q.countSent(n)
	if w.nextPSN.After(r.sentPSN) {
		r.sentPSN = w.nextPSN
	}
	q.comp.armTimer()
	if w.nextPSN == w.lastPSN.Add(1) {
		r.reqIdx++
		if usesRdAtomic(w.opcode) {
			r.rdAtomicOut++
		}
	}
	return true
}

// prepare checks the local SGL of the WQE in slot i and resolves its keys
// before the WQE's first packet.
func (r *requester) prepare(i uint32, w *sendWQE) ibv.WCStatus {
	q := r.qp
	op := w.opcode
	var need ibv.Access // READ and atomic results are written into the SGL
	if op.IsRead() || op.IsAtomic() {
		need = ibv.AccessLocalWrite
	}
	if op.IsAtomic() && w.length < 8 {
		return ibv.WCLocLenErr
	}
	if op.IsAtomicWrite() || op.IsFlush() {
		return ibv.WCSuccess // no local memory: the value is in the slot
	}
	for j := range int(w.nsge) {
		s, mr := q.sq.sge(i, w, j)
		*mr = nil
		if s.Length == 0 {
			continue
		}
		reg := q.mem.LocalRegion(s.LKey, s.Addr, s.Length, need)
		if reg == nil {
			return ibv.WCLocProtErr
		}
		*mr = reg
	}
	return ibv.WCSuccess
}
