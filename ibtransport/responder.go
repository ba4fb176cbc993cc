package ibtransport

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// resource remembers an executed READ or atomic so that a duplicate request
// can be answered again (responder resources, IBA 9.7.5.1.2).
type resource struct {
	used   bool
	atomic bool
	// zeroRead: an ATOMIC_WRITE or FLUSH, answered (again) by an RDMA
	// READ RESPONSE ONLY without payload, never executed twice.
	zeroRead bool
	firstPSN header.PSN
	lastPSN  header.PSN
	rkey     uint32
	va       uint64
	length   uint32
	orig     uint64
}

// holds reports whether psn is one of the PSNs the request took.
func (res *resource) holds(psn header.PSN) bool {
	return psn.InWindow(res.firstPSN, uint32(res.lastPSN.Diff(res.firstPSN))+1)
}

type respMode uint8

const (
	modeIdle respMode = iota
	modeSend
	modeWrite
)

// responder is the receive side of a QP (rxe_resp.c): it checks request
// packets (PSN, opcode sequence, length, resources, keys), executes them
// against registered memory and receives, and queues its responses, which
// leave in PSN order (responses.go).
type responder struct {
	qp      *QP
	ePSN    header.PSN // expected PSN
	msn     uint32
	nakSent bool // a PSN sequence NAK for the current gap went out
	mode    respMode
	// UC: a message was dropped; packets are dropped until a FIRST or
	// ONLY starts the next one.
	ucDropping bool

	// The receive WQE a SEND (or WRITE with immediate) is filling.
	recvActive bool
	// errPending: go to ERR once the queued responses (ending in a NAK)
	// are out. (Here, in the bools' padding: the QP keeps its size class.)
	errPending bool
	recv       recvWQE
	recvMRs    []Region
	recvOff    uint32
	recvBad    ibv.WCStatus // a problem found with the WQE's SGL
	recvCap    uint64       // total length of the WQE's SGL
	// tm is the tag matching state of a QP on a TM SRQ, nil otherwise.
	tm *tmState

	// The WRITE in progress.
	wMR        Region
	wVA        uint64
	wRemaining uint32
	wTotal     uint32

	res     []resource
	resNext int

	jobs             [64]respJob
	jobHead, jobTail uint32
}

func (r *responder) initResources(n int) {
	r.res = make([]resource, max(n, 1))
	r.resNext = 0
}

// lookupRKey finds the region behind rkey for n bytes at va with access a,
// applying every check a remote access must pass: the QP's own access
// flags here, the region's protection domain, rights and bounds in the
// Memory of the QP's PD.
func (r *responder) lookupRKey(rkey uint32, va uint64, n uint32, a ibv.Access) (Region, bool) {
	q := r.qp
	if q.attr.AccessFlags&a == 0 {
		return nil, false
	}
	mr := q.mem.RemoteRegion(q, rkey, va, n, a)
	return mr, mr != nil
}

// onRequest handles a request packet for the QP: named checks, then the
// execution of the request, each answering with a NAK where it fails.
func (r *responder) onRequest(p *header.Packet, oi *header.OpcodeInfo) {
	if r.errPending {
		return
	}
	psn := p.BTH.PSN()
	// An SRQ that is not the target's domain's is an invalid request
	// (the XRC annex's XRC domain check): the initiator's WR completes
	// with REM_INV_REQ_ERR and both QPs go to ERR, as for any NAK of the
	// class. Checked first: a duplicate READ or atomic is answered from
	// the memory of the SRQ it names.
	if r.qp.typ == ibv.QPTypeXRCRecv && !r.bindXRCTarget(p) {
		r.nakError(psn, header.NAKInvalidRequest, ibv.WCRemInvReqErr)
		return
	}
	if !r.checkPSN(p, oi, psn) {
		return
	}
	if !r.checkOpSeq(oi) || !r.checkLength(oi, uint32(len(p.Payload))) {
		r.nakError(psn, header.NAKInvalidRequest, ibv.WCRemInvReqErr)
		return
	}

	switch oi.Kind {
	case header.KindSend:
		r.executeSend(p, oi, psn)
	case header.KindWrite:
		r.executeWrite(p, oi, psn)
	case header.KindReadRequest:
		r.executeRead(p, psn)
	case header.KindAtomicRequest:
		r.executeAtomic(p, psn)
	case header.KindAtomicWrite:
		r.executeAtomicWrite(p, psn)
	case header.KindFlush:
		r.executeFlush(p, psn)
	}
}

