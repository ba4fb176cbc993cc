package ibtransport

import (
	"sync/atomic"
	"unsafe"
)

type jobKind uint8

const (
	jobAck jobKind = iota
	jobRead
	jobAtomic
)

// respJob is a response waiting to be sent. Responses go out in PSN order,
// so an ACK never overtakes the READ responses before it.
type respJob struct {
	mr        Region // read: the source
	va        uint64 // read: the next source address; atomic: the original value
	psn       PSN    // (next) PSN to send
	msn       uint32
	remaining uint32
	kind      jobKind
	syn       Syndrome
	first     bool
}

// resource remembers an executed READ or atomic so that a duplicate request
// can be answered again (responder resources, IBA 9.7.5.1.2).
type resource struct {
	used     bool
	atomic   bool
	firstPSN PSN
	lastPSN  PSN
	rkey     uint32
	va       uint64
	length   uint32
	orig     uint64
}

type respMode uint8

const (
	modeIdle respMode = iota
	modeSend
	modeWrite
)

// responder is the receive side of a QP.
type responder struct {
	ePSN    PSN // expected PSN
	msn     uint32
	nakSent bool // a PSN sequence NAK for the current gap went out
	mode    respMode

	// The receive WQE a SEND (or WRITE with immediate) is filling.
	recvActive bool
	recv       recvWQE
	recvMRs    []Region
	recvOff    uint32
	recvBad    WCStatus // a problem found with the WQE's SGL
	recvCap    uint64   // total length of the WQE's SGL

	// The WRITE in progress.
	wMR        Region
	wVA        uint64
	wRemaining uint32
	wTotal     uint32

	res     []resource
	resNext int

	jobs             [64]respJob
	jobHead, jobTail uint32
	errPending       bool // go to ERR once the queued responses (ending in a NAK) are out
}

func (r *responder) initResources(n int) {
	r.res = make([]resource, max(n, 1))
	r.resNext = 0
}

func (r *responder) jobsFull() bool { return r.jobTail-r.jobHead >= uint32(len(r.jobs)) }

// queueAck queues an ACK or NAK; a plain ACK merges into an ACK already
// waiting at the tail, ACKs being cumulative.
func (q *QP) queueAck(syn Syndrome, psn PSN) {
	r := &q.resp
	if syn.Kind() == SyndromeACK && r.jobTail != r.jobHead {
		j := &r.jobs[(r.jobTail-1)%uint32(len(r.jobs))]
		if j.kind == jobAck && j.syn.Kind() == SyndromeACK {
			j.psn, j.msn = psn, r.msn
			return
		}
	}
	if r.jobsFull() {
		return // the requester will time out and ask again
	}
	r.jobs[r.jobTail%uint32(len(r.jobs))] = respJob{kind: jobAck, syn: syn, psn: psn, msn: r.msn}
	r.jobTail++
}

// nakError answers a request that cannot be executed with a NAK and moves
// the QP to ERR after it (IBA class B/C errors).
func (q *QP) nakError(psn PSN, code NAKCode, recvStatus WCStatus) {
	q.e.Ctr.TxNAKError.Add(1)
	if q.resp.recvActive {
		q.completeRecv(recvStatus, 0)
	}
	q.resp.jobTail = q.resp.jobHead + min(q.resp.jobTail-q.resp.jobHead, uint32(len(q.resp.jobs)-1))
	q.queueAck(NAKSyndrome(code), psn)
	q.resp.errPending = true
}

func (q *QP) qpAllows(a Access) bool { return q.attr.AccessFlags&a != 0 }

// lookupRKey finds the region behind rkey for n bytes at va with access a,
// applying every check a remote access must pass: the QP's own access
// flags here, the region's protection domain, rights and bounds in the
// Memory of the QP's PD.
func (q *QP) lookupRKey(rkey uint32, va uint64, n uint32, a Access) (Region, bool) {
	if !q.qpAllows(a) {
		return nil, false
	}
	mr := q.mem.RemoteRegion(rkey, va, n, a)
	return mr, mr != nil
}

