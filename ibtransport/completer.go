package ibtransport

import (
	"encoding/binary"
	"time"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// completer is the part of a QP that retires send work requests
// (rxe_comp.c): it matches ACKs, NAKs, READ responses and atomic ACKs
// against the oldest outstanding WQEs, completes them in order, and
// restarts the requester go-back-N on a NAK, a gap in responses or a
// timeout, counting retry_cnt and rnr_retry.
type completer struct {
	qp        *QP
	compIdx   uint32     // oldest WQE not retired
	compPSN   header.PSN // oldest unacknowledged PSN
	retryLeft uint8
	rnrLeft   uint8
	retransAt int64 // retransmit deadline (engine clock), 0 when idle
	rnrAt     int64 // end of an RNR wait, 0 when not waiting
	// A go-back-N restart from retryPSN already happened and no progress
	// came since: duplicated NAKs or gaps must not restart again.
	retried  bool
	inLocal  bool // in completeLocalDone
	retryPSN header.PSN
}

// start sets the first PSN the completer waits for (SQ PSN).
func (c *completer) start(psn header.PSN) { c.compPSN = psn }

// resetRetries refills the retry and RNR retry counts from the attributes.
func (c *completer) resetRetries() {
	c.retryLeft = c.qp.attr.RetryCnt
	c.rnrLeft = c.qp.attr.RNRRetry
}

// armTimer starts the retransmit timer unless it runs (or the QP has
// none): the requester sent a packet.
func (c *completer) armTimer() {
	if c.retransAt == 0 && c.qp.attr.Timeout != 0 {
		c.startTimer()
	}
}

// startTimer runs the retransmit timer from now.
func (c *completer) startTimer() { c.retransAt = c.qp.e.now() + c.qp.timeout() }

// restartTimer runs the retransmit timer anew while packets await their
// ACK.
func (c *completer) restartTimer() {
	if c.qp.attr.Timeout != 0 && c.qp.awaitingAck() {
		c.startTimer()
	}
}

// stopTimers stops the retransmit and RNR timers.
func (c *completer) stopTimers() { c.retransAt, c.rnrAt = 0, 0 }

// onResponse handles a response packet for the QP.
func (c *completer) onResponse(p *header.Packet, oi *header.OpcodeInfo) {
	psn := p.BTH.PSN()
	if !c.checkState() || !c.checkPSN(psn) {
		return
	}
	// A response to something sent, even one discarded below, shows the
	// responder alive and answering: hold the retransmit timer off, as
	// rxe's completer does. Otherwise a responder still streaming an
	// earlier READ response (or a replay of it) behind a slow link gets a
	// timeout, and so yet another replay to queue, every timeout period.
	c.restartTimer()
	w := c.getWQE(psn)
	if w == nil {
		return
	}
	switch oi.Kind {
	case header.KindReadResponse:
		c.doRead(p, oi, w, psn)
	case header.KindAtomicAck:
		c.doAtomic(p, w, psn)
	case header.KindAck:
		c.checkAck(p, w, psn)
	}
}

// checkState drops responses unless the QP sends.
func (c *completer) checkState() bool {
	if st := c.qp.st; st != ibv.QPSRTS && st != ibv.QPSSQD {
		inc(&c.qp.e.Ctr.RxFiltered)
		return false
	}
	return true
}

// checkPSN drops a response to a PSN never sent: a bogus or very stale
// response must not retire work requests.
func (c *completer) checkPSN(psn header.PSN) bool {
	if !psn.Before(c.qp.req.sqPSN) {
		inc(&c.qp.e.Ctr.RxBadResponse)
		return false
	}
	return true
}

// getWQE returns the outstanding WQE the response at psn belongs to,
// retiring the WQEs before it that the response acknowledges; nil when
// there is none or the response is dealt with.
func (c *completer) getWQE(psn header.PSN) *sendWQE {
	q := c.qp
	var w *sendWQE
	for {
		if c.compIdx == q.sq.tail.Load() {
			inc(&q.e.Ctr.RxBadResponse)
			return nil
		}
		w = q.sqSlot(c.compIdx)
		if w.state == wqeLocalDone {
			c.completeHead(ibv.WCSuccess)
			continue
		}
		if w.state != wqeSending {
			inc(&q.e.Ctr.RxBadResponse)
			return nil
		}
		if !psn.After(w.lastPSN) {
			break
		}
		// A response beyond this WQE acknowledges it, unless it is a READ
		// or atomic, whose own response must have been lost.
		if needsResponse(w.opcode) {
			c.retryOnce()
			return nil
		}
		c.completeHead(ibv.WCSuccess)
	}
	if psn.Before(w.firstPSN) {
		inc(&q.e.Ctr.RxBadResponse) // late duplicate of something already retired
		return nil
	}
	return w
}

// doAtomic writes an atomic's original value into its SGL.
func (c *completer) doAtomic(p *header.Packet, w *sendWQE, psn header.PSN) {
	if !w.opcode.IsAtomic() || psn != w.firstPSN || p.AtomicAckETH == nil {
		inc(&c.qp.e.Ctr.RxBadResponse)
		return
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], p.AtomicAckETH.OrigData())
	c.qp.e.SettleWrites() // b is written now, after what came before
	if !c.qp.sq.scatter(c.compIdx, w, 0, b[:]) {
		c.failHead(ibv.WCLocProtErr)
		return
	}
	c.completeHead(ibv.WCSuccess)
}

