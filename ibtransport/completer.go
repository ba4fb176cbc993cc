package ibtransport

import (
	"encoding/binary"
	"time"
)

// onResponse is the completer: it matches an ACK, NAK, READ response or
// atomic ACK against the oldest outstanding WQEs, retires them in order and
// triggers retransmission.
func (q *QP) onResponse(p *Packet, oi *OpcodeInfo) {
	if q.st != QPSRTS && q.st != QPSSQD {
		q.e.Ctr.RxFiltered.Add(1)
		return
	}
	r := &q.req
	psn := p.BTH.PSN()
	if !psn.Before(r.sqPSN) {
		// Nothing was sent with this PSN: a bogus or very stale response
		// must not retire work requests.
		q.e.Ctr.RxBadResponse.Add(1)
		return
	}
	// A response to something sent, even one discarded below, shows the
	// responder alive and answering: hold the retransmit timer off, as
	// rxe's completer does. Otherwise a responder still streaming an
	// earlier READ response (or a replay of it) behind a slow link gets a
	// timeout, and so yet another replay to queue, every timeout period.
	if q.attr.Timeout != 0 && q.awaitingAck() {
		r.retransAt = q.e.now() + q.timeout()
	}
	var w *sendWQE
	for {
		if r.compIdx == q.sq.tail.Load() {
			q.e.Ctr.RxBadResponse.Add(1)
			return
		}
		w = q.sqSlot(r.compIdx)
		if w.state != wqeSending {
			q.e.Ctr.RxBadResponse.Add(1)
			return
		}
		if !psn.After(w.lastPSN) {
			break
		}
		// A response beyond this WQE acknowledges it, unless it is a READ
		// or atomic, whose own response must have been lost.
		if w.opcode.isRead() || w.opcode.isAtomic() {
			q.retryOnce()
			return
		}
		q.completeHead(WCSuccess)
	}
	if psn.Before(w.firstPSN) {
		q.e.Ctr.RxBadResponse.Add(1) // late duplicate of something already retired
		return
	}
	switch oi.Kind {
	case KindReadResponse:
		q.onReadResponse(p, oi, w, psn)
	case KindAtomicAck:
		if !w.opcode.isAtomic() || psn != w.firstPSN || p.AtomicAckETH == nil {
			q.e.Ctr.RxBadResponse.Add(1)
			return
		}
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], p.AtomicAckETH.OrigData())
		if !q.scatter(r.compIdx, w, 0, b[:]) {
			q.completeHead(WCLocProtErr)
			q.fail()
			return
		}
		q.completeHead(WCSuccess)
	case KindAck:
		q.onAck(p, w, psn)
	}
}

func (q *QP) onReadResponse(p *Packet, oi *OpcodeInfo, w *sendWQE, psn PSN) {
	r := &q.req
	if !w.opcode.isRead() {
		q.e.Ctr.RxBadResponse.Add(1)
		return
	}
	if psn != r.compPSN {
		if psn.After(r.compPSN) {
			q.retryOnce() // a response was lost
		} else {
			q.e.Ctr.RxBadResponse.Add(1)
		}
		return
	}
	off := uint32(psn.Diff(w.firstPSN)) * q.mtu
	want := min(w.length-off, q.mtu)
	// Each READ request of a segmented READ is answered FIRST..LAST.
	segEnd := psn == w.lastPSN || (uint32(psn.Diff(w.firstPSN))+1)%readSegmentPSNs == 0
	if uint32(len(p.Payload)) != want || segEnd != (oi.Position == PositionLast || oi.Position == PositionOnly) {
		q.e.Ctr.RxBadResponse.Add(1)
		return
	}
	if !q.scatter(r.compIdx, w, off, p.Payload) {
		q.completeHead(WCLocProtErr)
		q.fail()
		return
	}
	q.progress(psn.Add(1))
	if psn == w.lastPSN {
		q.completeHead(WCSuccess)
	}
}

