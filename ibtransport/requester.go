package ibtransport

// requester is the send side of a QP: it turns send work requests into
// request packets, assigning PSNs, and keeps the state the completer needs
// to retire or retransmit them.
type requester struct {
	reqIdx      uint32 // next WQE to transmit (SQ counter)
	compIdx     uint32 // oldest WQE not retired
	sqPSN       PSN    // PSN of the next new packet
	compPSN     PSN    // oldest unacknowledged PSN
	rdAtomicOut int    // READ/atomic WQEs in [compIdx, reqIdx)
	sinceAckReq int    // packets sent since the last AckReq
	retryLeft   uint8
	rnrLeft     uint8
	retransAt   int64 // retransmit deadline (engine clock), 0 when idle
	rnrAt       int64 // end of an RNR wait, 0 when not waiting
	// A go-back-N restart from retryPSN already happened and no progress
	// came since: duplicated NAKs or gaps must not restart again.
	retried  bool
	retryPSN PSN
	// localErr: the requester met a WQE that failed local checks, which
	// completeLocalErrors retires once it reaches the head. Until then it
	// has nothing to look at (it runs for every active QP on every pass).
	localErr bool
	drained  bool // the SQ drained event for the current SQD state went out
	// sentPSN is one past the highest PSN transmitted (for a READ, its
	// last response's): packets in [compPSN, sentPSN) await their ACK and
	// keep the retransmit timer running.
	sentPSN PSN
	// credit is what the QP counts in the device-wide window
	// (Engine.unacked): its PSNs assigned and not acknowledged, at most
	// maxUnackedPSNs (what its own window lets out at once). None while
	// creditFreed: after a retransmit timeout, until progress, so that a
	// dead peer does not hold the device's window.
	credit      int
	creditFreed bool
}

// recount brings the QP's share of the device-wide window up to date.
func (q *QP) recount() {
	r := &q.req
	c := 0
	if !r.creditFreed {
		c = min(max(int(r.sqPSN.Diff(r.compPSN)), 0), maxUnackedPSNs)
	}
	q.e.unacked += c - r.credit
	r.credit = c
}

// releaseCredit takes the QP's packets out of the device-wide window until
// its next progress.
func (q *QP) releaseCredit() {
	q.req.creditFreed = true
	q.recount()
}

// awaitingAck reports whether packets were sent that are not acknowledged.
func (q *QP) awaitingAck() bool { return q.req.sentPSN.After(q.req.compPSN) }

func (q *QP) sqSlot(i uint32) *sendWQE { return &q.sq.slots[i&q.sq.mask] }

func (q *QP) maxRdAtomic() int { return max(int(q.attr.MaxRdAtomic), 1) }

// sendRequests transmits request packets, new or retransmitted, until the
// window, the packet budget or the link stops it. It reports whether it
// stopped only for the budget.
func (q *QP) sendRequests() bool {
	r := &q.req
	if r.rnrAt != 0 || q.path == nil {
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
		w := q.sqSlot(r.reqIdx)
		switch w.state {
		case wqeError:
			r.localErr = true
			return false
		case wqeNew:
			if q.st == QPSSQD {
				return false
			}
			if w.flags&SendFence != 0 && r.compIdx != r.reqIdx {
				return false
			}
			rdAtomic := w.opcode.isRead() || w.opcode.isAtomic()
			if rdAtomic && r.rdAtomicOut >= q.maxRdAtomic() {
				return false
			}
			if r.compIdx != r.reqIdx && r.sqPSN.Diff(r.compPSN) >= maxUnackedPSNs {
				return false
			}
			if q.e.unacked >= maxDeviceUnacked {
				// New messages wait for ACKs of the device's other QPs, so
				// that the peer's receive ring does not overflow; messages
				// started go on, so their ACKs come.
				q.e.Ctr.TxWindowStalls.Add(1)
				q.e.waitWindow(q)
				return false
			}
			if st := q.prepare(r.reqIdx, w); st != WCSuccess {
				w.state, w.status = wqeError, st
				r.localErr = true
				return false
			}
			w.firstPSN = r.sqPSN
			w.lastPSN = r.sqPSN.Add(q.packets(w) - 1)
			w.nextPSN = w.firstPSN
			w.state = wqeSending
			r.sqPSN = w.lastPSN.Add(1)
			q.recount()
		default:
			if w.nextPSN.Diff(r.compPSN) >= maxUnackedPSNs {
				return false
			}
		}
		buf := q.path.Buffer()
		if buf == nil {
			return false
		}
		n, ok := q.buildRequest(buf, r.reqIdx, w)
		if !ok {
			// The memory behind the SGL was deregistered under the WQE.
			w.state, w.status = wqeError, WCLocProtErr
			r.localErr = true
			return false
		}
		q.path.Send(n)
		q.e.passLeft--
		q.e.Ctr.TxPackets.Add(1)
		if w.nextPSN.After(r.sentPSN) {
			r.sentPSN = w.nextPSN
		}
		if r.retransAt == 0 && q.attr.Timeout != 0 {
			r.retransAt = q.e.now() + q.timeout()
		}
		if w.nextPSN == w.lastPSN.Add(1) {
			r.reqIdx++
			if w.opcode.isRead() || w.opcode.isAtomic() {
				r.rdAtomicOut++
			}
		}
	}
	return true
}