// doRead writes a READ response, the next one expected, into the READ's
// SGL.
func (c *completer) doRead(p *header.Packet, oi *header.OpcodeInfo, w *sendWQE, psn header.PSN) {
	q := c.qp
	if w.opcode.IsAtomicWrite() || w.opcode.IsFlush() {
		c.doZeroRead(p, oi, w, psn)
		return
	}
	if !w.opcode.IsRead() {
		inc(&q.e.Ctr.RxBadResponse)
		return
	}
	if psn != c.compPSN {
		if psn.After(c.compPSN) {
			c.retryOnce() // a response was lost
		} else {
			inc(&q.e.Ctr.RxBadResponse)
		}
		return
	}
	off := uint32(psn.Diff(w.firstPSN)) * q.mtu
	want := min(w.length-off, q.mtu)
	// Each READ request of a segmented READ is answered FIRST..LAST.
	segEnd := psn == w.lastPSN || (uint32(psn.Diff(w.firstPSN))+1)%uint32(q.req.window) == 0
	if uint32(len(p.Payload)) != want || segEnd != (oi.Position == header.PositionLast || oi.Position == header.PositionOnly) {
		inc(&q.e.Ctr.RxBadResponse)
		return
	}
	if !q.scatterPayload(c.compIdx, w, off, p.Payload) {
		c.failHead(ibv.WCLocProtErr)
		return
	}
	c.progress(psn.Add(1))
	if psn == w.lastPSN {
		c.completeHead(ibv.WCSuccess)
	}
}

// doZeroRead retires an ATOMIC_WRITE or FLUSH on its response, an RDMA
// READ RESPONSE ONLY of no bytes whose AETH is an ACK (rxe's answer).
func (c *completer) doZeroRead(p *header.Packet, oi *header.OpcodeInfo, w *sendWQE, psn header.PSN) {
	if oi.Position != header.PositionOnly || len(p.Payload) != 0 || psn != w.firstPSN ||
		p.AETH.Syndrome().Kind() != header.SyndromeACK {
		inc(&c.qp.e.Ctr.RxBadResponse)
		return
	}
	c.completeHead(ibv.WCSuccess)
}

