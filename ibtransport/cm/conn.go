package cm

import (
	"time"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// Conn is one connection's CM state, on either side.
type Conn struct {
	m       *Manager
	handler Handler
	active  bool // we sent the REQ

	// All below is guarded by m.mu.
	state       State
	destroyed   bool // Destroy was called: no more events
	localID     uint32
	remoteID    uint32
	remoteGUID  uint64
	remoteKnown bool // remoteID and remoteGUID are set and in m.remote
	peer        ibv.AddressVector
	tid         uint64 // of the REQ, carried by REP, RTU, MRA and REJ
	localQPN    uint32
	remoteQPN   uint32
	serviceID   uint64  // a SIDR request's
	sidrKey     sidrKey // a received SIDR request's name, in m.sidrRemote
	sidrKnown   bool

	// Timing, from the REQ (cm.c's timeout_ms, max_cm_retries, av.timeout).
	timeout time.Duration // one wait for an answer
	// wait is the pending message's wait: timeout, or longer once an MRA
	// asked for more (cm.c changes the MAD's timeout, not the ID's, so
	// a later DREQ waits timeout again).
	wait       time.Duration
	maxRetries uint8
	pathTime   uint8 // exponent of the TIMEWAIT and of the MRA's extra wait

	pending     mad.MAD // the REQ, REP or DREQ being retried
	retriesLeft uint8
	reply       mad.MAD // our last MRA, RTU or DREP, resent to a duplicate
	timer       *time.Timer
	timerGen    uint64
}

// LocalID returns our communication ID for the connection.
func (c *Conn) LocalID() uint32 { return c.localID }

// RemoteID returns the peer's communication ID, 0 until it is known.
func (c *Conn) RemoteID() uint32 {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.remoteID
}

// State returns the connection's current state.
func (c *Conn) State() State {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.state
}

// SetHandler sends the connection's later events to h; a passive Conn
// starts with its Listener's handler.
func (c *Conn) SetHandler(h Handler) {
	c.m.mu.Lock()
	c.handler = h
	c.m.mu.Unlock()
}

func (c *Conn) remoteKey() remoteKey { return remoteKey{c.remoteID, c.remoteGUID} }

// Connect sends a REQ and starts its retry timer; h gets the connection's
// events.
func (m *Manager) Connect(p REQParams, h Handler) (*Conn, error) {
	p = p.withDefaults(&m.cfg)
	if err := p.check(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	c := &Conn{m: m, handler: h, active: true, peer: p.Peer, localQPN: p.LocalQPN}
	c.localID = m.newLocalID()
	c.tid = m.tid(c.localID)
	// cm.c's ib_send_cm_req: two packet lifetimes and the peer's response.
	c.timeout = 2*m.convert(p.PacketLifeTime) + m.convert(p.RemoteCMResponseTimeout)
	c.maxRetries = p.MaxCMRetries
	c.pathTime = p.PacketLifeTime + 1 // cm_init_av_by_path's av.timeout
	m.conns[c.localID] = c
	c.state = StateREQSent
	c.sendWithRetries(m.buildREQ(c, &p))
	m.unlockAndSend()
	return c, nil
}

// Accept answers the REQ with a REP and waits for the RTU, resending the
// REP until it comes (or Established is called).
func (c *Conn) Accept(p REPParams) error {
	if err := p.check(); err != nil {
		return err
	}
	return c.do(func(m *Manager) error {
		if c.state != StateREQRcvd && c.state != StateMRAREQSent {
			return ErrState
		}
		c.localQPN = p.LocalQPN
		c.reply = nil
		c.state = StateREPSent
		c.sendWithRetries(m.buildREP(c, &p))
		return nil
	})
}

// Reject sends a REJ. Before the connection is up it is then gone; once
// the REP is out it goes through TIMEWAIT, as in cm.c.
func (c *Conn) Reject(reason mad.RejectReason, privateData []byte) error {
	if len(privateData) > mad.REJPrivateDataLen {
		return ErrParams
	}
	return c.do(func(m *Manager) error {
		switch c.state {
		case StateREQSent, StateMRAREQRcvd, StateREQRcvd, StateMRAREQSent,
			StateREPRcvd, StateMRAREPSent:
			m.queue(c.peer, m.buildREJ(c, reason, nil, privateData))
			c.toIdle()
		case StateREPSent, StateMRAREPRcvd:
			m.queue(c.peer, m.buildREJ(c, reason, nil, privateData))
			c.enterTimewait()
		default:
			return ErrState
		}
		return nil
	})
}

// MRA tells the peer we need 4.096 µs × 2^serviceTimeout longer to answer
// its REQ (or REP); duplicates of that message get the MRA again.
func (c *Conn) MRA(serviceTimeout uint8, privateData []byte) error {
	return c.mra(serviceTimeout, privateData, true)
}

// DelayMRA prepares the MRA without sending it (cm.c's
// IB_CM_MRA_FLAG_DELAY): only a duplicate of the REQ or REP, the peer's
// sign that it is about to give up waiting, gets it.
func (c *Conn) DelayMRA(serviceTimeout uint8, privateData []byte) error {
	return c.mra(serviceTimeout, privateData, false)
}

func (c *Conn) mra(serviceTimeout uint8, privateData []byte, now bool) error {
	if len(privateData) > mad.MRAPrivateDataLen || serviceTimeout > 31 {
		return ErrParams
	}
	return c.do(func(m *Manager) error {
		var what uint8
		switch c.state {
		case StateREQRcvd:
			what, c.state = mad.MsgREQ, StateMRAREQSent
		case StateREPRcvd:
			what, c.state = mad.MsgREP, StateMRAREPSent
		default:
			return ErrState
		}
		c.reply = m.buildMRA(c, what, serviceTimeout, privateData)
		if now {
			m.queue(c.peer, c.reply)
		}
		return nil
	})
}

// ReadyToUse sends the RTU after EventREPReceived (the caller has moved its
// QP to RTS): the active side is established.
func (c *Conn) ReadyToUse(privateData []byte) error {
	if len(privateData) > mad.RTUPrivateDataLen {
		return ErrParams
	}
	return c.do(func(m *Manager) error {
		if c.state != StateREPRcvd && c.state != StateMRAREPSent {
			return ErrState
		}
		c.reply = m.buildRTU(c, privateData)
		m.queue(c.peer, c.reply)
		c.state = StateEstablished
		return nil
	})
}

// Established makes the passive side established before the RTU, because
// its QP already received data (IB's communication established event);
// EventEstablished follows and a late RTU is dropped as a duplicate.
func (c *Conn) Established() {
	_ = c.do(func(m *Manager) error {
		if !c.state.waitingForRTU() {
			return ErrState
		}
		c.stopTimer()
		c.pending = nil
		c.state = StateEstablished
		m.post(Event{Type: EventEstablished, Conn: c})
		return nil
	})
}

// Disconnect sends a DREQ and resends it until a DREP comes; then, or when
// the retries run out, EventDisconnected and TIMEWAIT follow.
func (c *Conn) Disconnect(privateData []byte) error {
	if len(privateData) > mad.DREQPrivateDataLen {
		return ErrParams
	}
	return c.do(func(m *Manager) error {
		if c.state != StateEstablished {
			return ErrState
		}
		c.state = StateDREQSent
		c.sendWithRetries(m.buildDREQ(c, privateData))
		return nil
	})
}

// Destroy ends the connection at once and silences its events, leaving the
// peer told as cm.c's ib_destroy_cm_id does: an outstanding REQ is rejected
// with Timeout, an unanswered REQ or REP with a consumer REJ, an
// established connection gets one DREQ. A connection that was connected
// stays in TIMEWAIT, silently, to answer the peer's duplicates.
func (c *Conn) Destroy() {
	_ = c.do(func(m *Manager) error {
		c.destroyed = true
		switch c.state {
		case StateREQSent, StateMRAREQRcvd:
			guid := guidBytes(m.cfg.CAGUID)
			m.queue(c.peer, m.buildREJ(c, mad.RejectTimeout, guid[:], nil))
			c.toIdle()
		case StateREPSent, StateMRAREPRcvd:
			m.queue(c.peer, m.buildREJ(c, mad.RejectConsumer, nil, nil))
			c.enterTimewait()
		case StateREQRcvd, StateMRAREQSent, StateREPRcvd, StateMRAREPSent:
			m.queue(c.peer, m.buildREJ(c, mad.RejectConsumer, nil, nil))
			c.toIdle()
		case StateEstablished:
			m.queue(c.peer, m.buildDREQ(c, nil))
			c.enterTimewait()
		case StateDREQSent, StateDREQRcvd:
			c.enterTimewait()
		case StateSIDRREQRcvd:
			// cm.c's cm_reject_sidr_req: the consumer will not answer.
			m.queue(c.peer, buildSIDRREP(c.tid, c.remoteID, c.serviceID, mad.SIDRRejected, 0, 0, nil))
			c.toIdle()
		case StateTimewait:
		default:
			c.toIdle()
		}
		return nil
	})
}

// Drop forgets a connection whose REQ the consumer has no room for,
// sending nothing, as cm.c does when the REQ's handler answers ENOMEM
// (cm_destroy_id's "do not reject to allow future retries"): the peer's
// next retransmission of the REQ is a new request. Only a REQ not yet
// answered can be dropped (ErrState otherwise).
func (c *Conn) Drop() error {
	return c.do(func(m *Manager) error {
		if c.state != StateREQRcvd {
			return ErrState
		}
		c.destroyed = true
		c.toIdle()
		return nil
	})
}

// do runs f with mu held, then sends what it queued.
func (c *Conn) do(f func(m *Manager) error) error {
	m := c.m
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	err := f(m)
	m.unlockAndSend()
	return err
}

// sendWithRetries sends msg and resends it each c.wait until an answer
// stops the timer or c.maxRetries resends are spent.
func (c *Conn) sendWithRetries(msg mad.MAD) {
	c.pending = msg
	c.retriesLeft = c.maxRetries
	c.wait = c.timeout
	c.m.queue(c.peer, msg)
	c.arm(c.wait, c.retry)
}

// retry is the timer of an unanswered REQ, REP or DREQ.
func (c *Conn) retry() {
	m := c.m
	if c.retriesLeft == 0 {
		c.expire()
		return
	}
	c.retriesLeft--
	m.counters.Retransmissions.Add(1)
	m.queue(c.peer, c.pending)
	c.arm(c.wait, c.retry)
}

// expire ends the wait whose retries ran out, as cm.c's
// cm_process_send_error: the handshake fails, a disconnect completes. A
// failed handshake also sends REJ Timeout, as IBA's state diagram (fig. 151)
// does and cm.c leaves out, so a peer that did get our messages drops its
// half of the connection; the ARI names our node GUID, by which the peer
// finds the connection when it has no ID of ours yet.
func (c *Conn) expire() {
	m := c.m
	m.counters.Timeouts.Add(1)
	c.pending = nil
	switch {
	case c.state.waitingForREP(), c.state.waitingForRTU():
		guid := guidBytes(m.cfg.CAGUID)
		m.queue(c.peer, m.buildREJ(c, mad.RejectTimeout, guid[:], nil))
		c.toIdle()
		m.post(Event{Type: EventTimeout, Conn: c})
	case c.state == StateDREQSent:
		c.enterTimewait()
		m.post(Event{Type: EventDisconnected, Conn: c, TimedOut: true})
	case c.state == StateSIDRREQSent:
		c.toIdle()
		m.post(Event{Type: EventTimeout, Conn: c})
	}
}

// toIdle ends the connection without TIMEWAIT.
func (c *Conn) toIdle() {
	c.state = StateIdle
	c.pending, c.reply = nil, nil
	c.m.forget(c)
}

// enterTimewait waits out the packets that may still be in flight before the
// communication ID can be reused, cm.c's cm_enter_timewait; the connection
// keeps its table entries meanwhile so duplicates are answered.
func (c *Conn) enterTimewait() {
	c.state = StateTimewait
	c.pending = nil
	c.arm(c.m.convert(c.pathTime), c.timewaitExit)
}

func (c *Conn) timewaitExit() {
	c.state = StateIdle
	c.reply = nil
	c.m.forget(c)
	c.m.post(Event{Type: EventTimewaitExit, Conn: c})
}
