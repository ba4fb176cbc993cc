package cm

import (
	"fmt"
	"time"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// Service ID resolution (IBA vol 1 12.11, cm.c's SIDR half): the active
// side asks which UD QP serves a service ID with a SIDR_REQ, resent until
// a SIDR_REP answers; the passive side's Listener gets the request as a
// Conn in StateSIDRREQRcvd and answers it with SIDRReply. Nothing is
// connected: the Conn is gone once the answer is sent or received.

// SIDRParams is a service ID resolution request (ResolveService).
type SIDRParams struct {
	Peer        ibv.AddressVector // the peer's QP1
	ServiceID   uint64
	PKey        uint16 // zero: the default partition, 0xffff
	PrivateData []byte // at most mad.SIDRREQPrivateDataLen bytes
	// Timeout is one wait for the SIDR_REP and MaxRetries how often the
	// request is resent; zero: as a REQ's (two packet lifetimes and the
	// CM response timeout, the CM retries).
	Timeout    time.Duration
	MaxRetries uint8
}

// sidrKey names a request as the peer does: its request ID and its GID
// (cm.c's remote_sidr_table).
type sidrKey struct {
	requestID uint32
	gid       ibv.GID
}

// ResolveService sends a SIDR_REQ and starts its retry timer. h gets
// EventSIDRREPReceived with the answer, or EventTimeout.
func (m *Manager) ResolveService(p SIDRParams, h Handler) (*Conn, error) {
	if len(p.PrivateData) > mad.SIDRREQPrivateDataLen {
		return nil, fmt.Errorf("%d bytes of SIDR private data: %w", len(p.PrivateData), ErrParams)
	}
	if p.PKey == 0 {
		p.PKey = 0xffff
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	c := &Conn{m: m, handler: h, active: true, peer: p.Peer, state: StateSIDRREQSent}
	c.localID = m.newLocalID()
	c.tid = m.tid(c.localID)
	c.timeout = p.Timeout
	if c.timeout == 0 {
		c.timeout = 2*m.convert(m.cfg.PacketLifeTime) + m.convert(m.cfg.CMResponseTimeout)
	}
	c.maxRetries = p.MaxRetries
	if c.maxRetries == 0 {
		c.maxRetries = m.cfg.MaxCMRetries
	}
	m.conns[c.localID] = c
	msg := newMAD(mad.AttrSIDRREQ, c.tid)
	r := mad.SIDRREQ(msg)
	r.SetRequestID(c.localID)
	r.SetPKey(p.PKey)
	r.SetServiceID(p.ServiceID)
	r.SetPrivateData(p.PrivateData)
	c.sendWithRetries(msg)
	m.unlockAndSend()
	return c, nil
}

// receiveSIDRREQ gives a request to its service's listener; a request
// seen again while its answer is pending is dropped, one for a service
// nobody listens on is answered "unsupported" (cm.c's cm_sidr_req_handler).
func (m *Manager) receiveSIDRREQ(from ibv.AddressVector, r mad.SIDRREQ) {
	key := sidrKey{r.RequestID(), from.DGID}
	if m.sidrRemote[key] != nil {
		m.counters.Duplicates.Add(1)
		return
	}
	tid := mad.MAD(r).Header().TID()
	l := m.listeners[r.ServiceID()]
	if l == nil {
		m.queue(from, buildSIDRREP(tid, r.RequestID(), r.ServiceID(), mad.SIDRUnsupported, 0, 0, nil))
		return
	}
	c := &Conn{m: m, peer: from, state: StateSIDRREQRcvd, handler: l.handler, tid: tid}
	c.localID = m.newLocalID()
	c.remoteID = r.RequestID()
	c.serviceID = r.ServiceID()
	c.sidrKey, c.sidrKnown = key, true
	m.conns[c.localID] = c
	m.sidrRemote[key] = c
	m.post(Event{Type: EventSIDRREQReceived, Conn: c, Listener: l, ServiceID: r.ServiceID(), PKey: r.PKey(),
		Peer: from, PeerGID: from.DGID, PrivateData: copyData(r.PrivateData())})
}

// receiveSIDRREP takes the answer to our request.
func (m *Manager) receiveSIDRREP(r mad.SIDRREP) {
	c := m.conns[r.RequestID()]
	if c == nil || c.state != StateSIDRREQSent {
		m.counters.UnknownConn.Add(1)
		return
	}
	c.toIdle()
	m.post(Event{Type: EventSIDRREPReceived, Conn: c, ServiceID: r.ServiceID(), SIDRStatus: r.Status(),
		RemoteQPN: r.QPN(), QKey: r.QKey(), PrivateData: copyData(r.PrivateData())})
}

// SIDRReply answers a request (EventSIDRREQReceived): with SIDRValid, the
// UD QP qpn and its Q_Key serve it; any other status refuses it. The Conn
// is then gone.
func (c *Conn) SIDRReply(status mad.SIDRStatus, qpn, qkey uint32, privateData []byte) error {
	if len(privateData) > mad.SIDRREPPrivateDataLen {
		return fmt.Errorf("%d bytes of SIDR_REP private data: %w", len(privateData), ErrParams)
	}
	return c.do(func(m *Manager) error {
		if c.state != StateSIDRREQRcvd {
			return ErrState
		}
		m.queue(c.peer, buildSIDRREP(c.tid, c.remoteID, c.serviceID, status, qpn, qkey, privateData))
		c.toIdle()
		return nil
	})
}

// buildSIDRREP makes a SIDR_REP as cm.c's cm_format_sidr_rep does.
func buildSIDRREP(tid uint64, requestID uint32, serviceID uint64, status mad.SIDRStatus, qpn, qkey uint32,
	privateData []byte) mad.MAD {
	msg := newMAD(mad.AttrSIDRREP, tid)
	r := mad.SIDRREP(msg)
	r.SetRequestID(requestID)
	r.SetStatus(status)
	r.SetServiceID(serviceID)
	if status == mad.SIDRValid {
		r.SetQPN(qpn)
		r.SetQKey(qkey)
	}
	r.SetPrivateData(privateData)
	return msg
}
