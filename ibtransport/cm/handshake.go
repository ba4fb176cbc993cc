package cm

import (
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// receiveREQ takes a new connection to a listener, answers a duplicate as
// its connection's state says, or rejects what nobody can take.
func (m *Manager) receiveREQ(from ibv.AddressVector, r mad.REQ) {
	if c := m.remote[remoteKey{r.LocalCommID(), r.LocalCAGUID()}]; c != nil {
		m.duplicateREQ(c)
		return
	}
	if reason, ok := unacceptable(r); !ok {
		m.queue(from, rejectUnknownREQ(r, reason))
		return
	}
	l := m.listeners[r.ServiceID()]
	if l == nil {
		m.queue(from, rejectUnknownREQ(r, mad.RejectInvalidServiceID))
		return
	}
	c := m.passiveConn(from, r)
	c.handler = l.handler
	m.post(reqEvent(c, l, from, r))
}

// unacceptable returns why a REQ cannot be taken whatever its service: a
// transport other than RC, UC or XRC (RD), or no valid path MTU.
func unacceptable(r mad.REQ) (mad.RejectReason, bool) {
	t, ext := r.TransportServiceType(), r.ExtendedTransportType()
	xrc := t == mad.TransportXRC && ext == mad.ExtendedTransportXRC
	if (t != mad.TransportRC && t != mad.TransportUC && !xrc) || (ext != 0 && !xrc) {
		return mad.RejectInvalidTransportType, false
	}
	if mtu := r.PathMTU(); mtu < ibv.MTU256 || mtu > ibv.MTU4096 {
		return mad.RejectInvalidMTU, false
	}
	return 0, true
}

// duplicateREQ answers a REQ seen again (cm.c's cm_dup_req_handler, plus a
// resent REP while the REP is unanswered, which cm.c leaves to its retry
// timer): the connection's last MRA or REP, or a stale-connection REJ from
// TIMEWAIT. A REQ still before the consumer is dropped.
func (m *Manager) duplicateREQ(c *Conn) {
	m.counters.Duplicates.Add(1)
	switch c.state {
	case StateMRAREQSent:
		m.queue(c.peer, c.reply)
	case StateREPSent, StateMRAREPRcvd:
		m.queue(c.peer, c.pending)
	case StateTimewait:
		m.queue(c.peer, m.buildREJ(c, mad.RejectStaleConn, nil, nil))
	}
}

// passiveConn makes the connection a REQ asks for, timed as cm.c's
// cm_req_handler: the REP waits for the REQ's local CM response timeout,
// TIMEWAIT lasts as the path's local ACK timeout.
func (m *Manager) passiveConn(from ibv.AddressVector, r mad.REQ) *Conn {
	c := &Conn{m: m, peer: from, state: StateREQRcvd}
	c.localID = m.newLocalID()
	c.remoteID, c.remoteGUID, c.remoteKnown = r.LocalCommID(), r.LocalCAGUID(), true
	c.tid = mad.MAD(r).Header().TID()
	c.remoteQPN = r.LocalQPN()
	c.timeout = m.convert(r.LocalCMResponseTimeout())
	c.maxRetries = r.MaxCMRetries()
	c.pathTime = r.PrimaryPath().LocalACKTimeout()
	m.conns[c.localID] = c
	m.remote[c.remoteKey()] = c
	return c
}

// reqEvent copies out what the consumer needs of a REQ.
func reqEvent(c *Conn, l *Listener, from ibv.AddressVector, r mad.REQ) Event {
	p := r.PrimaryPath()
	return Event{
		Type: EventREQReceived, Conn: c, Listener: l,
		ServiceID: r.ServiceID(), Transport: r.TransportServiceType(),
		PathMTU: r.PathMTU(), RetryCount: r.RetryCount(), PKey: r.PKey(),
		LocalACKTimeout:         p.LocalACKTimeout(),
		RemoteCMResponseTimeout: r.RemoteCMResponseTimeout(),
		LocalCMResponseTimeout:  r.LocalCMResponseTimeout(),
		MaxCMRetries:            r.MaxCMRetries(),
		Peer:                    from, PeerGID: p.LocalGID(), LocalGID: p.RemoteGID(),
		FlowLabel: p.FlowLabel(), TrafficClass: p.TrafficClass(), HopLimit: p.HopLimit(),
		EndToEndFlowControl: r.EndToEndFlowControl(), SRQ: r.SRQ(),
		RemoteCAGUID: r.LocalCAGUID(), RemoteQPN: r.LocalQPN(),
		StartingPSN: r.StartingPSN(), ResponderResources: r.ResponderResources(),
		InitiatorDepth: r.InitiatorDepth(), RNRRetryCount: r.RNRRetryCount(),
		PrivateData: copyData(r.PrivateData()),
	}
}

// receiveREP takes the answer to our REQ, or answers a duplicate with our
// RTU or MRA (cm.c's cm_rep_handler and cm_dup_rep_handler).
func (m *Manager) receiveREP(r mad.REP) {
	c := m.lookup(r.RemoteCommID(), r.LocalCommID())
	if c == nil || !c.active {
		if c != nil {
			m.counters.WrongState.Add(1)
		}
		return
	}
	switch {
	case c.state.waitingForREP():
	case c.state == StateEstablished || c.state == StateMRAREPSent:
		m.counters.Duplicates.Add(1)
		m.queue(c.peer, c.reply)
		return
	case c.state == StateREPRcvd:
		m.counters.Duplicates.Add(1)
		return
	default:
		m.counters.WrongState.Add(1)
		return
	}
	key := remoteKey{r.LocalCommID(), r.LocalCAGUID()}
	if other := m.remote[key]; other != nil {
		// The peer reuses an ID we still hold: a stale connection.
		m.counters.IDMismatch.Add(1)
		return
	}
	c.stopTimer()
	c.pending = nil
	c.remoteID, c.remoteGUID, c.remoteKnown = key.commID, key.caGUID, true
	m.remote[key] = c
	c.remoteQPN = r.LocalQPN()
	c.state = StateREPRcvd
	m.post(Event{Type: EventREPReceived, Conn: c, RemoteQPN: r.LocalQPN(),
		StartingPSN: r.StartingPSN(), ResponderResources: r.ResponderResources(),
		InitiatorDepth: r.InitiatorDepth(), TargetACKDelay: r.TargetACKDelay(),
		FailoverAccepted: r.FailoverAccepted(), EndToEndFlowControl: r.EndToEndFlowControl(),
		RNRRetryCount: r.RNRRetryCount(), SRQ: r.SRQ(), RemoteCAGUID: r.LocalCAGUID(),
		PrivateData: copyData(r.PrivateData())})
}

// receiveRTU establishes the passive side.
func (m *Manager) receiveRTU(r mad.RTU) {
	c := m.lookup(r.RemoteCommID(), r.LocalCommID())
	if c == nil {
		return
	}
	if !c.state.waitingForRTU() || c.active {
		// A late RTU (after Established, or crossing our DREQ) is a
		// duplicate to cm.c's cm_rtu_handler too.
		m.counters.Duplicates.Add(1)
		return
	}
	c.stopTimer()
	c.pending = nil
	c.state = StateEstablished
	m.post(Event{Type: EventRTUReceived, Conn: c, PrivateData: copyData(r.PrivateData())})
}
