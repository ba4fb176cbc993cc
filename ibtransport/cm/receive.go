package cm

import (
	"encoding/binary"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// Receive takes one MAD that arrived at QP1; from is the address vector
// that answers its sender (built from its GRH). A MAD that is not a CM
// message this package reads, or that no connection expects, is counted
// and dropped. b is not kept.
func (m *Manager) Receive(from ibv.AddressVector, b []byte) {
	msg, err := mad.Parse(b)
	if err != nil {
		m.counters.countBad(err)
		return
	}
	attr := msg.Header().AttrID()
	m.counters.In.of(attr).Add(1)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	switch attr {
	case mad.AttrREQ:
		m.receiveREQ(from, mad.REQ(msg))
	case mad.AttrMRA:
		m.receiveMRA(mad.MRA(msg))
	case mad.AttrREJ:
		m.receiveREJ(mad.REJ(msg))
	case mad.AttrREP:
		m.receiveREP(mad.REP(msg))
	case mad.AttrRTU:
		m.receiveRTU(mad.RTU(msg))
	case mad.AttrDREQ:
		m.receiveDREQ(from, mad.DREQ(msg))
	case mad.AttrDREP:
		m.receiveDREP(mad.DREP(msg))
	case mad.AttrSIDRREQ:
		m.receiveSIDRREQ(from, mad.SIDRREQ(msg))
	case mad.AttrSIDRREP:
		m.receiveSIDRREP(mad.SIDRREP(msg))
	}
	m.unlockAndSend()
}

// lookup finds the connection a reply is for by the receiver's ID, ours, and
// checks the sender's ID against the one we know, as cm.c's cm_acquire_id.
// Before we learn the peer's ID (an MRA or REJ of our REQ) any matches.
func (m *Manager) lookup(ours, theirs uint32) *Conn {
	c := m.conns[ours]
	if c == nil {
		m.counters.UnknownConn.Add(1)
		return nil
	}
	if c.remoteKnown && c.remoteID != theirs {
		m.counters.IDMismatch.Add(1)
		return nil
	}
	return c
}

// copyData returns a copy of a message's private data for an Event.
func copyData(p []byte) []byte { return append([]byte(nil), p...) }

// receiveMRA extends the wait for our REQ or REP by the service timeout the
// peer asks for plus a packet lifetime (cm.c's cm_mra_handler).
func (m *Manager) receiveMRA(r mad.MRA) {
	c := m.lookup(r.RemoteCommID(), r.LocalCommID())
	if c == nil {
		return
	}
	switch {
	case c.state == StateREQSent && r.MessageMRAed() == mad.MsgREQ:
		c.state = StateMRAREQRcvd
	case c.state == StateREPSent && r.MessageMRAed() == mad.MsgREP:
		c.state = StateMRAREPRcvd
	case c.state == StateMRAREQRcvd || c.state == StateMRAREPRcvd:
		m.counters.Duplicates.Add(1)
		return
	default:
		m.counters.WrongState.Add(1)
		return
	}
	c.wait = m.convert(r.ServiceTimeout()) + m.convert(c.pathTime)
	c.arm(c.wait, c.retry)
	m.post(Event{Type: EventMRAReceived, Conn: c, ServiceTimeout: r.ServiceTimeout(),
		PrivateData: copyData(r.PrivateData())})
}

// receiveREJ ends a connection the peer refuses, as cm.c's cm_rej_handler:
// one being set up is gone (or waits in TIMEWAIT for a stale-connection
// REJ); one that may carry traffic goes to TIMEWAIT.
func (m *Manager) receiveREJ(r mad.REJ) {
	c := m.rejectedConn(r)
	if c == nil {
		return
	}
	switch c.state {
	case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd,
		StateREQRcvd, StateMRAREQSent:
		c.stopTimer()
		if r.Reason() == mad.RejectStaleConn {
			c.enterTimewait()
		} else {
			c.toIdle()
		}
	case StateREPRcvd, StateMRAREPSent, StateEstablished, StateDREQSent:
		c.enterTimewait()
	default:
		m.counters.WrongState.Add(1)
		return
	}
	m.post(Event{Type: EventREJReceived, Conn: c, Reason: r.Reason(),
		MessageRejected: r.MessageRejected(), ARI: copyData(r.ARI()),
		PrivateData: copyData(r.PrivateData())})
}

// rejectedConn finds the connection a REJ is for. A Timeout REJ may come
// before the peer knew our ID: it names the peer's ID and, in its ARI, the
// peer's node GUID (cm.c's cm_acquire_rejected_id).
func (m *Manager) rejectedConn(r mad.REJ) *Conn {
	if r.Reason() == mad.RejectTimeout && len(r.ARI()) >= 8 {
		key := remoteKey{r.LocalCommID(), binary.BigEndian.Uint64(r.ARI())}
		if c := m.remote[key]; c != nil {
			return c
		}
	}
	if r.MessageRejected() == mad.MsgREQ {
		// The peer may not have given itself an ID (it sends 0).
		c := m.conns[r.RemoteCommID()]
		if c == nil {
			m.counters.UnknownConn.Add(1)
		}
		return c
	}
	return m.lookup(r.RemoteCommID(), r.LocalCommID())
}