// checkPSN accepts the expected PSN. Ahead of it, the first packet of a
// gap gets a sequence NAK; behind it, a duplicate is answered again.
func (r *responder) checkPSN(p *header.Packet, oi *header.OpcodeInfo, psn header.PSN) bool {
	ctr := &r.qp.e.Ctr
	if d := psn.Diff(r.ePSN); d > 0 {
		inc(&ctr.RxOutOfSeq)
		inc(&r.qp.ctr.RxOutOfSeq)
		if !r.nakSent {
			r.nakSent = true
			inc(&ctr.TxNAKSeq)
			inc(&r.qp.ctr.TxNAKSeq)
			r.queueAck(header.NAKSyndrome(header.NAKPSNSequenceError), r.ePSN)
		}
		return false
	} else if d < 0 {
		inc(&ctr.RxDuplicate)
		inc(&r.qp.ctr.RxDuplicate)
		r.duplicate(p, oi, psn)
		return false
	}
	return true
}

// checkOpSeq: a message in progress must go on; none may start in the
// middle.
func (r *responder) checkOpSeq(oi *header.OpcodeInfo) bool {
	mid := oi.Position == header.PositionMiddle || oi.Position == header.PositionLast
	switch {
	case oi.Kind == header.KindSend && mid:
		return r.mode == modeSend
	case oi.Kind == header.KindWrite && mid:
		return r.mode == modeWrite
	default:
		return r.mode == modeIdle
	}
}

// checkLength: FIRST and MIDDLE packets carry a whole MTU, LAST at least
// a byte, none more than an MTU.
func (r *responder) checkLength(oi *header.OpcodeInfo, plen uint32) bool {
	mtu := r.qp.mtu
	switch oi.Position {
	case header.PositionFirst, header.PositionMiddle:
		return plen == mtu
	case header.PositionLast:
		return plen >= 1 && plen <= mtu
	case header.PositionOnly:
		return plen <= mtu
	}
	return true
}

// advance accepts the in-order packet psn, which uses n PSNs.
func (r *responder) advance(psn header.PSN, n uint32) {
	r.ePSN = psn.Add(n)
	r.nakSent = false
}

// ackIfRequested queues an ACK of psn if the requester asked for one.
func (r *responder) ackIfRequested(p *header.Packet, psn header.PSN) {
	if p.BTH.AckReq() {
		r.queueAck(header.ACKSyndrome(header.UnlimitedCredits), psn)
	}
}

func (r *responder) executeSend(p *header.Packet, oi *header.OpcodeInfo, psn header.PSN) {
	if oi.Position == header.PositionFirst || oi.Position == header.PositionOnly {
		if r.tm != nil && r.qp.typ == ibv.QPTypeRC {
			if !r.startTM(p, psn) {
				return
			}
		} else if !r.checkResource(psn) {
			return
		}
	}
	if r.recvBad != ibv.WCSuccess {
		r.nakError(psn, header.NAKRemoteOperationalError, r.recvBad)
		return
	}
	if st := r.scatterRecv(r.tmPayload(p)); st != ibv.WCSuccess {
		if st == ibv.WCLocLenErr {
			r.nakError(psn, header.NAKInvalidRequest, st)
		} else {
			r.nakError(psn, header.NAKRemoteOperationalError, st)
		}
		return
	}
	r.advance(psn, 1)
	if oi.Position == header.PositionFirst || oi.Position == header.PositionMiddle {
		r.mode = modeSend
	} else if !r.finishSend(p, psn) {
		return
	}
	r.ackIfRequested(p, psn)
}

