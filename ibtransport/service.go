package ibtransport

import "github.com/softnic/softnic/ibtransport/ibv"

// service does a QP's share of Process: responses, then the completer's
// timers and local errors, then new requests. It reports whether the QP
// has more to send right now.
func (q *QP) service(now int64) bool {
	if !q.typ.Reliable() {
		return q.serviceUnacked()
	}
	switch q.st {
	case ibv.QPSReset, ibv.QPSInit:
		return false
	case ibv.QPSErr:
		q.flush()
		return false
	}
	if q.cnpPending > 0 {
		q.sendCNP()
	}
	busy := q.resp.sendResponses()
	if q.st == ibv.QPSErr {
		q.flush()
		return false
	}
	if q.st == ibv.QPSSQD && !q.sqDrained && q.comp.compIdx == q.req.reqIdx && !q.comp.outstanding() {
		q.sqDrained = true
		q.e.emit(q, QPEventSQDrained)
	}
	if q.st == ibv.QPSRTS || q.st == ibv.QPSSQD {
		q.comp.checkTimers(now)
		q.comp.completeLocalErrors()
		if q.st == ibv.QPSErr {
			q.flush()
			return false
		}
		if q.rp.limited {
			q.rp.tick(&q.e.g.cc, q.e.now())
		}
		if q.req.sendRequests() {
			busy = true
		}
		if q.req.localErr || q.req.localDone {
			// A WQE failed its local checks as it was sent: complete it
			// now. Nothing may bring the engine back for it (no packet,
			// no timer, no post), and the QP would look busy forever.
			q.comp.completeLocalErrors()
			if q.st == ibv.QPSErr {
				q.flush()
				return false
			}
		}
	}
	return busy
}

// timersIdle reports whether neither the retransmit nor the RNR timer runs.
func (c *completer) timersIdle() bool { return c.retransAt == 0 && c.rnrAt == 0 }

// onlyWaitsWindow reports whether the QP's only work is a message waiting
// for the device window: nothing in flight, no response, no timer. It can
// leave the active list until admitWaiting brings it back.
func (q *QP) onlyWaitsWindow() bool {
	return q.waitsWindow && !q.awaitingAck() && q.comp.timersIdle() && q.resp.idle() && q.st == ibv.QPSRTS
}

// quiet reports whether the QP has nothing to do until a packet, a post or
// a command arrives: no work request in flight or waiting, no response to
// send, no timer.
func (q *QP) quiet() bool {
	switch q.st {
	case ibv.QPSReset, ibv.QPSInit:
		return true
	}
	switch {
	case !q.resp.idle():
		return false
	case !q.comp.timersIdle():
		return false
	case q.comp.compIdx != q.sq.tail.Load():
		return false
	case q.st == ibv.QPSErr && q.srq == nil && q.rq.Len() > 0:
		return false
	case q.st == ibv.QPSSQD && !q.sqDrained:
		return false
	}
	return true
}

// toError moves the QP to ERR; the next service flushes its queues.
func (q *QP) toError() {
	if q.st == ibv.QPSErr {
		return
	}
	q.setState(ibv.QPSErr)
	q.comp.stopTimers()
	q.resp.jobHead, q.resp.jobTail = 0, 0
	q.resp.errPending = false
	if q.resp.recvActive {
		q.resp.completeRecv(ibv.WCWRFlushErr, 0)
	}
	q.flush()
	if q.srq != nil && q.typ != ibv.QPTypeXRCRecv {
		q.e.emit(q, QPEventLastWQEReached)
	}
}

// flush completes every outstanding work request with WR_FLUSH_ERR.
func (q *QP) flush() {
	q.comp.flush()
	if q.srq == nil {
		for w := q.rq.peek(); w != nil; w = q.rq.peek() {
			wc := ibv.WC{WRID: w.id, Status: ibv.WCWRFlushErr, Opcode: ibv.WCRecv, QPN: q.qpn, SrcQP: q.destQPN}
			q.rq.pop()
			q.publishRecvRetired()
			q.complete(q.recvCQ, wc, false)
		}
	}
}