// timeout is the retransmit timeout in nanoseconds: 4.096 µs × 2^Timeout.
func (q *QP) timeout() int64 { return 4096 << q.attr.Timeout }

// packets returns how many PSNs a WQE uses.
func (q *QP) packets(w *sendWQE) uint32 {
	if w.opcode.isAtomic() {
		return 1
	}
	return max((w.length+q.mtu-1)/q.mtu, 1)
}

// prepare checks the local SGL of the WQE in slot i and resolves its keys
// before the WQE's first packet.
func (q *QP) prepare(i uint32, w *sendWQE) WCStatus {
	op := w.opcode
	var need Access // READ and atomic results are written into the SGL
	if op.isRead() || op.isAtomic() {
		need = AccessLocalWrite
	}
	if op.isAtomic() && w.length < 8 {
		return WCLocLenErr
	}
	for j := range int(w.nsge) {
		s, mr := q.sq.sge(i, w, j)
		*mr = nil
		if s.Length == 0 {
			continue
		}
		r := q.mem.LocalRegion(s.LKey, s.Addr, s.Length, need)
		if r == nil {
			return WCLocProtErr
		}
		*mr = r
	}
	return WCSuccess
}

// gather copies the message bytes at offset off of the WQE in slot i into
// dst.
func (q *QP) gather(i uint32, w *sendWQE, off uint32, dst []byte) bool {
	if w.flags&SendInline != 0 {
		copy(dst, q.sq.inlineData(i, w)[off:])
		return true
	}
	for j := range int(w.nsge) {
		if len(dst) == 0 {
			break
		}
		s, mr := q.sq.sge(i, w, j)
		if off >= s.Length {
			off -= s.Length
			continue
		}
		if *mr == nil {
			return false
		}
		src, ok := (*mr).Slice(s.Addr+uint64(off), min(s.Length-off, uint32(len(dst))))
		if !ok {
			return false
		}
		dst = dst[copy(dst, src):]
		off = 0
	}
	return true
}

// scatter copies src into the SGL of the WQE in slot i at offset off (READ
// responses and atomic results).
func (q *QP) scatter(i uint32, w *sendWQE, off uint32, src []byte) bool {
	for j := range int(w.nsge) {
		if len(src) == 0 {
			break
		}
		s, mr := q.sq.sge(i, w, j)
		if off >= s.Length {
			off -= s.Length
			continue
		}
		if *mr == nil {
			return false
		}
		dst, ok := (*mr).Slice(s.Addr+uint64(off), min(s.Length-off, uint32(len(src))))
		if !ok {
			return false
		}
		src = src[copy(dst, src):]
		off = 0
	}
	return len(src) == 0
}

var sendOps = [2][4][3]Opcode{ // [write][position first,middle,last,only][plain,imm,inv]
	{
		{OpRCSendFirst, OpRCSendFirst, OpRCSendFirst},
		{OpRCSendMiddle, OpRCSendMiddle, OpRCSendMiddle},
		{OpRCSendLast, OpRCSendLastImm, OpRCSendLastInv},
		{OpRCSendOnly, OpRCSendOnlyImm, OpRCSendOnlyInv},
	},
	{
		{OpRCWriteFirst, OpRCWriteFirst, OpRCWriteFirst},
		{OpRCWriteMiddle, OpRCWriteMiddle, OpRCWriteMiddle},
		{OpRCWriteLast, OpRCWriteLastImm, OpRCWriteLast},
		{OpRCWriteOnly, OpRCWriteOnlyImm, OpRCWriteOnly},
	},
}