// checkAck handles an ACK, an RNR NAK or a NAK.
func (c *completer) checkAck(p *header.Packet, w *sendWQE, psn header.PSN) {
	syn := p.AETH.Syndrome()
	if psn.Before(c.compPSN) && syn.Kind() != header.SyndromeACK {
		inc(&c.qp.e.Ctr.RxBadResponse) // stale NAK
		return
	}
	switch syn.Kind() {
	case header.SyndromeACK:
		c.completeAck(w, psn)
	case header.SyndromeRNRNAK:
		c.onRNRNAK(syn, psn)
	case header.SyndromeNAK:
		c.onNAK(syn.NAKCode(), psn)
	default:
		inc(&c.qp.e.Ctr.RxBadResponse)
	}
}

// completeAck retires what a positive ACK acknowledges. READs and atomics
// are retired by their responses only.
func (c *completer) completeAck(w *sendWQE, psn header.PSN) {
	if needsResponse(w.opcode) || psn.Before(c.compPSN) {
		return
	}
	c.progress(psn.Add(1))
	if psn == w.lastPSN {
		c.completeHead(ibv.WCSuccess)
	}
}

// onRNRNAK waits the RNR timer, then sends again from psn.
func (c *completer) onRNRNAK(syn header.Syndrome, psn header.PSN) {
	q := c.qp
	inc(&q.e.Ctr.RNRNAKsHandled)
	inc(&q.ctr.RNRNAKsHandled)
	c.progress(psn)
	if q.attr.RNRRetry != infiniteRetries {
		if c.rnrLeft == 0 {
			inc(&q.e.Ctr.RNRRetryExceeded)
			inc(&q.ctr.RNRRetryExceeded)
			c.failHead(ibv.WCRNRRetryExcErr)
			return
		}
		c.rnrLeft--
	}
	c.goBack()
	c.rnrAt = q.e.now() + int64(syn.RNRTimer().Duration()/time.Nanosecond)
}

// onNAK handles a NAK: a sequence error restarts from its PSN, every other
// code fails the head WQE and the QP.
func (c *completer) onNAK(code header.NAKCode, psn header.PSN) {
	switch code {
	case header.NAKPSNSequenceError:
		inc(&c.qp.e.Ctr.RxNAKSeq)
		inc(&c.qp.ctr.RxNAKSeq)
		// The NAK acknowledges everything before its PSN.
		c.progress(psn)
		if c.rnrAt != 0 {
			return
		}
		c.retryOnce()
	case header.NAKInvalidRequest:
		c.failHead(ibv.WCRemInvReqErr)
	case header.NAKRemoteAccessError:
		c.failHead(ibv.WCRemAccessErr)
	case header.NAKRemoteOperationalError:
		c.failHead(ibv.WCRemOpErr)
	default:
		c.failHead(ibv.WCRemInvRDReqErr)
	}
}

// failHead completes the oldest WQE with st and fails the QP.
func (c *completer) failHead(st ibv.WCStatus) {
	c.completeHead(st)
	c.qp.fail()
}

// goBack rewinds the requester to the oldest unacknowledged PSN, so that
// everything from there is sent again (go-back-N).
func (c *completer) goBack() {
	inc(&c.qp.e.Ctr.Retransmits)
	inc(&c.qp.ctr.Retransmits)
	c.qp.req.rewind(c.compIdx, c.compPSN)
	c.retransAt = 0
	c.retried = true
	c.retryPSN = c.compPSN
}

// retry restarts transmission after a NAK, a gap in responses or a timeout,
// counting against retry_cnt (7 means forever). It reports false, having
// failed the QP, when the retries are exhausted.
func (c *completer) retry() bool {
	if c.qp.attr.RetryCnt != infiniteRetries {
		if c.retryLeft == 0 {
			inc(&c.qp.e.Ctr.RetryExceeded)
			inc(&c.qp.ctr.RetryExceeded)
			c.failHead(ibv.WCRetryExcErr)
			return false
		}
		c.retryLeft--
	}
	c.goBack()
	return true
}

