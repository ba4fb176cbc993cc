package ibtransport

import (
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// The UC receive side (IBA 9.7.x for UC, rxe_resp.c's UC paths) uses the
// responder's state but answers nothing: a packet it cannot take drops the
// message in progress, and packets are dropped until a FIRST or ONLY
// starts the next message, whatever its PSN. A receive a dropped SEND had
// begun to fill is not completed: the next message fills it again.

// onUCRequest handles a UC packet for the QP.
func (r *responder) onUCRequest(p *header.Packet, oi *header.OpcodeInfo) {
	if !r.ucAccept(oi, p.BTH.PSN()) {
		return
	}
	if !r.checkLength(oi, uint32(len(p.Payload))) {
		r.ucDrop(&r.qp.e.Ctr.RxUCLength)
		return
	}
	if oi.Kind == header.KindSend {
		r.ucSend(p, oi)
	} else {
		r.ucWrite(p, oi)
	}
}

// ucAccept decides whether packet psn belongs to the message stream: a
// FIRST or ONLY always starts a message (abandoning one in progress and
// resynchronizing to its PSN), a MIDDLE or LAST must continue the message
// in progress at the expected PSN.
func (r *responder) ucAccept(oi *header.OpcodeInfo, psn header.PSN) bool {
	ctr := &r.qp.e.Ctr
	if oi.Position == header.PositionFirst || oi.Position == header.PositionOnly {
		if psn != r.ePSN {
			inc(&ctr.RxOutOfSeq)
		}
		switch {
		case r.mode == modeIdle:
		case psn != r.ePSN: // the end of the message in progress was lost
			r.ucDrop(&ctr.RxUCPSNGap)
		default:
			r.ucDrop(&ctr.RxUCOpSeq)
		}
		r.ucDropping = false
		r.ePSN = psn
		return true
	}
	switch {
	case r.ucDropping:
		inc(&ctr.RxUCResync)
	case psn != r.ePSN:
		inc(&ctr.RxOutOfSeq)
		r.ucDrop(&ctr.RxUCPSNGap)
	case !r.checkOpSeq(oi):
		r.ucDrop(&ctr.RxUCOpSeq)
	default:
		return true
	}
	return false
}

// ucDrop drops the message in progress, counting the reason in ctr. The
// receive it was filling (if any) is kept, emptied, for the next message.
func (r *responder) ucDrop(ctr *atomic.Uint64) {
	inc(ctr)
	r.mode = modeIdle
	r.ucDropping = true
	r.recvOff = 0
	r.wMR = nil
}

// ucTakeRecv makes sure a receive is active for a SEND or WRITE with
// immediate: the one a dropped message left, or the next posted.
func (r *responder) ucTakeRecv() bool {
	if r.recvActive || r.takeRecv() {
		return true
	}
	r.ucDrop(&r.qp.e.Ctr.RxNoRecv)
	return false
}

// ucSend places a SEND packet in the active receive. A receive that cannot
// hold the message (or whose SGL is bad) completes in error, as UD's do
// (class D, class E with an SRQ), and the rest of the message is dropped.
func (r *responder) ucSend(p *header.Packet, oi *header.OpcodeInfo) {
	psn := p.BTH.PSN()
	if (oi.Position == header.PositionFirst || oi.Position == header.PositionOnly) && !r.ucTakeRecv() {
		return
	}
	st := r.recvBad
	if st == ibv.WCSuccess {
		st = r.scatterRecv(p.Payload)
	}
	if st != ibv.WCSuccess {
		if st == ibv.WCLocLenErr && r.qp.srq != nil {
			st = ibv.WCRemInvReqErr
		}
		r.completeRecv(st, 0)
		r.ucDrop(&r.qp.e.Ctr.RxUCLength)
		return
	}
	r.advance(psn, 1)
	if oi.Position == header.PositionFirst || oi.Position == header.PositionMiddle {
		r.mode = modeSend
		return
	}
	r.mode = modeIdle
	var flags ibv.WCFlags
	var imm uint32
	if p.ImmDt != nil {
		flags, imm = ibv.WCWithImm, p.ImmDt.Imm()
	}
	r.msn++
	r.finishRecv(ibv.WCRecv, r.recvOff, flags, imm, 0, p.BTH.SolicitedEvent())
}

// ucWrite places a WRITE packet in the target region; an rkey, bounds or
// access violation or a length the RETH does not announce drops the
// message silently.
func (r *responder) ucWrite(p *header.Packet, oi *header.OpcodeInfo) {
	ctr := &r.qp.e.Ctr
	if p.RETH != nil && !r.ucStartWrite(p, oi) {
		return
	}
	payload := p.Payload
	plen := uint32(len(payload))
	if plen > r.wRemaining || (oi.Position == header.PositionLast && plen != r.wRemaining) {
		r.ucDrop(&ctr.RxUCLength)
		return
	}
	if plen > 0 {
		if !r.qp.writePayload(r.wMR, payload, r.wVA) {
			r.ucDrop(&ctr.RxUCAccess)
			return
		}
		r.wVA += uint64(plen)
		r.wRemaining -= plen
	}
	if p.ImmDt != nil && !r.ucTakeRecv() {
		return
	}
	r.advance(p.BTH.PSN(), 1)
	if oi.Position == header.PositionFirst || oi.Position == header.PositionMiddle {
		r.mode = modeWrite
		return
	}
	r.finishWrite(p)
}

// ucStartWrite checks a WRITE's RETH and makes it the WRITE in progress.
func (r *responder) ucStartWrite(p *header.Packet, oi *header.OpcodeInfo) bool {
	ctr := &r.qp.e.Ctr
	n := p.RETH.DMALength()
	r.wMR, r.wVA, r.wRemaining, r.wTotal = nil, p.RETH.VA(), n, n
	plen := uint32(len(p.Payload))
	if (oi.Position == header.PositionOnly && plen != n) || (oi.Position == header.PositionFirst && n <= r.qp.mtu) {
		r.ucDrop(&ctr.RxUCLength)
		return false
	}
	if n == 0 {
		return true
	}
	mr, ok := r.lookupRKey(p.RETH.RKey(), r.wVA, n, ibv.AccessRemoteWrite)
	if !ok {
		r.ucDrop(&ctr.RxUCAccess)
		return false
	}
	r.wMR = mr
	return true
}