// finishSend completes the receive a SEND's last packet filled,
// invalidating the rkey a SEND_WITH_INV names.
func (r *responder) finishSend(p *header.Packet, psn header.PSN) bool {
	r.mode = modeIdle
	var flags ibv.WCFlags
	var imm, inv uint32
	if p.ImmDt != nil {
		flags, imm = ibv.WCWithImm, p.ImmDt.Imm()
	}
	if p.IETH != nil {
		inv = p.IETH.RKey()
		if !r.qp.mem.InvalidateRKey(r.qp, inv, true) {
			r.nakError(psn, header.NAKInvalidRequest, ibv.WCRemInvReqErr)
			return false
		}
		flags = ibv.WCWithInv
	}
	r.msn++
	if r.tm != nil && r.tm.op != ibv.WCRecv {
		r.finishTM(p, flags, imm, inv)
		return true
	}
	r.finishRecv(ibv.WCRecv, r.recvOff, flags, imm, inv, p.BTH.SolicitedEvent())
	return true
}

// checkResource takes the receive a SEND or WRITE with immediate
// consumes, or answers with an RNR NAK when none is posted.
func (r *responder) checkResource(psn header.PSN) bool {
	if !r.takeRecv() {
		r.rnrNAK(psn)
		return false
	}
	return true
}

func (r *responder) executeWrite(p *header.Packet, oi *header.OpcodeInfo, psn header.PSN) {
	plen := uint32(len(p.Payload))
	if p.RETH != nil && !r.startWrite(p, oi, psn) {
		return
	}
	if plen > r.wRemaining || (oi.Position == header.PositionLast && plen != r.wRemaining) {
		r.nakError(psn, header.NAKInvalidRequest, ibv.WCRemInvReqErr)
		return
	}
	if p.ImmDt != nil && !r.checkResource(psn) {
		return
	}
	if plen > 0 && !r.writeData(p.Payload, psn) {
		return
	}
	r.advance(psn, 1)
	if oi.Position == header.PositionFirst || oi.Position == header.PositionMiddle {
		r.mode = modeWrite
	} else {
		r.finishWrite(p)
	}
	r.ackIfRequested(p, psn)
}

// finishWrite ends the WRITE whose last packet p was placed, completing
// the receive a WRITE with immediate consumed.
func (r *responder) finishWrite(p *header.Packet) {
	r.mode = modeIdle
	if r.wMR != nil {
		r.wMR.RemoteWritten()
	}
	r.wMR = nil
	r.msn++
	if p.ImmDt != nil {
		r.finishRecv(ibv.WCRecvRDMAWithImm, r.wTotal, ibv.WCWithImm, p.ImmDt.Imm(), 0, p.BTH.SolicitedEvent())
	}
}

// startWrite checks the rkey and length of a WRITE's RETH and makes it the
// WRITE in progress.
func (r *responder) startWrite(p *header.Packet, oi *header.OpcodeInfo, psn header.PSN) bool {
	n := p.RETH.DMALength()
	r.wMR, r.wVA, r.wRemaining, r.wTotal = nil, p.RETH.VA(), n, n
	if n > 0 {
		mr, ok := r.lookupRKey(p.RETH.RKey(), r.wVA, n, ibv.AccessRemoteWrite)
		if !ok {
			r.nakError(psn, header.NAKRemoteAccessError, ibv.WCRemAccessErr)
			return false
		}
		r.wMR = mr
	}
	plen := uint32(len(p.Payload))
	if (oi.Position == header.PositionOnly && plen != n) || (oi.Position == header.PositionFirst && n <= r.qp.mtu) {
		r.nakError(psn, header.NAKInvalidRequest, ibv.WCRemInvReqErr)
		return false
	}
	return true
}