// onRequest is the responder: it checks a request packet's PSN, opcode
// sequence, length and keys, executes it and queues the response.
func (q *QP) onRequest(p *Packet, oi *OpcodeInfo) {
	r := &q.resp
	if r.errPending {
		return
	}
	psn := p.BTH.PSN()
	if d := psn.Diff(r.ePSN); d > 0 {
		q.e.Ctr.RxOutOfSeq.Add(1)
		if !r.nakSent {
			r.nakSent = true
			q.e.Ctr.TxNAKSeq.Add(1)
			q.queueAck(NAKSyndrome(NAKPSNSequenceError), r.ePSN)
		}
		return
	} else if d < 0 {
		q.e.Ctr.RxDuplicate.Add(1)
		q.duplicate(p, oi, psn)
		return
	}
	// Opcode sequence: a message in progress must go on; none may start
	// in the middle.
	mid := oi.Position == PositionMiddle || oi.Position == PositionLast
	var ok bool
	switch {
	case oi.Kind == KindSend && mid:
		ok = r.mode == modeSend
	case oi.Kind == KindWrite && mid:
		ok = r.mode == modeWrite
	default:
		ok = r.mode == modeIdle
	}
	plen := uint32(len(p.Payload))
	switch oi.Position {
	case PositionFirst, PositionMiddle:
		ok = ok && plen == q.mtu
	case PositionLast:
		ok = ok && plen >= 1 && plen <= q.mtu
	case PositionOnly:
		ok = ok && plen <= q.mtu
	}
	if !ok {
		q.nakError(psn, NAKInvalidRequest, WCRemInvReqErr)
		return
	}
	switch oi.Kind {
	case KindSend:
		q.executeSend(p, oi, psn)
	case KindWrite:
		q.executeWrite(p, oi, psn)
	case KindReadRequest:
		q.executeRead(p, psn)
	case KindAtomicRequest:
		q.executeAtomic(p, psn)
	}
}

// advance accepts the in-order packet psn.
func (q *QP) advance(psn PSN, n uint32) {
	q.resp.ePSN = psn.Add(n)
	q.resp.nakSent = false
}

func (q *QP) executeSend(p *Packet, oi *OpcodeInfo, psn PSN) {
	r := &q.resp
	if oi.Position == PositionFirst || oi.Position == PositionOnly {
		if !q.takeRecv() {
			q.rnrNAK(psn)
			return
		}
	}
	if r.recvBad != WCSuccess {
		q.nakError(psn, NAKRemoteOperationalError, r.recvBad)
		return
	}
	if st := q.scatterRecv(p.Payload); st != WCSuccess {
		if st == WCLocLenErr {
			q.nakError(psn, NAKInvalidRequest, st)
		} else {
			q.nakError(psn, NAKRemoteOperationalError, st)
		}
		return
	}
	q.advance(psn, 1)
	if oi.Position == PositionFirst || oi.Position == PositionMiddle {
		r.mode = modeSend
	} else {
		r.mode = modeIdle
		var flags WCFlags
		var imm, inv uint32
		if p.ImmDt != nil {
			flags, imm = WCWithImm, p.ImmDt.Imm()
		}
		if p.IETH != nil {
			inv = p.IETH.RKey()
			if !q.mem.InvalidateRKey(inv) {
				q.nakError(psn, NAKInvalidRequest, WCRemInvReqErr)
				return
			}
			flags = WCWithInv
		}
		r.msn++
		q.finishRecv(WCRecv, r.recvOff, flags, imm, inv, p.BTH.SolicitedEvent())
	}
	if p.BTH.AckReq() {
		q.queueAck(ACKSyndrome(UnlimitedCredits), psn)
	}
}

