package cm

import (
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// Errors of the Manager and its connections.
var (
	ErrServiceInUse = errors.New("cm: service ID already has a listener")
	ErrClosed       = errors.New("cm: manager closed")
	ErrState        = errors.New("cm: connection is in no state for that")
	ErrParams       = errors.New("cm: invalid connection parameters")
)

// Linux's timing: cma.c asks for a CM response timeout of 20 (4.3 s) and 15
// CM retries; on RoCE it assumes a packet lifetime of 18 (1.07 s), which is
// what makes rxe's REQ carry a local ACK timeout of 19 with an ACK delay of
// 15 (see roce/testdata/rxe-rping.pcap).
const (
	DefaultCMResponseTimeout = 20
	DefaultMaxCMRetries      = 15
	DefaultPacketLifeTime    = 18
	DefaultACKDelay          = 15
)

// Config sets up a Manager.
type Config struct {
	// Send sends one 256-byte CM MAD to QP1 at to. It is called with no
	// lock of the Manager held; it must not block long and must not change
	// or keep m after it returns.
	Send func(to ibv.AddressVector, m mad.MAD) error
	// CAGUID is this device's node GUID, sent in REQs and REPs.
	CAGUID uint64

	// Millisecond is how long one millisecond of cm.c's timeouts lasts
	// (cm.c turns the exponent t of 4.096 µs × 2^t into 2^(t-8) ms).
	// Zero: time.Millisecond. Tests shrink it to run the timers fast.
	Millisecond time.Duration
	// ACKDelay is the device's ACK delay exponent (the REP's target ACK
	// delay, and part of the REQ's local ACK timeout). Zero: 15, as rxe.
	ACKDelay uint8
	// Defaults for REQParams fields left zero.
	CMResponseTimeout, MaxCMRetries, PacketLifeTime uint8
}

// Manager runs the CM protocol for one device.
type Manager struct {
	cfg      Config
	counters Counters
	tidHigh  uint64 // upper half of our transaction IDs, as mad.c's hi_tid

	mu     sync.Mutex
	closed bool
	conns  map[uint32]*Conn    // every live connection, by local comm ID
	remote map[remoteKey]*Conn // connections whose peer ID we know
	// SIDR requests received and not answered yet, by the peer's name
	sidrRemote map[sidrKey]*Conn
	listeners  map[uint64]*Listener
	outbox     []outgoing // MADs to send once mu is released
	timers     sync.WaitGroup

	events     []queuedEvent // to the dispatch goroutine, under mu
	wake       chan struct{}
	dispatched chan struct{} // closed when the dispatch goroutine ends
}

// remoteKey names a connection as its peer does: the peer's communication
// ID and node GUID (cm.c's remote_id table).
type remoteKey struct {
	commID uint32
	caGUID uint64
}

type outgoing struct {
	to ibv.AddressVector
	m  mad.MAD
}

type queuedEvent struct {
	ev Event
}

// New returns a running Manager; Close stops it.
func New(cfg Config) *Manager {
	if cfg.Millisecond == 0 {
		cfg.Millisecond = time.Millisecond
	}
	if cfg.ACKDelay == 0 {
		cfg.ACKDelay = DefaultACKDelay
	}
	if cfg.CMResponseTimeout == 0 {
		cfg.CMResponseTimeout = DefaultCMResponseTimeout
	}
	if cfg.MaxCMRetries == 0 {
		cfg.MaxCMRetries = DefaultMaxCMRetries
	}
	if cfg.PacketLifeTime == 0 {
		cfg.PacketLifeTime = DefaultPacketLifeTime
	}
	m := &Manager{
		cfg:        cfg,
		tidHigh:    uint64(rand.Uint32()) << 32,
		conns:      make(map[uint32]*Conn),
		remote:     make(map[remoteKey]*Conn),
		sidrRemote: make(map[sidrKey]*Conn),
		listeners:  make(map[uint64]*Listener),
		wake:       make(chan struct{}, 1),
		dispatched: make(chan struct{}),
	}
	go m.dispatch()
	return m
}

// Counters returns the Manager's statistics.
func (m *Manager) Counters() *Counters { return &m.counters }

// Conns returns how many connections the manager knows, those in TIMEWAIT
// included (for statistics and leak checks).
func (m *Manager) Conns() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.conns)
}

