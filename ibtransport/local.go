package ibtransport

import "github.com/softnic/softnic/ibtransport/ibv"

// Local operations (BIND_MW, LOCAL_INV) send no packet: the requester
// executes them when it reaches them in the send queue, as rxe's
// rxe_do_local_ops does, so that a request posted after a bind may use
// the window, and the completer completes them in order with the rest.

// doLocal executes the local operation w at reqIdx, unless the fence or
// the SQD state holds it back, and moves past it; false when it must
// wait or failed (it then completes with an error at the head).
func (r *requester) doLocal(w *sendWQE) bool {
	q := r.qp
	if w.state == wqeLocalDone {
		// Executed before a go-back-N rewound the requester over it.
		r.reqIdx++
		return true
	}
	if q.st == ibv.QPSSQD || (w.flags&ibv.SendFence != 0 && q.comp.compIdx != r.reqIdx) {
		return false
	}
	if st := r.executeLocal(w); st != ibv.WCSuccess {
		r.failWQE(w, st)
		return false
	}
	w.state = wqeLocalDone
	r.localDone = true
	r.reqIdx++
	return true
}

// executeLocal binds or invalidates; the statuses are rxe's.
func (r *requester) executeLocal(w *sendWQE) ibv.WCStatus {
	q := r.qp
	if w.opcode == ibv.WRBindMW {
		b := q.sq.bindOf(r.reqIdx, w)
		if !q.mem.BindMW(q, &b) {
			return ibv.WCMWBindErr
		}
		return ibv.WCSuccess
	}
	if !q.mem.InvalidateRKey(q, w.invalidateRKey(), false) {
		return ibv.WCLocQPOpErr
	}
	return ibv.WCSuccess
}

// completeLocal completes the local operations at the head of the send
// queue, then a WQE that failed local checks there (failing the QP).
func (c *completer) completeLocal() {
	q := c.qp
	c.completeLocalDone()
	if c.compIdx == q.sq.tail.Load() {
		// Nothing executed can wait behind a request in flight any more.
		// (Not before: a go-back-N rewind moves reqIdx back over local
		// operations executed already, which the completer must still
		// retire as the ACKs pass them.)
		q.req.localDone = false
	}
	if q.req.localErr && c.compIdx != q.sq.tail.Load() {
		if w := q.sqSlot(c.compIdx); w.state == wqeError {
			c.failHead(w.status)
		}
	}
}

// completeLocalDone completes the executed local operations at the head.
// completeHead calls it too (a bind behind a WRITE completes with the
// WRITE's ACK): the guard keeps that from recursing.
func (c *completer) completeLocalDone() {
	if c.inLocal {
		return
	}
	c.inLocal = true
	q := c.qp
	for c.compIdx != q.sq.tail.Load() && q.sqSlot(c.compIdx).state == wqeLocalDone {
		c.completeHead(ibv.WCSuccess)
	}
	c.inLocal = false
}

// bindOf returns the binding of the BIND_MW w in slot i (see
// atomicOperands).
func (sq *sendQueue) bindOf(i uint32, w *sendWQE) ibv.MWBind {
	ops := &sq.atomics[i&sq.mask]
	return ibv.MWBind{RKey: w.rkey, LKey: w.imm, Addr: w.remoteAddr, Length: ops.compareAdd, Access: ibv.Access(ops.swap)}
}