func (q *QP) executeWrite(p *Packet, oi *OpcodeInfo, psn PSN) {
	r := &q.resp
	plen := uint32(len(p.Payload))
	if p.RETH != nil {
		n := p.RETH.DMALength()
		r.wMR, r.wVA, r.wRemaining, r.wTotal = nil, p.RETH.VA(), n, n
		if n > 0 {
			mr, ok := q.lookupRKey(p.RETH.RKey(), r.wVA, n, AccessRemoteWrite)
			if !ok {
				q.nakError(psn, NAKRemoteAccessError, WCRemAccessErr)
				return
			}
			r.wMR = mr
		}
		if (oi.Position == PositionOnly && plen != n) || (oi.Position == PositionFirst && n <= q.mtu) {
			q.nakError(psn, NAKInvalidRequest, WCRemInvReqErr)
			return
		}
	}
	if plen > r.wRemaining || (oi.Position == PositionLast && plen != r.wRemaining) {
		q.nakError(psn, NAKInvalidRequest, WCRemInvReqErr)
		return
	}
	if p.ImmDt != nil {
		if !q.takeRecv() {
			q.rnrNAK(psn)
			return
		}
	}
	if plen > 0 {
		if r.wMR == nil {
			q.nakError(psn, NAKRemoteAccessError, WCRemAccessErr)
			return
		}
		dst, ok := r.wMR.Slice(r.wVA, plen)
		if !ok {
			q.nakError(psn, NAKRemoteAccessError, WCRemAccessErr)
			return
		}
		copy(dst, p.Payload)
		r.wVA += uint64(plen)
		r.wRemaining -= plen
	}
	q.advance(psn, 1)
	if oi.Position == PositionFirst || oi.Position == PositionMiddle {
		r.mode = modeWrite
	} else {
		r.mode = modeIdle
		if r.wMR != nil {
			r.wMR.RemoteWritten()
		}
		r.wMR = nil
		r.msn++
		if p.ImmDt != nil {
			q.finishRecv(WCRecvRDMAWithImm, r.wTotal, WCWithImm, p.ImmDt.Imm(), 0, p.BTH.SolicitedEvent())
		}
	}
	if p.BTH.AckReq() {
		q.queueAck(ACKSyndrome(UnlimitedCredits), psn)
	}
}

func (q *QP) executeRead(p *Packet, psn PSN) {
	r := &q.resp
	if q.attr.MaxDestRdAtomic == 0 {
		q.nakError(psn, NAKInvalidRequest, WCRemInvReqErr)
		return
	}
	if r.jobsFull() {
		return // no room to answer; the requester will retry
	}
	n, va, rkey := p.RETH.DMALength(), p.RETH.VA(), p.RETH.RKey()
	var mr Region
	if n > 0 {
		var ok bool
		if mr, ok = q.lookupRKey(rkey, va, n, AccessRemoteRead); !ok {
			q.nakError(psn, NAKRemoteAccessError, WCRemAccessErr)
			return
		}
	}
	pkts := max((n+q.mtu-1)/q.mtu, 1)
	res := q.allocResource()
	*res = resource{used: true, firstPSN: psn, lastPSN: psn.Add(pkts - 1), rkey: rkey, va: va, length: n}
	r.msn++
	q.advance(psn, pkts)
	r.jobs[r.jobTail%uint32(len(r.jobs))] = respJob{kind: jobRead, psn: psn, msn: r.msn, mr: mr, va: va, remaining: n, first: true}
	r.jobTail++
}

func (q *QP) executeAtomic(p *Packet, psn PSN) {
	r := &q.resp
	if q.attr.MaxDestRdAtomic == 0 {
		q.nakError(psn, NAKInvalidRequest, WCRemInvReqErr)
		return
	}
	if r.jobsFull() {
		return
	}
	a := p.AtomicETH
	va := a.VA()
	if va&7 != 0 {
		q.nakError(psn, NAKInvalidRequest, WCRemInvReqErr)
		return
	}
	mr, ok := q.lookupRKey(a.RKey(), va, 8, AccessRemoteAtomic)
	if !ok {
		q.nakError(psn, NAKRemoteAccessError, WCRemAccessErr)
		return
	}
	b, _ := mr.Slice(va, 8)
	var orig uint64
	if len(b) == 8 && uintptr(unsafe.Pointer(&b[0]))&7 == 0 {
		ptr := (*uint64)(unsafe.Pointer(&b[0]))
		if p.BTH.Opcode() == OpRCCompareSwap {
			for {
				orig = atomic.LoadUint64(ptr)
				if orig != a.Compare() || atomic.CompareAndSwapUint64(ptr, orig, a.SwapAdd()) {
					break
				}
			}
		} else {
			orig = atomic.AddUint64(ptr, a.SwapAdd()) - a.SwapAdd()
		}
		mr.RemoteWritten()
	}
	res := q.allocResource()
	*res = resource{used: true, atomic: true, firstPSN: psn, lastPSN: psn, rkey: a.RKey(), va: va, length: 8, orig: orig}
	r.msn++
	q.advance(psn, 1)
	r.jobs[r.jobTail%uint32(len(r.jobs))] = respJob{kind: jobAtomic, psn: psn, msn: r.msn, va: orig}
	r.jobTail++
}

