package rdmacm

import (
	"fmt"
	"math/rand/v2"

	"github.com/softnic/softnic/ibtransport/cm"
	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// The active side in process: Connect sends a REQ; the REP moves the QP
// to RTS and answers with an RTU (onREP); a REJ or the REQ's retries
// running out end the attempt. An ID without a QP, whose program moves
// its own, gets EventConnectResponse instead and answers with Establish
// (inproc_userqp.go).

// hopLimit is the GRH hop limit (IPv4 TTL) of connections, the kernel's
// default TTL, as rxe's rdma_cm connections carry it.
const hopLimit = 64

// Connect sends the REQ (or for a UD ID the SIDR_REQ, inproc_ud.go).
func (id *inprocID) Connect(p *ConnParam) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.isUD() {
		return id.connectUD(p)
	}
	if id.state != stateRouteResolved || (id.qp == nil && p.QPNum == 0) {
		return fmt.Errorf("connect: %w", ErrState)
	}
	if len(p.PrivateData) > mad.CMAUserDataLen {
		return fmt.Errorf("connect: %d bytes of private data, at most %d: %w", len(p.PrivateData), mad.CMAUserDataLen, ErrInvalidArgument)
	}
	id.param = *p
	id.ourPSN = rand.Uint32() & header.PSNMask
	local, err := id.dev.GID(id.gidIndex)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	req := cm.REQParams{
		Peer:        id.peerAV(),
		LocalGID:    local,
		PeerGID:     id.peerGIDOrAddr(),
		ServiceID:   mad.ServiceID(id.ps, id.peer.Port()),
		LocalQPN:    id.localQPN(p),
		StartingPSN: id.ourPSN,
		// The REQ's resources are the sender's: what it lets the peer
		// issue, and how many it issues itself.
		ResponderResources: p.ResponderResources,
		InitiatorDepth:     p.InitiatorDepth,
		PathMTU:            id.pathMTU(),
		RetryCount:         retryCount(p),
		RNRRetryCount:      p.RNRRetryCount,
		Transport:          id.transport(),
		PrivateData:        id.cmaPrivateData(p.PrivateData),
		HopLimit:           hopLimit,
		TrafficClass:       id.tos,
	}
	conn, err := id.dev.CM().Connect(req, id.onActiveEvent)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	id.conn, id.state = conn, stateConnect
	return nil
}

// peerAV is the address vector of the peer. Called under mu.
func (id *inprocID) peerAV() verbs.AddressVector {
	return verbs.AddressVector{DGID: id.peerGIDOrAddr(), SGIDIndex: uint8(id.gidIndex), HopLimit: hopLimit,
		TrafficClass: id.tos}
}

// peerGIDOrAddr is the GID ResolveAddr found for the peer, or the peer's
// address as one. Called under mu.
func (id *inprocID) peerGIDOrAddr() verbs.GID {
	if id.peerGID != (verbs.GID{}) {
		return id.peerGID
	}
	return roce.GIDFromAddr(id.peer.Addr())
}

// pathMTU is the largest MTU of the device's link. Called under mu.
func (id *inprocID) pathMTU() verbs.MTU { return id.dev.ActiveMTU() }

func retryCount(p *ConnParam) uint8 {
	if p.RetryCount == 0 {
		return defaultRetryCount
	}
	return min(p.RetryCount, 7)
}

// cmaPrivateData is a REQ's private data: the rdma_cm header with both
// addresses and our port, then the caller's. Called under mu.
func (id *inprocID) cmaPrivateData(user []byte) []byte {
	b := make([]byte, mad.CMAHeaderLen+len(user))
	h := mad.CMAHeader(b[:mad.CMAHeaderLen])
	h.SetVersion(mad.CMAVersion)
	ipv := uint8(6)
	if id.local.Addr().Is4() {
		ipv = 4
	}
	h.SetIPVersion(ipv)
	h.SetSrcPort(id.local.Port())
	h.SetAddrs(id.local.Addr(), id.peer.Addr())
	copy(b[mad.CMAHeaderLen:], user)
	return b
}

// onActiveEvent is the IB CM's news of a connection this ID asked for.
func (id *inprocID) onActiveEvent(ev cm.Event) {
	switch ev.Type {
	case cm.EventREPReceived:
		id.onREP(ev)
	case cm.EventREJReceived:
		id.failConnect(Event{Type: EventRejected, Reason: ev.Reason, Param: ConnParam{PrivateData: ev.PrivateData},
			Err: rejectError(ev.Reason)})
	case cm.EventTimeout:
		id.failConnect(Event{Type: EventUnreachable, Err: ErrTimedOut})
	default:
		id.onConnectedEvent(ev)
	}
}

// onREP connects the QP to the replying QP and confirms with an RTU.
func (id *inprocID) onREP(ev cm.Event) {
	id.mu.Lock()
	if id.state != stateConnect {
		id.mu.Unlock()
		return
	}
	p := path{av: id.peerAV(), mtu: id.pathMTU(), destQPN: ev.RemoteQPN, recvPSN: id.ourPSN, sendPSN: ev.StartingPSN,
		responderResources: min(id.param.ResponderResources, ev.InitiatorDepth),
		initiatorDepth:     min(id.param.InitiatorDepth, ev.ResponderResources),
		retryCount:         retryCount(&id.param), rnrRetryCount: ev.RNRRetryCount, ackTimeout: id.qpACKTimeout()}
	id.path = &p
	qp, conn := id.qp, id.conn
	if qp == nil {
		id.state = stateResponded
		id.mu.Unlock()
		id.post(Event{Type: EventConnectResponse, ID: id.front, Param: repParam(&ev)})
		return
	}
	err := toRTS(qp, &p)
	if err == nil {
		id.state = stateEstablished
	}
	id.mu.Unlock()
	if err != nil {
		conn.Reject(mad.RejectConsumer, nil)
		id.failConnect(Event{Type: EventConnectError, Err: err})
		return
	}
	if err := conn.ReadyToUse(nil); err != nil {
		id.failConnect(Event{Type: EventConnectError, Err: err})
		return
	}
	id.post(Event{Type: EventEstablished, ID: id.front, Param: repParam(&ev)})
}

// repParam is what a REP tells the active side.
func repParam(ev *cm.Event) ConnParam {
	return ConnParam{PrivateData: ev.PrivateData, ResponderResources: ev.ResponderResources,
		InitiatorDepth: ev.InitiatorDepth, RNRRetryCount: ev.RNRRetryCount}
}

// failConnect ends a connection attempt: the QP goes to ERR and the ID
// back to the state it could connect from, as librdmacm leaves it.
func (id *inprocID) failConnect(ev Event) {
	id.mu.Lock()
	if id.state == stateDestroying {
		id.mu.Unlock()
		return
	}
	toError(id.qp)
	if id.qp != nil {
		id.dev.OnCommEst(id.qp, nil)
	}
	id.conn, id.path = nil, nil
	id.state = stateRouteResolved
	id.mu.Unlock()
	ev.ID = id.front
	id.post(ev)
}

// transport is the REQ's transport service: XRC for an XRC send QP, RC
// otherwise. Called under mu.
func (id *inprocID) transport() uint8 {
	if id.qp != nil && id.qp.Type() == verbs.QPTypeXRCSend {
		return mad.TransportXRC
	}
	return mad.TransportRC
}
