package ibtransport

import (
	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// The notification point: a QP that receives a packet marked Congestion
// Experienced answers its peer with a CNP (BTH opcode 0x81, BECN set,
// P_Key 0xFFFF, the peer's QPN, 16 reserved bytes), at most one per
// CNPInterval, as ConnectX does. The CNP leaves on the QP's own path in
// its next service, ahead of its responses; the port gives it the CNP's
// own DSCP (roce: the opcode tells).

// cnpReservedLen is the CNP's reserved bytes after the BTH.
const cnpReservedLen = 16

// maxPendingCNPs bounds the CNPs one QP has queued: a pass that took in
// many marked packets answers with at most this many.
const maxPendingCNPs = 16

// noteCE handles the CE mark of a packet of n bytes q received: count it
// and, if no CNP went out for q within the interval, queue one.
//
// The interval is measured on the packets' arrival times, as a NIC
// measures it. The engine does not know them: it reads the clock once
// per pass, and a pass may take in a batch that arrived over
// milliseconds while the engine waited for a CPU. A batch on one clock
// reading got one CNP per QP, a tenth of the marked packets on a busy
// host. So each marked packet is taken to
// have arrived no earlier than now and no earlier than the previous
// marked one plus its own time on the line at LineRate: the earliest
// times consistent with the port's speed, which never gives more CNPs
// than a NIC that saw the real spacing.
func (e *Engine) noteCE(q *QP, n int) {
	inc(&e.Ctr.NPECNMarked)
	if e.g.cc.NPOff || q.typ == ibv.QPTypeUD {
		return
	}
	at := max(e.now(), e.ceAt+int64(n+wireOverhead)*8e9/int64(e.g.cc.LineRate))
	e.ceAt = at
	if q.cnpSent && at-q.cnpAt < int64(e.g.cc.CNPInterval) {
		return
	}
	q.cnpSent, q.cnpAt = true, at
	q.cnpPending = min(q.cnpPending+1, maxPendingCNPs)
}

// sendCNP sends the CNPs noteCE queued, as long as the link has buffers
// for them; the rest stay queued for the next service.
func (q *QP) sendCNP() {
	if q.path == nil {
		q.cnpPending = 0
		return
	}
	for ; q.cnpPending > 0; q.cnpPending-- {
		buf := q.path.Buffer()
		if buf == nil {
			return
		}
		p := &q.e.tx
		n, err := header.LayoutPacket(buf, header.OpCNP, cnpReservedLen, p)
		if err != nil {
			q.cnpPending = 0
			return
		}
		clear(p.Payload)
		p.BTH.SetBECN(true)
		p.BTH.SetDestQPN(q.destQPN)
		q.path.Send(n)
		q.countSent(n)
		inc(&q.e.Ctr.NPCNPSent)
	}
}

// onCNP handles a CNP for q, which is on this engine: a connected RC QP
// whose path it came on cuts its rate (reaction point); anything else
// ignores it.
func (e *Engine) onCNP(q *QP, info *RecvInfo) {
	if e.g.cc.RPOff || !q.typ.Reliable() || (q.st != ibv.QPSRTS && q.st != ibv.QPSSQD) ||
		info.SGID != q.attr.AV.DGID || info.DGIDIndex != int(q.attr.AV.SGIDIndex) {
		inc(&e.Ctr.RPCNPIgnored)
		return
	}
	inc(&e.Ctr.RPCNPHandled)
	q.rp.onCNP(&e.g.cc, e.now())
	e.activate(q)
}
