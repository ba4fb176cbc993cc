package cm

import (
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// receiveDREQ takes the peer's disconnect: DREP at once, then TIMEWAIT.
// A DREQ for no connection of ours still gets a DREP, so that the peer
// stops resending it (cm.c's cm_issue_drep).
func (m *Manager) receiveDREQ(from ibv.AddressVector, r mad.DREQ) {
	tid := mad.MAD(r).Header().TID()
	c := m.conns[r.RemoteCommID()]
	if c == nil || !c.remoteKnown || c.remoteID != r.LocalCommID() {
		// Not a connection of ours, as cm_acquire_id sees it.
		m.counters.UnknownConn.Add(1)
		m.queue(from, buildDREP(tid, r.RemoteCommID(), r.LocalCommID()))
		return
	}
	if c.localQPN != r.RemoteQPN() {
		m.counters.IDMismatch.Add(1)
		return
	}
	switch {
	case c.state.connected():
	case c.state == StateTimewait:
		// Our DREP was lost, or the DREQs crossed: answer again.
		m.counters.Duplicates.Add(1)
		m.queue(c.peer, buildDREP(tid, c.localID, c.remoteID))
		return
	default:
		m.counters.WrongState.Add(1)
		return
	}
	c.stopTimer()
	c.state = StateDREQRcvd
	m.queue(c.peer, buildDREP(tid, c.localID, c.remoteID))
	c.enterTimewait()
	m.post(Event{Type: EventDREQReceived, Conn: c, PrivateData: copyData(r.PrivateData())})
}

// receiveDREP completes our disconnect.
func (m *Manager) receiveDREP(r mad.DREP) {
	c := m.lookup(r.RemoteCommID(), r.LocalCommID())
	if c == nil {
		return
	}
	if c.state != StateDREQSent {
		if c.state == StateTimewait {
			m.counters.Duplicates.Add(1)
		} else {
			m.counters.WrongState.Add(1)
		}
		return
	}
	c.enterTimewait()
	m.post(Event{Type: EventDisconnected, Conn: c, PrivateData: copyData(r.PrivateData())})
}
