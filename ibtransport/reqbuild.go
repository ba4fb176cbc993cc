package ibtransport

import (
	"encoding/binary"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

var sendOps = [2][4][3]header.Opcode{ // [write][position first,middle,last,only][plain,imm,inv]
	{
		{header.OpRCSendFirst, header.OpRCSendFirst, header.OpRCSendFirst},
		{header.OpRCSendMiddle, header.OpRCSendMiddle, header.OpRCSendMiddle},
		{header.OpRCSendLast, header.OpRCSendLastImm, header.OpRCSendLastInv},
		{header.OpRCSendOnly, header.OpRCSendOnlyImm, header.OpRCSendOnlyInv},
	},
	{
		{header.OpRCWriteFirst, header.OpRCWriteFirst, header.OpRCWriteFirst},
		{header.OpRCWriteMiddle, header.OpRCWriteMiddle, header.OpRCWriteMiddle},
		{header.OpRCWriteLast, header.OpRCWriteLastImm, header.OpRCWriteLast},
		{header.OpRCWriteOnly, header.OpRCWriteOnlyImm, header.OpRCWriteOnly},
	},
}

// sendOpcode returns the opcode of the SEND or WRITE packet psn of w.
func sendOpcode(w *sendWQE, psn header.PSN) header.Opcode {
	first, last := psn == w.firstPSN, psn == w.lastPSN
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
	switch w.opcode {
	case ibv.WRSendWithImm, ibv.WRRDMAWriteWithImm:
		variant = 1
	case ibv.WRSendWithInv:
		variant = 2
	}
	wi := 0
	if w.opcode.IsWrite() {
		wi = 1
	}
	return sendOps[wi][pos][variant]
}

// buildRequest writes the packet of the WQE in slot i at its nextPSN into
// buf and advances the WQE.
func (r *requester) buildRequest(buf []byte, i uint32, w *sendWQE) (int, bool) {
	psn := w.nextPSN
	op := w.opcode
	var n int
	last := true
	switch {
	case op.IsSend() || op.IsWrite():
		var ok bool
		if n, ok = r.buildSendWrite(buf, i, w, sendOpcode(w, psn)+r.qp.opBase()); !ok {
			return 0, false
		}
		last = psn == w.lastPSN
	case op.IsRead():
		n = r.buildRead(buf, w)
	case op.IsAtomicWrite():
		n = r.buildAtomicWrite(buf, i, w)
	case op.IsFlush():
		n = r.buildFlush(buf, w)
	default:
		n = r.buildAtomic(buf, i, w)
	}
	ackReq := last || r.sinceAckReq+1 >= ackReqInterval
	if ackReq {
		r.sinceAckReq = 0
	} else {
		r.sinceAckReq++
	}
	r.qp.setRequestBTH(w, psn, last, ackReq)
	if x := r.qp.e.tx.XRCETH; x != nil {
		x.SetSRQN(r.qp.sq.atomics[i&r.qp.sq.mask].srqn)
	}
	return n, true
}

// setRequestBTH sets the BTH of the request packet psn of w just laid out
// in q.e.tx: the destination QP, the PSN, AckReq, MigReq and, on the last
// packet of a SEND or WRITE with immediate that asks for it, the solicited
// event. RC and UC requests share it; UC passes ackReq false.
func (q *QP) setRequestBTH(w *sendWQE, psn header.PSN, last, ackReq bool) {
	p := &q.e.tx
	p.BTH.SetDestQPN(q.destQPN)
	p.BTH.SetPSN(psn)
	p.BTH.SetAckReq(ackReq)
	p.BTH.SetMigReq(true)
	p.BTH.SetSolicitedEvent(last && w.flags&ibv.SendSolicited != 0 && (w.opcode.IsSend() || w.opcode == ibv.WRRDMAWriteWithImm))
}

// buildSendWrite lays out the SEND or WRITE packet of w at its nextPSN,
// with opcode op, and its payload. Every packet of a message but the last
// carries a whole MTU.
func (r *requester) buildSendWrite(buf []byte, i uint32, w *sendWQE, op header.Opcode) (int, bool) {
	q := r.qp
	p := &q.e.tx
	psn := w.nextPSN
	offset := uint32(psn.Diff(w.firstPSN)) * q.mtu
	payload := min(w.length-offset, q.mtu)
	n, _ := header.LayoutPacket(buf, op, int(payload), p)
	if p.RETH != nil {
		p.RETH.SetVA(w.remoteAddr)
		p.RETH.SetRKey(w.rkey)
		p.RETH.SetDMALength(w.length)
	}
	if p.ImmDt != nil {
		p.ImmDt.SetImm(w.imm)
	}
	if p.IETH != nil {
		p.IETH.SetRKey(w.invalidateRKey())
	}
	if !q.gather(i, w, offset, p.Payload) {
		return 0, false
	}
	w.nextPSN = psn.Add(1)
	return n, true
}

// buildRead lays out a READ request. A responder streams a READ's whole
// response at once, and one of megabytes (thousands of packets) overflows
// this side's receive ring. So a READ of more than the QP's window of
// response packets goes out as several READ requests, each up to the next
// multiple of the window, paced by the window in sendRequests: one in
// flight at a time, as a responder with one READ resource expects.
func (r *requester) buildRead(buf []byte, w *sendWQE) int {
	q := r.qp
	p := &q.e.tx
	idx := uint32(w.nextPSN.Diff(w.firstPSN))
	seg := uint32(r.window)
	end := min((idx/seg+1)*seg, uint32(w.lastPSN.Diff(w.firstPSN))+1)
	off := idx * q.mtu
	n, _ := header.LayoutPacket(buf, header.OpRCReadRequest+q.opBase(), 0, p)
	p.RETH.SetVA(w.remoteAddr + uint64(off))
	p.RETH.SetRKey(w.rkey)
	p.RETH.SetDMALength(min(w.length-off, (end-idx)*q.mtu))
	w.nextPSN = w.firstPSN.Add(end)
	return n
}

// buildAtomic lays out a CompareSwap or FetchAdd request.
func (r *requester) buildAtomic(buf []byte, i uint32, w *sendWQE) int {
	q := r.qp
	p := &q.e.tx
	opc := header.OpRCFetchAdd
	if w.opcode == ibv.WRAtomicCmpAndSwp {
		opc = header.OpRCCompareSwap
	}
	a := &q.sq.atomics[i&q.sq.mask]
	n, _ := header.LayoutPacket(buf, opc+q.opBase(), 0, p)
	p.AtomicETH.SetVA(w.remoteAddr)
	p.AtomicETH.SetRKey(w.rkey)
	if w.opcode == ibv.WRAtomicCmpAndSwp {
		p.AtomicETH.SetSwapAdd(a.swap)
		p.AtomicETH.SetCompare(a.compareAdd)
	} else {
		p.AtomicETH.SetSwapAdd(a.compareAdd)
	}
	w.nextPSN = w.nextPSN.Add(1)
	return n
}

// buildAtomicWrite lays out an ATOMIC_WRITE: a RETH of 8 bytes and the
// value, as the poster's memory held it.
func (r *requester) buildAtomicWrite(buf []byte, i uint32, w *sendWQE) int {
	q := r.qp
	p := &q.e.tx
	n, _ := header.LayoutPacket(buf, header.OpRCAtomicWrite+q.opBase(), 8, p)
	p.RETH.SetVA(w.remoteAddr)
	p.RETH.SetRKey(w.rkey)
	p.RETH.SetDMALength(8)
	binary.NativeEndian.PutUint64(p.Payload, q.sq.atomics[i&q.sq.mask].compareAdd)
	w.nextPSN = w.nextPSN.Add(1)
	return n
}

// buildFlush lays out a FLUSH: its FETH, and a RETH naming the range
// (which a whole-region FLUSH sends too, as rxe does).
func (r *requester) buildFlush(buf []byte, w *sendWQE) int {
	p := &r.qp.e.tx
	n, _ := header.LayoutPacket(buf, header.OpRCFlush+r.qp.opBase(), 0, p)
	p.FETH.Set(w.flushSpec())
	p.RETH.SetVA(w.remoteAddr)
	p.RETH.SetRKey(w.rkey)
	p.RETH.SetDMALength(w.length)
	w.nextPSN = w.nextPSN.Add(1)
	return n
}
