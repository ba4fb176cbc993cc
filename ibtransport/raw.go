package ibtransport

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// A raw packet QP (IBV_QPT_RAW_PACKET) shares the UD QP's queues, but its
// send work requests are whole Ethernet frames its user built, sent as
// they are, and each frame a flow steers to it (the port matches the
// flows: this package knows no Ethernet) fills one receive with the whole
// frame. It has no PSNs, address vectors or Q_Keys.

// RawPort is a Port that sends whole frames: a raw packet QP needs one.
type RawPort interface {
	// RawPath returns the path a raw packet QP's frames leave on; its
	// Buffer is room for one whole frame, Ethernet header included.
	RawPath() TxPath
}

// ErrNoRawPort is returned when a raw packet QP is created on a port that
// cannot send whole frames.
var ErrNoRawPort = fmt.Errorf("the port sends no raw frames: %w", ibv.ErrInvalidArgument)

// minFrame is the shortest frame a raw QP sends: an Ethernet header.
const minFrame = 14

// rawTransitions are the kernel's ib_modify_qp_is_ok rules for raw packet
// QPs: the port at INIT, nothing else.
var rawTransitions = map[[2]ibv.QPState]transition{
	{ibv.QPSReset, ibv.QPSInit}: {ibv.QPAttrPort, 0},
	{ibv.QPSInit, ibv.QPSInit}:  {0, ibv.QPAttrPort},
	{ibv.QPSInit, ibv.QPSRTR}:   {0, 0},
	{ibv.QPSRTR, ibv.QPSRTS}:    {0, ibv.QPAttrCurState},
	{ibv.QPSRTS, ibv.QPSRTS}:    {0, ibv.QPAttrCurState},
}

// rawPath returns e's path for raw frames, nil when its port has none.
func (e *Engine) rawPath() TxPath {
	if e.rawTx == nil {
		if rp, ok := e.port.(RawPort); ok {
			e.rawTx = rp.RawPath()
		}
	}
	return e.rawTx
}

// sendRawFrame sends the frame of the WQE in slot i. It reports false
// when the link has no buffer now; otherwise the WQE is done, with the
// status returned.
func (q *QP) sendRawFrame(i uint32, w *sendWQE) (ibv.WCStatus, bool) {
	if w.state == wqeError {
		return w.status, true
	}
	path := q.e.rawPath()
	if path == nil {
		return ibv.WCLocQPOpErr, true
	}
	if st := q.req.prepare(i, w); st != ibv.WCSuccess {
		return st, true
	}
	buf := path.Buffer()
	if buf == nil {
		return ibv.WCSuccess, false
	}
	if w.length < minFrame || int(w.length) > len(buf) {
		inc(&q.e.Ctr.TxUDTooLong)
		return ibv.WCLocLenErr, true
	}
	if !q.gather(i, w, 0, buf[:w.length]) {
		return ibv.WCLocProtErr, true
	}
	path.Send(int(w.length))
	q.e.passLeft--
	q.countSent(int(w.length))
	return ibv.WCSuccess, true
}

// ReceiveRaw hands a frame a flow of the port steered to raw packet QP
// qpn. A frame for a QP of another engine of the group is forwarded to
// it; frame is valid only during the call.
func (e *Engine) ReceiveRaw(qpn uint32, frame []byte) {
	inc(&e.Ctr.RxPackets)
	q := e.g.qps[qpn]
	if q == nil || q.typ != ibv.QPTypeRawPacket {
		inc(&e.Ctr.RxNoQP)
		return
	}
	if q.e != e {
		e.forwardTo(q.e, frame, &RecvInfo{RawQPN: qpn, Raw: true})
		return
	}
	e.receiveRaw(q, frame)
}

// receiveRaw fills q's next receive with frame and completes it.
func (e *Engine) receiveRaw(q *QP, frame []byte) {
	if q.st < ibv.QPSRTR || q.st == ibv.QPSErr {
		inc(&e.Ctr.RxFiltered)
		return
	}
	inc(&q.ctr.RxPackets)
	add(&q.ctr.RxBytes, uint64(len(frame)))
	r := &q.resp
	if !r.takeRecv() {
		inc(&e.Ctr.RxNoRecv) // no receive posted: the frame is lost
		return
	}
	st := r.recvBad
	if st == ibv.WCSuccess && uint64(len(frame)) > r.recvCap {
		st = ibv.WCLocLenErr
	}
	if st == ibv.WCSuccess {
		st = r.scatterRecv(frame)
	}
	wc := ibv.WC{WRID: r.recv.id, Status: st, Opcode: ibv.WCRecv, QPN: q.qpn}
	if st == ibv.WCSuccess {
		inc(&e.Ctr.RdmaRecvs)
		inc(&q.ctr.RdmaRecvs)
		wc.ByteLen = uint32(len(frame))
	}
	r.recvActive = false
	q.complete(q.recvCQ, wc, false)
}
