package rdmacm

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport/cm"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// The UDP port space in process: the ID's UD QP goes to RTS when it is
// made, Connect sends a SIDR_REQ, and a listener answers SIDR_REQs.

// isUD reports whether the ID's port space has UD QPs.
func (id *inprocID) isUD() bool { return id.ps == PortSpaceUDP }

// readyUD takes a new UD QP to RTS with the port space's Q_Key, as
// librdmacm's ucma_init_ud_qp does.
func readyUD(qp *verbs.QP) error {
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSInit, Port: 1, QKey: UDPQKey},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState},
		{verbs.QPAttr{State: verbs.QPSRTS}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			return fmt.Errorf("UD QP to %v: %w", s.attr.State, err)
		}
	}
	return nil
}

// readyQP takes the ID's new QP as far as it goes before a connection:
// INIT for RC, RTS for UD. id.mu is held.
func (id *inprocID) readyQP(qp *verbs.QP) error {
	if id.isUD() {
		return readyUD(qp)
	}
	return toInit(qp)
}

// connectUD resolves the peer's service (rdma_connect on a UD ID). id.mu
// is held.
func (id *inprocID) connectUD(p *ConnParam) error {
	if id.state != stateRouteResolved {
		return fmt.Errorf("connect: %w", ErrState)
	}
	if len(p.PrivateData) > mad.SIDRREQPrivateDataLen-mad.CMAHeaderLen {
		return fmt.Errorf("connect: %d bytes of private data: %w", len(p.PrivateData), ErrInvalidArgument)
	}
	conn, err := id.dev.CM().ResolveService(cm.SIDRParams{Peer: id.peerAV(),
		ServiceID: mad.ServiceID(id.ps, id.peer.Port()), PrivateData: id.cmaPrivateData(p.PrivateData)}, id.onSIDREvent)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	id.conn, id.state = conn, stateConnect
	return nil
}

// onSIDREvent is the answer to connectUD's request.
func (id *inprocID) onSIDREvent(ev cm.Event) {
	id.mu.Lock()
	if id.state != stateConnect {
		id.mu.Unlock()
		return
	}
	id.conn, id.state = nil, stateRouteResolved
	var out Event
	switch {
	case ev.Type == cm.EventTimeout:
		out = Event{Type: EventUnreachable, Err: ErrTimedOut}
	case ev.SIDRStatus != mad.SIDRValid:
		// cma.c's cma_sidr_rep_handler: UNREACHABLE, the status as reason.
		out = Event{Type: EventUnreachable, Reason: mad.RejectReason(ev.SIDRStatus), Param: ConnParam{PrivateData: ev.PrivateData},
			Err: fmt.Errorf("%w (SIDR status %d)", ErrRefused, ev.SIDRStatus)}
	default:
		id.state = stateEstablished
		out = Event{Type: EventEstablished, Param: ConnParam{PrivateData: ev.PrivateData},
			UD: &UDParam{AV: id.peerAV(), QPN: ev.RemoteQPN, QKey: ev.QKey}}
	}
	id.mu.Unlock()
	out.ID = id.front
	id.post(out)
}

// onSIDRREQ turns a SIDR_REQ to the listener on dev into a new ID and an
// EventConnectRequest, or refuses it.
func (id *inprocID) onSIDRREQ(dev *verbs.Device, ev cm.Event) {
	if len(ev.PrivateData) < mad.CMAHeaderLen {
		ev.Conn.SIDRReply(mad.SIDRRejected, 0, 0, nil)
		return
	}
	// The REQ names no GIDs; the rdma_cm header's destination is ours.
	ev.LocalGID = roce.GIDFromAddr(mad.CMAHeader(ev.PrivateData[:mad.CMAHeaderLen]).DstAddr())
	child, err := id.newChild(dev, ev)
	if err != nil {
		ev.Conn.SIDRReply(mad.SIDRRejected, 0, 0, nil)
		return
	}
	id.post(Event{Type: EventConnectRequest, ID: child.front, Listen: id.front,
		Param: ConnParam{PrivateData: ev.PrivateData[mad.CMAHeaderLen:]}})
}

// acceptUD answers the request with the ID's QP (rdma_accept on a UD ID).
// id.mu is held.
func (id *inprocID) acceptUD(p *ConnParam) error {
	if len(p.PrivateData) > mad.SIDRREPPrivateDataLen {
		return fmt.Errorf("accept: %d bytes of private data: %w", len(p.PrivateData), ErrInvalidArgument)
	}
	if err := id.conn.SIDRReply(mad.SIDRValid, id.qp.QPN(), UDPQKey, p.PrivateData); err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	id.conn, id.state = nil, stateEstablished
	return nil
}