func (q *QP) allocResource() *resource {
	r := &q.resp
	if len(r.res) == 0 {
		r.initResources(1)
	}
	res := &r.res[r.resNext]
	r.resNext = (r.resNext + 1) % len(r.res)
	return res
}

// duplicate answers a request whose PSN was already accepted: SEND and WRITE
// are acknowledged again, READ and atomic answered again from the responder
// resources without executing them twice.
func (q *QP) duplicate(p *Packet, oi *OpcodeInfo, psn PSN) {
	r := &q.resp
	switch oi.Kind {
	case KindSend, KindWrite:
		q.queueAck(ACKSyndrome(UnlimitedCredits), r.ePSN.Add(PSNMask))
	case KindReadRequest:
		if r.jobsFull() {
			return
		}
		for i := range r.res {
			res := &r.res[i]
			if !res.used || res.atomic || !psn.InWindow(res.firstPSN, uint32(res.lastPSN.Diff(res.firstPSN))+1) {
				continue
			}
			va, n := p.RETH.VA(), p.RETH.DMALength()
			if p.RETH.RKey() != res.rkey || va < res.va || uint64(n) > uint64(res.length) ||
				va-res.va > uint64(res.length-n) {
				return
			}
			if max((n+q.mtu-1)/q.mtu, 1) != uint32(res.lastPSN.Diff(psn))+1 {
				return
			}
			var mr Region
			if n > 0 {
				var ok bool
				if mr, ok = q.lookupRKey(res.rkey, va, n, AccessRemoteRead); !ok {
					return
				}
			}
			// Like rxe, a replay from inside the original READ continues
			// with MIDDLE and LAST responses, which is what a requester that
			// kept the first part expects.
			r.jobs[r.jobTail%uint32(len(r.jobs))] = respJob{kind: jobRead, psn: psn, msn: r.msn, mr: mr, va: va, remaining: n,
				first: psn == res.firstPSN}
			r.jobTail++
			return
		}
	case KindAtomicRequest:
		if r.jobsFull() {
			return
		}
		for i := range r.res {
			res := &r.res[i]
			if res.used && res.atomic && res.firstPSN == psn {
				r.jobs[r.jobTail%uint32(len(r.jobs))] = respJob{kind: jobAtomic, psn: psn, msn: r.msn, va: res.orig}
				r.jobTail++
				return
			}
		}
	}
}

func (q *QP) rnrNAK(psn PSN) {
	q.e.Ctr.TxRNRNAK.Add(1)
	q.resp.nakSent = true // the retry after the RNR wait fills the gap
	q.queueAck(RNRNAKSyndrome(RNRTimer(q.attr.MinRNRTimer)), psn)
}

// takeRecv starts filling the next posted receive, from the SRQ or the
// QP's own receive queue.
func (q *QP) takeRecv() bool {
	rq := &q.rq
	if q.srq != nil {
		rq = q.srqRQ
	}
	w := rq.peek()
	if w == nil {
		return false
	}
	r := &q.resp
	r.recv.id = w.id
	r.recv.sge = append(r.recv.sge[:0], w.sge...)
	rq.pop()
	if q.srq != nil {
		q.srq.Consumed()
	}
	r.recvActive = true
	r.recvOff = 0
	r.recvBad = WCSuccess
	r.recvCap = 0
	for i, s := range r.recv.sge {
		r.recvCap += uint64(s.Length)
		r.recvMRs[i] = nil
		if s.Length == 0 {
			continue
		}
		mr := q.mem.LocalRegion(s.LKey, s.Addr, s.Length, AccessLocalWrite)
		if mr == nil {
			r.recvBad = WCLocProtErr
			continue
		}
		r.recvMRs[i] = mr
	}
	return true
}

