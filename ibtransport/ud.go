package ibtransport

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// A UD QP shares the RC QP's queues and its state machine (with
// udTransitions), but has no requester window, completer or responder
// protocol: each send work request is one packet to the address handle it
// names, completed as soon as the packet is handed to the link, and each
// packet received fills one receive, behind a GRH.

// controlledQKey is the Q_Key bit that makes a send use the QP's own Q_Key
// instead of the work request's (IBA 10.2.4).
const controlledQKey = 0x80000000

// ahPaths is what the engines send to an AH of their group with (the
// AH's Backend): a transmit path on every engine, made when the AH is
// created, so that sending to it resolves nothing.
type ahPaths struct {
	g     *Group
	paths []TxPath // by engine index; used by that engine only
}

// CreateAH creates an address handle for av (ibv_create_ah). It fails when
// av's destination cannot be reached from its source GID.
func (g *Group) CreateAH(av *ibv.AddressVector) (*ibv.AH, error) {
	ap := &ahPaths{g: g, paths: make([]TxPath, len(g.engines))}
	dst := *av
	for i, e := range g.engines {
		err := e.Do(func() error {
			p, err := e.port.Path(&dst, 0, e.port.ActiveMTU())
			ap.paths[i] = p
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("create AH: %w", err)
		}
	}
	return ibv.NewAH(dst, ap), nil
}

// pathsOf returns the engines' paths to ah, nil for an AH no group of
// engines made.
func pathsOf(ah *ibv.AH) *ahPaths {
	ap, _ := ah.Backend().(*ahPaths)
	return ap
}

// udDest is where one UD send goes (ibv_send_wr.wr.ud).
type udDest struct {
	ah   *ahPaths
	qpn  uint32
	qkey uint32
}

// initUD gives a new UD QP its destinations ring and its MTU, the port's.
func (q *QP) initUD(e *Engine) {
	q.sq.ud = make([]udDest, len(q.sq.slots))
	q.mtu = uint32(e.port.ActiveMTU())
}

// placeUD puts a new UD QP with an SRQ on the engine of the SRQ's other
// QPs, or makes its engine the SRQ's: an SRQ is consumed by one engine.
// Called under Do.
func (g *Group) placeUD(q *QP) {
	if to := g.srqEngineOr(q.srq, q.e); to != q.e {
		moveQP(q, to)
	}
}

// checkUDAH checks a UD send's AH: one of this engine's, not destroyed.
func (q *QP) checkUDAH(wr *ibv.SendWR) error {
	switch {
	case wr.AH == nil || wr.AH.Destroyed():
		return fmt.Errorf("post send: UD send without a valid AH: %w", ibv.ErrInvalidArgument)
	case pathsOf(wr.AH) == nil || pathsOf(wr.AH).g != q.home.Load().g:
		return fmt.Errorf("post send: AH of another device: %w", ibv.ErrInvalidArgument)
	}
	return nil
}

// serviceUnacked is a UD or UC QP's share of Process: it sends what was
// posted, with nothing to wait for.
func (q *QP) serviceUnacked() bool {
	if q.cnpPending > 0 && q.st >= ibv.QPSRTR && q.st != ibv.QPSErr {
		q.sendCNP()
	}
	switch q.st {
	case ibv.QPSRTS:
		if q.typ == ibv.QPTypeUC {
			return q.sendUnreliable()
		}
		return q.sendDatagrams()
	case ibv.QPSSQD:
		busy, drained := false, q.comp.compIdx == q.sq.tail.Load()
		if q.typ == ibv.QPTypeUC {
			// The message in progress goes out whole; those not started
			// wait for RTS.
			busy = q.sendUnreliable()
			drained = !q.comp.outstanding()
		}
		if !q.sqDrained && drained {
			q.sqDrained = true
			q.e.emit(q, QPEventSQDrained)
		}
		return busy
	case ibv.QPSErr:
		q.flush()
	}
	return false
}

// sendDatagrams sends and completes posted UD sends, one packet each,
// until the queue is empty, the budget is spent or the link has no buffer.
// It reports whether it stopped only for the budget. Work requests
// complete in order, so the completer's index is the next to send.
func (q *QP) sendDatagrams() bool {
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
		var st ibv.WCStatus
		var done bool
		if q.typ == ibv.QPTypeRawPacket {
			st, done = q.sendRawFrame(c.compIdx, w)
		} else {
			st, done = q.sendDatagram(c.compIdx, w)
		}
		if !done {
			return false
		}
		if st != ibv.WCSuccess {
			c.failHead(st)
			return false
		}
		c.completeHead(ibv.WCSuccess)
	}
	return true
}

// sendDatagram sends the WQE in slot i. It reports false when the link
// has no buffer now; otherwise the WQE is done, with the status returned.
func (q *QP) sendDatagram(i uint32, w *sendWQE) (ibv.WCStatus, bool) {
	if w.state == wqeError {
		return w.status, true
	}
	psn := q.req.sqPSN
	if w.length > q.mtu {
		// C10-93.1.1: no packet and no error; the PSN is spent, as rxe
		// spends it.
		inc(&q.e.Ctr.TxUDTooLong)
		q.req.sqPSN = psn.Add(1)
		return ibv.WCSuccess, true
	}
	if st := q.req.prepare(i, w); st != ibv.WCSuccess {
		return st, true
	}
	d := &q.sq.ud[i&q.sq.mask]
	path := d.ah.paths[q.e.index]
	buf := path.Buffer()
	if buf == nil {
		return ibv.WCSuccess, false
	}
	n, ok := q.buildDatagram(buf, i, w, d)
	if !ok {
		return ibv.WCLocProtErr, true // the memory was deregistered under the WQE
	}
	q.req.sqPSN = psn.Add(1)
	path.Send(n)
	q.e.passLeft--
	q.countSent(n)
	return ibv.WCSuccess, true
}

// buildDatagram lays out the UD SEND packet of the WQE in slot i for d.
func (q *QP) buildDatagram(buf []byte, i uint32, w *sendWQE, d *udDest) (int, bool) {
	op := header.OpUDSendOnly
	if w.opcode == ibv.WRSendWithImm {
		op = header.OpUDSendOnlyImm
	}
	p := &q.e.tx
	n, err := header.LayoutPacket(buf, op, int(w.length), p)
	if err != nil {
		return 0, false
	}
	p.BTH.SetDestQPN(d.qpn)
	p.BTH.SetPSN(q.req.sqPSN)
	p.BTH.SetSolicitedEvent(w.flags&ibv.SendSolicited != 0)
	qkey := d.qkey
	if qkey&controlledQKey != 0 {
		qkey = q.attr.QKey
	}
	p.DETH.SetQKey(qkey)
	p.DETH.SetSrcQP(q.qpn)
	if p.ImmDt != nil {
		p.ImmDt.SetImm(w.imm)
	}
	if !q.gather(i, w, 0, p.Payload) {
		return 0, false
	}
	return n, true
}
