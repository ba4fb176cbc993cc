package ibtransport

import "github.com/softnic/softnic/ibtransport/ibv"

// takeRecv starts filling the next posted receive, from the SRQ or the
// QP's own receive queue.
func (r *responder) takeRecv() bool {
	q := r.qp
	rq := &q.rq
	if q.srq != nil {
		rq = q.srqRQ
	}
	w := rq.peek()
	if w == nil {
		return false
	}
	id := w.id
	r.recv.sge = append(r.recv.sge[:0], w.sge...)
	rq.pop()
	if q.srq != nil {
		q.srq.Consumed()
	} else {
		q.publishRecvRetired()
	}
	r.useRecv(id, r.recv.sge)
	return true
}

// useRecv makes the receive id with SGL sgl (a posted receive's, or a
// TM SRQ's tagged buffer) the active one, with its regions looked up.
func (r *responder) useRecv(id uint64, sgl []ibv.SGE) {
	q := r.qp
	r.recv.id = id
	if len(sgl) > cap(r.recv.sge) {
		sgl = sgl[:cap(r.recv.sge)] // the SRQ bounds a tagged buffer's SGEs
	}
	r.recv.sge = append(r.recv.sge[:0], sgl...)
	r.recvActive = true
	r.recvOff = 0
	r.recvBad = ibv.WCSuccess
	r.recvCap = 0
	for i, s := range r.recv.sge {
		r.recvCap += uint64(s.Length)
		r.recvMRs[i] = nil
		if s.Length == 0 {
			continue
		}
		mr := q.mem.LocalRegion(s.LKey, s.Addr, s.Length, ibv.AccessLocalWrite)
		if mr == nil {
			r.recvBad = ibv.WCLocProtErr
			continue
		}
		r.recvMRs[i] = mr
	}
}

// scatterRecv copies a SEND payload into the active receive.
func (r *responder) scatterRecv(src []byte) ibv.WCStatus {
	off := r.recvOff
	if uint64(off)+uint64(len(src)) > r.recvCap {
		return ibv.WCLocLenErr // checked first: nothing is written
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
			return ibv.WCLocProtErr
		}
		n := min(s.Length-off, uint32(len(src)))
		if !r.qp.writePayload(mr, src[:n], s.Addr+uint64(off)) {
			return ibv.WCLocProtErr
		}
		src = src[n:]
		off = 0
	}
	if len(src) != 0 {
		return ibv.WCLocLenErr
	}
	return ibv.WCSuccess
}

// finishRecv completes the active receive successfully.
func (r *responder) finishRecv(op ibv.WCOpcode, n uint32, flags ibv.WCFlags, imm, inv uint32, solicited bool) {
	wc := r.recvWC(ibv.WCSuccess, op, n)
	wc.Flags, wc.Imm, wc.InvalidatedRKey = flags, imm, inv
	r.recvActive = false
	inc(&r.qp.e.Ctr.RdmaRecvs)
	inc(&r.qp.ctr.RdmaRecvs)
	r.qp.complete(r.recvCQ(), wc, solicited)
}

// completeRecv completes the active receive with st.
func (r *responder) completeRecv(st ibv.WCStatus, n uint32) {
	op := ibv.WCRecv
	if r.tm != nil {
		op = r.tm.op
	}
	wc := r.recvWC(st, op, n)
	r.recvActive = false
	r.qp.complete(r.recvCQ(), wc, false)
}

func (r *responder) recvWC(st ibv.WCStatus, op ibv.WCOpcode, n uint32) ibv.WC {
	return ibv.WC{WRID: r.recv.id, Status: st, Opcode: op, ByteLen: n, QPN: r.qp.qpn, SrcQP: r.qp.destQPN}
}