// writeData copies a WRITE packet's payload into the target region.
func (r *responder) writeData(payload []byte, psn header.PSN) bool {
	plen := uint32(len(payload))
	if r.wMR == nil {
		r.nakError(psn, header.NAKRemoteAccessError, ibv.WCRemAccessErr)
		return false
	}
	if !r.qp.writePayload(r.wMR, payload, r.wVA) {
		r.nakError(psn, header.NAKRemoteAccessError, ibv.WCRemAccessErr)
		return false
	}
	r.wVA += uint64(plen)
	r.wRemaining -= plen
	return true
}

// checkRdAtomic: a READ or atomic needs responder resources, and room in
// the job ring to answer (without it the requester retries).
func (r *responder) checkRdAtomic(psn header.PSN) bool {
	if r.qp.attr.MaxDestRdAtomic == 0 {
		r.nakError(psn, header.NAKInvalidRequest, ibv.WCRemInvReqErr)
		return false
	}
	return !r.jobsFull()
}

func (r *responder) executeRead(p *header.Packet, psn header.PSN) {
	if !r.checkRdAtomic(psn) {
		return
	}
	n, va, rkey := p.RETH.DMALength(), p.RETH.VA(), p.RETH.RKey()
	var mr Region
	if n > 0 {
		var ok bool
		if mr, ok = r.lookupRKey(rkey, va, n, ibv.AccessRemoteRead); !ok {
			r.nakError(psn, header.NAKRemoteAccessError, ibv.WCRemAccessErr)
			return
		}
	}
	pkts := packetCount(n, r.qp.mtu)
	*r.allocResource() = resource{used: true, firstPSN: psn, lastPSN: psn.Add(pkts - 1), rkey: rkey, va: va, length: n}
	r.msn++
	r.advance(psn, pkts)
	r.pushJob(respJob{kind: jobRead, psn: psn, msn: r.msn, mr: mr, va: va, remaining: n, first: true})
}

func (r *responder) executeAtomic(p *header.Packet, psn header.PSN) {
	if !r.checkRdAtomic(psn) {
		return
	}
	a := p.AtomicETH
	va := a.VA()
	if va&7 != 0 {
		r.nakError(psn, header.NAKInvalidRequest, ibv.WCRemInvReqErr)
		return
	}
	mr, ok := r.lookupRKey(a.RKey(), va, 8, ibv.AccessRemoteAtomic)
	if !ok {
		r.nakError(psn, header.NAKRemoteAccessError, ibv.WCRemAccessErr)
		return
	}
	r.qp.e.SettleWrites() // the atomic reads what earlier WRITEs wrote
	orig := doAtomic(mr, va, p.BTH.Opcode()-r.qp.opBase() == header.OpRCCompareSwap, a.Compare(), a.SwapAdd())
	*r.allocResource() = resource{used: true, atomic: true, firstPSN: psn, lastPSN: psn, rkey: a.RKey(), va: va, length: 8, orig: orig}
	r.msn++
	r.advance(psn, 1)
	r.pushJob(atomicJob(psn, r.msn, orig))
}

// doAtomic executes a CompareSwap (cas) or FetchAdd on the 8 bytes at va
// of mr and returns the original value (0 if the word cannot be reached).
func doAtomic(mr Region, va uint64, cas bool, compare, swapAdd uint64) uint64 {
	orig, _ := mr.Atomic(va, cas, compare, swapAdd)
	mr.RemoteWritten()
	return orig
}

// AtomicWord executes a CompareSwap (cas) or FetchAdd on the 8 bytes of b,
// for a Region whose memory is in this process, and returns the original
// value; false if b is not an aligned word. The word is changed with the
// CPU's atomics, since the application may touch it at the same time.
func AtomicWord(b []byte, cas bool, compare, swapAdd uint64) (uint64, bool) {
	if len(b) != 8 || uintptr(unsafe.Pointer(&b[0]))&7 != 0 {
		return 0, false
	}
	ptr := (*uint64)(unsafe.Pointer(&b[0]))
	if !cas {
		return atomic.AddUint64(ptr, swapAdd) - swapAdd, true
	}
	for {
		orig := atomic.LoadUint64(ptr)
		if orig != compare || atomic.CompareAndSwapUint64(ptr, orig, swapAdd) {
			return orig, true
		}
	}
}