// buildRequest writes the packet of the WQE in slot i at its nextPSN into
// buf and advances the WQE.
func (q *QP) buildRequest(buf []byte, i uint32, w *sendWQE) (int, bool) {
	r := &q.req
	p := &q.e.tx
	psn := w.nextPSN
	op := w.opcode
	var n int
	last := true
	switch {
	case op.isSend() || op.isWrite():
		// Every packet of a message but the last carries a whole MTU.
		offset := uint32(psn.Diff(w.firstPSN)) * q.mtu
		payload := min(w.length-offset, q.mtu)
		first := psn == w.firstPSN
		last = psn == w.lastPSN
		pos := 1
		switch {
		case first && last:
			pos = 3
		case first:
			pos = 0
		case last:
			pos = 2
		}
		variant := 0
		switch op {
		case WRSendWithImm, WRRDMAWriteWithImm:
			variant = 1
		case WRSendWithInv:
			variant = 2
		}
		wi := 0
		if op.isWrite() {
			wi = 1
		}
		opc := sendOps[wi][pos][variant]
		n, _ = LayoutPacket(buf, opc, int(payload), p)
		if p.RETH != nil {
			p.RETH.SetVA(w.remoteAddr)
			p.RETH.SetRKey(w.rkey)
			p.RETH.SetDMALength(w.length)
		}
		if p.ImmDt != nil {
			p.ImmDt.SetImm(w.imm)
		}
		if p.IETH != nil {
			p.IETH.SetRKey(w.imm)
		}
		if !q.gather(i, w, offset, p.Payload) {
			return 0, false
		}
		w.nextPSN = psn.Add(1)
	case op.isRead():
		// A responder streams a READ's whole response at once, and one of
		// megabytes (thousands of packets) overflows this side's receive
		// ring. So a READ of more than readSegmentPSNs response packets
		// goes out as several READ requests, each up to the next multiple
		// of readSegmentPSNs, paced by the window in sendRequests.
		idx := uint32(psn.Diff(w.firstPSN))
		end := min((idx/readSegmentPSNs+1)*readSegmentPSNs, uint32(w.lastPSN.Diff(w.firstPSN))+1)
		off := idx * q.mtu
		n, _ = LayoutPacket(buf, OpRCReadRequest, 0, p)
		p.RETH.SetVA(w.remoteAddr + uint64(off))
		p.RETH.SetRKey(w.rkey)
		p.RETH.SetDMALength(min(w.length-off, (end-idx)*q.mtu))
		w.nextPSN = w.firstPSN.Add(end)
	default: // atomic
		opc := OpRCFetchAdd
		if op == WRAtomicCmpAndSwp {
			opc = OpRCCompareSwap
		}
		a := &q.sq.atomics[i&q.sq.mask]
		n, _ = LayoutPacket(buf, opc, 0, p)
		p.AtomicETH.SetVA(w.remoteAddr)
		p.AtomicETH.SetRKey(w.rkey)
		if op == WRAtomicCmpAndSwp {
			p.AtomicETH.SetSwapAdd(a.swap)
			p.AtomicETH.SetCompare(a.compareAdd)
		} else {
			p.AtomicETH.SetSwapAdd(a.compareAdd)
		}
		w.nextPSN = psn.Add(1)
	}
	ackReq := last || r.sinceAckReq+1 >= ackReqInterval
	if ackReq {
		r.sinceAckReq = 0
	} else {
		r.sinceAckReq++
	}
	p.BTH.SetDestQPN(q.destQPN)
	p.BTH.SetPSN(psn)
	p.BTH.SetAckReq(ackReq)
	p.BTH.SetMigReq(true)
	p.BTH.SetSolicitedEvent(last && w.flags&SendSolicited != 0 && (op.isSend() || op == WRRDMAWriteWithImm))
	return n, true
}

// goBack rewinds the requester to the oldest unacknowledged PSN, so that
// everything from there is sent again (go-back-N).
func (q *QP) goBack() {
	r := &q.req
	q.e.Ctr.Retransmits.Add(1)
	// Only WQEs up to reqIdx (which may be half sent) have been transmitted.
	end := r.reqIdx
	if end != q.sq.tail.Load() {
		end++
	}
	for i := r.compIdx; i != end; i++ {
		w := q.sqSlot(i)
		if w.state != wqeSending {
			continue
		}
		w.nextPSN = w.firstPSN
		if i == r.compIdx && r.compPSN.After(w.firstPSN) && !r.compPSN.After(w.lastPSN) {
			w.nextPSN = r.compPSN
		}
	}
	r.reqIdx = r.compIdx
	r.rdAtomicOut = 0
	r.retransAt = 0
	r.retried = true
	r.retryPSN = r.compPSN
}

// retry restarts transmission after a NAK, a gap in responses or a timeout,
// counting against retry_cnt (7 means forever). It reports false, having
// failed the QP, when the retries are exhausted.
func (q *QP) retry() bool {
	r := &q.req
	if q.attr.RetryCnt != infiniteRetries {
		if r.retryLeft == 0 {
			q.completeHead(WCRetryExcErr)
			q.fail()
			return false
		}
		r.retryLeft--
	}
	q.goBack()
	return true
}

// checkTimers handles an expired retransmit or RNR timer.
func (q *QP) checkTimers(now int64) {
	r := &q.req
	if r.rnrAt != 0 && now >= r.rnrAt {
		r.rnrAt = 0
	}
	if r.retransAt != 0 && now >= r.retransAt {
		r.retransAt = 0
		if q.awaitingAck() {
			q.e.Ctr.Timeouts.Add(1)
			q.releaseCredit()
			q.retry()
		}
	}
}

// outstanding reports whether some sent packet awaits its response.
func (q *QP) outstanding() bool {
	r := &q.req
	if r.compIdx == q.sq.tail.Load() {
		return false
	}
	return q.sqSlot(r.compIdx).state == wqeSending
}

// completeLocalErrors completes a WQE that failed local checks once every
// earlier WQE is retired, and fails the QP.
func (q *QP) completeLocalErrors() {
	r := &q.req
	if !r.localErr || r.compIdx == q.sq.tail.Load() {
		return
	}
	if w := q.sqSlot(r.compIdx); w.state == wqeError {
		q.completeHead(w.status)
		q.fail()
	}
}