func (q *QP) onAck(p *Packet, w *sendWQE, psn PSN) {
	r := &q.req
	syn := p.AETH.Syndrome()
	if psn.Before(r.compPSN) && syn.Kind() != SyndromeACK {
		q.e.Ctr.RxBadResponse.Add(1) // stale NAK
		return
	}
	switch syn.Kind() {
	case SyndromeACK:
		if w.opcode.isRead() || w.opcode.isAtomic() || psn.Before(r.compPSN) {
			return
		}
		q.progress(psn.Add(1))
		if psn == w.lastPSN {
			q.completeHead(WCSuccess)
		}
	case SyndromeRNRNAK:
		q.e.Ctr.RNRNAKsHandled.Add(1)
		q.progress(psn)
		if q.attr.RNRRetry != infiniteRetries {
			if r.rnrLeft == 0 {
				q.completeHead(WCRNRRetryExcErr)
				q.fail()
				return
			}
			r.rnrLeft--
		}
		q.goBack()
		r.rnrAt = q.e.now() + int64(syn.RNRTimer().Duration()/time.Nanosecond)
	case SyndromeNAK:
		switch syn.NAKCode() {
		case NAKPSNSequenceError:
			// The NAK acknowledges everything before its PSN.
			q.progress(psn)
			if r.rnrAt != 0 {
				return
			}
			q.retryOnce()
		case NAKInvalidRequest:
			q.failHead(WCRemInvReqErr)
		case NAKRemoteAccessError:
			q.failHead(WCRemAccessErr)
		case NAKRemoteOperationalError:
			q.failHead(WCRemOpErr)
		default:
			q.failHead(WCRemInvRDReqErr)
		}
	default:
		q.e.Ctr.RxBadResponse.Add(1)
	}
}

func (q *QP) failHead(st WCStatus) {
	q.completeHead(st)
	q.fail()
}

// retryOnce restarts from the oldest unacknowledged PSN unless a restart
// from there already happened without progress since (duplicated NAKs,
// several responses past one gap).
func (q *QP) retryOnce() {
	r := &q.req
	if r.retried && r.retryPSN == r.compPSN {
		return
	}
	q.retry()
}

// progress records that everything before psn is acknowledged.
func (q *QP) progress(psn PSN) {
	r := &q.req
	if !psn.After(r.compPSN) {
		return
	}
	r.compPSN = psn
	r.creditFreed = false
	q.recount()
	r.retried = false
	r.retryLeft = q.attr.RetryCnt
	r.rnrLeft = q.attr.RNRRetry
	r.retransAt = 0
	if q.attr.Timeout != 0 && q.awaitingAck() {
		r.retransAt = q.e.now() + q.timeout()
	}
}

// completeHead retires the oldest WQE with status st, posting a completion
// if it is signaled or failed.
func (q *QP) completeHead(st WCStatus) {
	r := &q.req
	w := q.sqSlot(r.compIdx)
	if st == WCSuccess && w.state == wqeSending {
		q.progress(w.lastPSN.Add(1))
	}
	// Free the slot before the completion is visible: a poster that saw
	// the completion may reuse the slot at once, as libibverbs allows.
	signaled := st != WCSuccess || w.flags&SendSignaled != 0
	var wc WC
	if signaled {
		wc = WC{WRID: w.id, Status: st, Opcode: wcOpcodeOf(w.opcode), QPN: q.qpn, SrcQP: q.destQPN}
		if st == WCSuccess {
			wc.ByteLen = w.length
			if w.opcode.isAtomic() {
				wc.ByteLen = 8
			}
		}
	}
	if r.reqIdx == r.compIdx {
		// Retired before the requester re-sent it after a go-back.
		r.reqIdx++
	} else if w.opcode.isRead() || w.opcode.isAtomic() {
		r.rdAtomicOut--
	}
	r.compIdx++
	q.sq.head.Store(r.compIdx)
	if signaled {
		q.complete(q.sendCQ, wc, false)
	}
	if !q.awaitingAck() {
		r.retransAt = 0
	}
}