// StoreWord stores b into the 8 bytes of w, for a Region whose memory is
// in this process, as one atomic store (the application may read the
// word at the same time); false if w is not an aligned word. The bytes
// land as they are: the store is of the word they make in the CPU's order.
func StoreWord(w []byte, b [8]byte) bool {
	if len(w) != 8 || uintptr(unsafe.Pointer(&w[0]))&7 != 0 {
		return false
	}
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&w[0])), binary.NativeEndian.Uint64(b[:]))
	return true
}

func (r *responder) allocResource() *resource {
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
func (r *responder) duplicate(p *header.Packet, oi *header.OpcodeInfo, psn header.PSN) {
	switch oi.Kind {
	case header.KindSend, header.KindWrite:
		r.queueAck(header.ACKSyndrome(header.UnlimitedCredits), r.ePSN.Add(header.PSNMask))
	case header.KindReadRequest:
		if !r.jobsFull() {
			r.replayRead(p, psn)
		}
	case header.KindAtomicRequest:
		if r.jobsFull() {
			return
		}
		for i := range r.res {
			res := &r.res[i]
			if res.used && res.atomic && res.firstPSN == psn {
				r.pushJob(atomicJob(psn, r.msn, res.orig))
				return
			}
		}
	case header.KindAtomicWrite, header.KindFlush:
		r.replayZeroRead(psn)
	}
}

// replayRead answers a duplicate READ request from the resource of the
// READ it repeats, if it asks for a part of that READ's data.
func (r *responder) replayRead(p *header.Packet, psn header.PSN) {
	for i := range r.res {
		res := &r.res[i]
		if !res.used || res.atomic || res.zeroRead || !res.holds(psn) {
			continue
		}
		va, n := p.RETH.VA(), p.RETH.DMALength()
		if p.RETH.RKey() != res.rkey || va < res.va || uint64(n) > uint64(res.length) ||
			va-res.va > uint64(res.length-n) {
			return
		}
		if packetCount(n, r.qp.mtu) != uint32(res.lastPSN.Diff(psn))+1 {
			return
		}
		var mr Region
		if n > 0 {
			var ok bool
			if mr, ok = r.lookupRKey(res.rkey, va, n, ibv.AccessRemoteRead); !ok {
				return
			}
		}
		r.cancelReadJobs(res, psn)
		// Like rxe, a replay from inside the original READ continues with
		// MIDDLE and LAST responses, which is what a requester that kept
		// the first part expects.
		r.pushJob(respJob{kind: jobRead, psn: psn, msn: r.msn, mr: mr, va: va, remaining: n, first: psn == res.firstPSN})
		return
	}
}

// cancelReadJobs drops the queued responses that a requester asking
// again for res's READ from psn discards: what is left of res's own (the
// original or an earlier replay), and every READ or atomic response from
// psn on, since the requester takes responses in PSN order only and
// repeats each later request, which its resource answers again. Without
// it a slow requester that keeps asking gets every stream in full, one
// after another, and each stale response past a lost one makes it ask
// again: in a TCG guest, rxe's re-requested 8 MiB READs had the bridge
// drop 64% of softnic's responses, and 128 outstanding 1 MiB READs ran
// at 1-2 MB/s. rxe does the same, answering a repeated READ from the
// resource in place of the response in progress.
func (r *responder) cancelReadJobs(res *resource, psn header.PSN) {
	for i := r.jobHead; i != r.jobTail; i++ {
		j := &r.jobs[i%uint32(len(r.jobs))]
		if (j.kind == jobRead || j.kind == jobAtomic) && (res.holds(j.psn) || !j.psn.Before(psn)) {
			j.kind = jobCancelled
		}
	}
}
