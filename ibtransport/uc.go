package ibtransport

import (
	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// A UC QP is connected like an RC QP (a path, a destination QP, PSNs in
// both directions) but unreliable: its packets ask for no ACK, nothing is
// retransmitted and no window holds them back, so a send work request
// completes as soon as its last packet is handed to the link. The receive
// side (ucrecv.go) drops a message it cannot take whole.

// ucTransitions are IBA table 93's rules for UC QPs, as the kernel's
// ib_modify_qp_is_ok keeps them: RC's without the READ/atomic resources,
// the RNR timer and the retry counts.
var ucTransitions = map[[2]ibv.QPState]transition{
	{ibv.QPSReset, ibv.QPSInit}: {ibv.QPAttrPKeyIndex | ibv.QPAttrPort | ibv.QPAttrAccessFlags, 0},
	{ibv.QPSInit, ibv.QPSInit}:  {0, ibv.QPAttrPKeyIndex | ibv.QPAttrPort | ibv.QPAttrAccessFlags},
	{ibv.QPSInit, ibv.QPSRTR}:   {ibv.QPAttrAV | ibv.QPAttrPathMTU | ibv.QPAttrDestQPN | ibv.QPAttrRQPSN, ibv.QPAttrPKeyIndex | ibv.QPAttrAccessFlags},
	{ibv.QPSRTR, ibv.QPSRTS}:    {ibv.QPAttrSQPSN, ibv.QPAttrCurState | ibv.QPAttrAccessFlags},
	{ibv.QPSRTS, ibv.QPSRTS}:    {0, ibv.QPAttrCurState | ibv.QPAttrAccessFlags},
	{ibv.QPSRTS, ibv.QPSSQD}:    {0, 0},
	{ibv.QPSSQD, ibv.QPSRTS}:    {0, ibv.QPAttrCurState | ibv.QPAttrAccessFlags},
	{ibv.QPSSQD, ibv.QPSSQD}:    {0, ibv.QPAttrAV | ibv.QPAttrAccessFlags | ibv.QPAttrPKeyIndex},
	{ibv.QPSSQE, ibv.QPSRTS}:    {0, ibv.QPAttrCurState | ibv.QPAttrAccessFlags},
}

// ucOpcodeBase added to an RC SEND or WRITE opcode makes its UC twin.
const ucOpcodeBase = header.OpUCSendFirst - header.OpRCSendFirst

// sendUnreliable sends the packets of posted UC work requests, in order,
// until the queue is empty, the budget is spent or the link has no buffer,
// and completes each after its last packet. It reports whether it stopped
// only for the budget. The WQE being sent is always the completer's head.
func (q *QP) sendUnreliable() bool {
	if q.path == nil {
		return false
	}
	c := &q.comp
	tail := q.sq.tail.Load()
	for budget := packetBudget; budget > 0; budget-- {
		if c.compIdx == tail {
			return false
		}
		if q.e.passLeft <= 0 {
			return true
		}
		w := q.sqSlot(c.compIdx)
		if w.state == wqeNew {
			if q.st == ibv.QPSSQD {
				return false // draining: no new message starts
			}
			q.startUC(c.compIdx, w)
		}
		if w.state == wqeError {
			c.failHead(w.status)
			return false
		}
		if !q.transmitUC(c.compIdx, w) {
			return false
		}
		if w.nextPSN == w.lastPSN.Add(1) {
			c.completeHead(ibv.WCSuccess)
		}
	}
	return true
}

// startUC checks the SGL of the new WQE in slot i and assigns its PSNs.
func (q *QP) startUC(i uint32, w *sendWQE) {
	r := &q.req
	if st := r.prepare(i, w); st != ibv.WCSuccess {
		w.state, w.status = wqeError, st
		return
	}
	r.assignPSNs(w)
}

// transmitUC sends the next packet of the WQE in slot i. It reports false
// when the link has no buffer now, or when the WQE failed.
func (q *QP) transmitUC(i uint32, w *sendWQE) bool {
	buf := q.path.Buffer()
	if buf == nil {
		return false
	}
	psn := w.nextPSN
	n, ok := q.req.buildSendWrite(buf, i, w, sendOpcode(w, psn)+ucOpcodeBase)
	if !ok {
		// The memory behind the SGL was deregistered under the WQE.
		w.state, w.status = wqeError, ibv.WCLocProtErr
		return false
	}
	q.setRequestBTH(w, psn, psn == w.lastPSN, false)
	q.path.Send(n)
	q.e.passLeft--
	q.countSent(n)
	return true
}