// scatterRecv copies a SEND payload into the active receive.
func (q *QP) scatterRecv(src []byte) WCStatus {
	r := &q.resp
	off := r.recvOff
	if uint64(off)+uint64(len(src)) > r.recvCap {
		return WCLocLenErr // checked first: nothing is written
	}
	r.recvOff += uint32(len(src))
	for i, s := range r.recv.sge {
		if len(src) == 0 {
			break
		}
		if off >= s.Length {
			off -= s.Length
			continue
		}
		mr := r.recvMRs[i]
		if mr == nil {
			return WCLocProtErr
		}
		dst, ok := mr.Slice(s.Addr+uint64(off), min(s.Length-off, uint32(len(src))))
		if !ok {
			return WCLocProtErr
		}
		src = src[copy(dst, src):]
		off = 0
	}
	if len(src) != 0 {
		return WCLocLenErr
	}
	return WCSuccess
}

func (q *QP) finishRecv(op WCOpcode, n uint32, flags WCFlags, imm, inv uint32, solicited bool) {
	r := &q.resp
	wc := WC{WRID: r.recv.id, Status: WCSuccess, Opcode: op, Flags: flags, ByteLen: n, Imm: imm,
		InvalidatedRKey: inv, QPN: q.qpn, SrcQP: q.destQPN}
	r.recvActive = false
	q.complete(q.recvCQ, wc, solicited)
}

func (q *QP) completeRecv(st WCStatus, n uint32) {
	r := &q.resp
	wc := WC{WRID: r.recv.id, Status: st, Opcode: WCRecv, ByteLen: n, QPN: q.qpn, SrcQP: q.destQPN}
	r.recvActive = false
	q.complete(q.recvCQ, wc, false)
}

// sendResponses sends queued responses in order. It reports whether it
// stopped for the packet budget with responses left.
func (q *QP) sendResponses() bool {
	r := &q.resp
	if q.path == nil {
		r.jobHead = r.jobTail
		return false
	}
	for budget := packetBudget; r.jobHead != r.jobTail; budget-- {
		if budget == 0 {
			return true
		}
		buf := q.path.Buffer()
		if buf == nil {
			return false
		}
		j := &r.jobs[r.jobHead%uint32(len(r.jobs))]
		p := &q.e.tx
		var n int
		done := true
		switch j.kind {
		case jobAck:
			n, _ = LayoutPacket(buf, OpRCAcknowledge, 0, p)
			p.AETH.SetSyndrome(j.syn)
			p.AETH.SetMSN(j.msn)
		case jobAtomic:
			n, _ = LayoutPacket(buf, OpRCAtomicAcknowledge, 0, p)
			p.AETH.SetSyndrome(ACKSyndrome(UnlimitedCredits))
			p.AETH.SetMSN(j.msn)
			p.AtomicAckETH.SetOrigData(j.va) // the original value
		case jobRead:
			payload := min(j.remaining, q.mtu)
			last := j.remaining <= q.mtu
			op := OpRCReadResponseMiddle
			switch {
			case j.first && last:
				op = OpRCReadResponseOnly
			case j.first:
				op = OpRCReadResponseFirst
			case last:
				op = OpRCReadResponseLast
			}
			n, _ = LayoutPacket(buf, op, int(payload), p)
			if p.AETH != nil {
				p.AETH.SetSyndrome(ACKSyndrome(UnlimitedCredits))
				p.AETH.SetMSN(j.msn)
			}
			if payload > 0 {
				src, ok := j.mr.Slice(j.va, payload)
				if !ok {
					// Deregistered while answering: stop; a retried READ
					// will be NAKed.
					r.jobHead++
					continue
				}
				copy(p.Payload, src)
			}
			p.BTH.SetDestQPN(q.destQPN)
			p.BTH.SetPSN(j.psn)
			j.va += uint64(payload)
			j.remaining -= payload
			j.psn = j.psn.Add(1)
			j.first = false
			done = last
		}
		if j.kind != jobRead {
			p.BTH.SetDestQPN(q.destQPN)
			p.BTH.SetPSN(j.psn)
		}
		q.path.Send(n)
		q.e.Ctr.TxPackets.Add(1)
		if done {
			r.jobHead++
		}
	}
	if r.errPending {
		q.fail()
	}
	return false
}