// retryOnce restarts from the oldest unacknowledged PSN unless a restart
// from there already happened without progress since (duplicated NAKs,
// several responses past one gap).
func (c *completer) retryOnce() {
	if c.retried && c.retryPSN == c.compPSN {
		return
	}
	c.retry()
}

// checkTimers handles an expired retransmit or RNR timer.
func (c *completer) checkTimers(now int64) {
	if c.rnrAt != 0 && now >= c.rnrAt {
		c.rnrAt = 0
	}
	if c.retransAt != 0 && now >= c.retransAt {
		c.retransAt = 0
		if c.qp.awaitingAck() {
			inc(&c.qp.e.Ctr.Timeouts)
			inc(&c.qp.ctr.Timeouts)
			c.qp.req.releaseCredit()
			c.retry()
		}
	}
}

// progress records that everything before psn is acknowledged.
func (c *completer) progress(psn header.PSN) {
	if !psn.After(c.compPSN) {
		return
	}
	c.compPSN = psn
	c.qp.req.regainCredit()
	c.retried = false
	c.resetRetries()
	c.retransAt = 0
	c.restartTimer()
}

// completeHead retires the oldest WQE with status st, posting a completion
// if it is signaled or failed.
func (c *completer) completeHead(st ibv.WCStatus) {
	q := c.qp
	w := q.sqSlot(c.compIdx)
	if st == ibv.WCSuccess && w.state == wqeSending {
		c.progress(w.lastPSN.Add(1))
	}
	// Free the slot before the completion is visible: a poster that saw
	// the completion may reuse the slot at once, as libibverbs allows.
	internal, op := w.flags&sendTMInternal != 0, w.opcode
	signaled := !internal && (st != ibv.WCSuccess || w.flags&ibv.SendSignaled != 0)
	var wc ibv.WC
	if signaled {
		wc = q.sendWC(w, st)
		if st == ibv.WCSuccess {
			wc.ByteLen = w.length
			if w.opcode.IsAtomic() {
				wc.ByteLen = 8
			}
		}
	}
	if st == ibv.WCSuccess && w.opcode.IsSend() {
		inc(&q.e.Ctr.RdmaSends)
		inc(&q.ctr.RdmaSends)
	}
	q.req.retire(c.compIdx, w)
	c.retireHead()
	if signaled {
		q.complete(q.sendCQ, wc, false)
	}
	if internal {
		q.tmRetired(op, st)
	}
	if q.req.localDone {
		c.completeLocalDone()
	}
	if !q.awaitingAck() {
		c.retransAt = 0
	}
}

// retireHead frees the oldest WQE's slot for posters.
func (c *completer) retireHead() {
	c.compIdx++
	c.qp.sq.head.Store(c.compIdx)
	if m := c.qp.mirrors.Load(); m != nil && m.sq != nil {
		m.sq.publish()
	}
}

// outstanding reports whether some sent packet awaits its response.
func (c *completer) outstanding() bool {
	q := c.qp
	if c.compIdx == q.sq.tail.Load() {
		return false
	}
	return q.sqSlot(c.compIdx).state == wqeSending
}

// completeLocalErrors completes the local operations and a WQE that
// failed local checks once every earlier WQE is retired (completeLocal).
func (c *completer) completeLocalErrors() {
	if q := c.qp; q.req.localErr || q.req.localDone {
		c.completeLocal()
	}
}

// flush completes every outstanding send work request with WR_FLUSH_ERR.
func (c *completer) flush() {
	q := c.qp
	tail := q.sq.tail.Load()
	for c.compIdx != tail {
		w := q.sqSlot(c.compIdx)
		internal, op := w.flags&sendTMInternal != 0, w.opcode
		wc := q.sendWC(w, ibv.WCWRFlushErr)
		c.retireHead() // the slot is free before its completion shows
		if internal {
			q.tmRetired(op, ibv.WCWRFlushErr)
			continue
		}
		q.complete(q.sendCQ, wc, false)
	}
	q.req.restartAt(c.compIdx)
	q.req.releaseCredit()
}