// Close stops every timer and the dispatch goroutine and forgets every
// connection, sending nothing. Events not yet delivered are dropped. It must
// not be called from a Handler.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	for _, c := range m.conns {
		c.stopTimer()
		c.state = StateIdle
	}
	clear(m.conns)
	clear(m.remote)
	clear(m.sidrRemote)
	clear(m.listeners)
	m.outbox, m.events = nil, nil
	m.mu.Unlock()
	m.signal()
	m.timers.Wait()
	<-m.dispatched
}

// convert turns an IBA time exponent into a duration as cm.c's
// cm_convert_to_ms does: 4.096 µs × 2^t is about 2^(t-8) ms.
func (m *Manager) convert(t uint8) time.Duration {
	if t > 31 {
		t = 31
	}
	shift := max(int(t)-8, 0)
	return m.cfg.Millisecond << shift
}

// queue hands a MAD to the outbox; the caller holds mu and sends it with
// unlockAndSend.
func (m *Manager) queue(to ibv.AddressVector, msg mad.MAD) {
	m.outbox = append(m.outbox, outgoing{to, msg})
}

// unlockAndSend releases mu and then sends what the locked section queued,
// so that Send may deliver straight into a peer Manager that answers at once.
func (m *Manager) unlockAndSend() {
	out := m.outbox
	m.outbox = nil
	m.mu.Unlock()
	for _, o := range out {
		m.counters.Out.of(mad.MAD(o.m).Header().AttrID()).Add(1)
		if o.m.Header().AttrID() == mad.AttrREJ {
			m.counters.RejectsSent.Add(1)
		}
		if err := m.cfg.Send(o.to, o.m); err != nil {
			m.counters.SendErrors.Add(1)
		}
	}
}

// tid returns a new transaction ID for a request of connection id, made as
// cm.c's cm_form_tid makes it.
func (m *Manager) tid(id uint32) uint64 { return m.tidHigh | uint64(id) }

// newLocalID returns a random communication ID no live connection has.
// Zero is kept out: a REJ of an unknown REQ carries it as "none".
func (m *Manager) newLocalID() uint32 {
	for {
		id := rand.Uint32()
		if _, taken := m.conns[id]; id != 0 && !taken {
			return id
		}
	}
}

// forget removes c from the tables; the caller holds mu.
func (m *Manager) forget(c *Conn) {
	c.stopTimer()
	if m.conns[c.localID] == c {
		delete(m.conns, c.localID)
	}
	if c.remoteKnown && m.remote[c.remoteKey()] == c {
		delete(m.remote, c.remoteKey())
	}
	if c.sidrKnown && m.sidrRemote[c.sidrKey] == c {
		delete(m.sidrRemote, c.sidrKey)
	}
}

// Listener receives the REQs for one service ID.
type Listener struct {
	m         *Manager
	serviceID uint64
	handler   Handler
}

// Listen routes REQs for serviceID to h, each with a new Conn.
func (m *Manager) Listen(serviceID uint64, h Handler) (*Listener, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if _, taken := m.listeners[serviceID]; taken {
		return nil, ErrServiceInUse
	}
	l := &Listener{m: m, serviceID: serviceID, handler: h}
	m.listeners[serviceID] = l
	return l, nil
}

// ServiceID returns the service the listener takes REQs for.
func (l *Listener) ServiceID() uint64 { return l.serviceID }

// Close stops taking REQs; later ones get REJ invalid service ID.
// Connections already made are left alone.
func (l *Listener) Close() {
	l.m.mu.Lock()
	if l.m.listeners[l.serviceID] == l {
		delete(l.m.listeners, l.serviceID)
	}
	l.m.mu.Unlock()
}
