package cm

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// testMillisecond makes cm.c's timeouts 20 times shorter: the REQ waits
// (2×2^10 + 2^12) × 50 µs = 307 ms, the REP 205 ms, TIMEWAIT 102 ms; long
// enough that a loaded machine causes no retransmission the tests do not
// expect. fastMillisecond, 5 times shorter still, is for the tests that run
// through many waits and count no exact retransmissions of the wire's
// delivery.
const (
	testMillisecond = 50 * time.Microsecond
	fastMillisecond = 10 * time.Microsecond
)

// verdict is what the wire does with one MAD.
type verdict uint8

const (
	deliver verdict = iota
	drop
	duplicate // deliver twice
	hold      // deliver after the next MAD on the same wire
)

// sent is one MAD on the wire, as it left its sender.
type sent struct {
	from int // 0: side a, 1: side b
	msg  mad.MAD
}

// wire joins two Managers: Send queues the MAD, a pump goroutine delivers it
// to the other side's Receive, through filter.
type wire struct {
	mu      sync.Mutex
	filter  func(s sent, nth int) verdict // nth: how many of this attribute from this side before
	seen    map[[2]int]int
	log     []sent
	queue   []sent
	held    []sent
	wake    chan struct{}
	done    chan struct{}
	ends    [2]*Manager
	gids    [2]ibv.GID
	stopped sync.WaitGroup
}

func newWire() *wire {
	w := &wire{seen: map[[2]int]int{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	w.gids[0] = ibv.GID{0: 0xfe, 0x80, 15: 1}
	w.gids[1] = ibv.GID{0: 0xfe, 0x80, 15: 2}
	return w
}

func (w *wire) send(from int, m mad.MAD) error {
	cp := append(mad.MAD(nil), m...)
	w.mu.Lock()
	defer w.mu.Unlock()
	s := sent{from, cp}
	w.log = append(w.log, s)
	key := [2]int{from, int(cp.Header().AttrID())}
	nth := w.seen[key]
	w.seen[key]++
	v := deliver
	if w.filter != nil {
		v = w.filter(s, nth)
	}
	switch v {
	case drop:
		return nil
	case hold:
		w.held = append(w.held, s)
		return nil
	case duplicate:
		w.queue = append(w.queue, s)
	}
	w.queue = append(w.queue, s)
	w.queue = append(w.queue, w.held...)
	w.held = nil
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return nil
}

func (w *wire) pump() {
	defer w.stopped.Done()
	for {
		select {
		case <-w.done:
			return
		case <-w.wake:
		}
		for {
			w.mu.Lock()
			if len(w.queue) == 0 {
				w.mu.Unlock()
				break
			}
			s := w.queue[0]
			w.queue = w.queue[1:]
			w.mu.Unlock()
			to := 1 - s.from
			w.ends[to].Receive(ibv.AddressVector{DGID: w.gids[s.from], HopLimit: 64}, s.msg)
		}
	}
}

func (w *wire) setFilter(f func(s sent, nth int) verdict) {
	w.mu.Lock()
	w.filter = f
	w.mu.Unlock()
}

// sentBy returns the MADs side from sent with attribute a, in order.
func (w *wire) sentBy(from int, a mad.AttrID) []mad.MAD {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []mad.MAD
	for _, s := range w.log {
		if s.from == from && s.msg.Header().AttrID() == a {
			out = append(out, s.msg)
		}
	}
	return out
}

// pair is two Managers on a wire, a the active side and b the passive.
type pair struct {
	w    *wire
	a, b *Manager
	aEv  chan Event // events of a's connections
	bEv  chan Event // events of b's listener and connections
	l    *Listener
}

const (
	guidA     = 0x0002c9fffe000001
	guidB     = 0x0002c9fffe000002
	testSvcID = 0x0106<<16 | 7174
)

func newPair(t *testing.T) *pair { return newScaledPair(t, testMillisecond) }

func newScaledPair(t *testing.T, ms time.Duration) *pair {
	t.Helper()
	p := &pair{w: newWire(), aEv: make(chan Event, 1024), bEv: make(chan Event, 1024)}
	p.a = New(Config{CAGUID: guidA, Millisecond: ms,
		Send: func(_ ibv.AddressVector, m mad.MAD) error { return p.w.send(0, m) }})
	p.b = New(Config{CAGUID: guidB, Millisecond: ms,
		Send: func(_ ibv.AddressVector, m mad.MAD) error { return p.w.send(1, m) }})
	p.w.ends = [2]*Manager{p.a, p.b}
	p.w.stopped.Add(1)
	go p.w.pump()
	l, err := p.b.Listen(testSvcID, func(e Event) { p.bEv <- e })
	require.NoError(t, err)
	p.l = l
	t.Cleanup(p.close)
	return p
}

func (p *pair) close() {
	p.a.Close()
	p.b.Close()
	select {
	case <-p.w.done:
	default:
		close(p.w.done)
	}
	p.w.stopped.Wait()
}

// reqParams are rping's, as in roce/testdata/rxe-rping.pcap.
func (p *pair) reqParams() REQParams {
	pd := make([]byte, 56)
	for i := range pd {
		pd[i] = byte(i + 1)
	}
	return REQParams{
		Peer:     ibv.AddressVector{DGID: p.w.gids[1], HopLimit: 64},
		LocalGID: p.w.gids[0], PeerGID: p.w.gids[1], ServiceID: testSvcID,
		LocalQPN: 0x11, StartingPSN: 0xabcdef, ResponderResources: 1, InitiatorDepth: 2,
		PathMTU: ibv.MTU1024, RetryCount: 7, RNRRetryCount: 6,
		Transport: mad.TransportRC, PrivateData: pd,
		TrafficClass: 0x20, HopLimit: 64, FlowLabel: 0xc675e,
	}
}

func repParams() REPParams {
	return REPParams{LocalQPN: 0x12, StartingPSN: 0x123456, ResponderResources: 2,
		InitiatorDepth: 1, RNRRetryCount: 5, PrivateData: []byte("accepted")}
}

func (p *pair) connect(t *testing.T) *Conn {
	t.Helper()
	c, err := p.a.Connect(p.reqParams(), func(e Event) { p.aEv <- e })
	require.NoError(t, err)
	return c
}

// expect waits for the next event on ch and checks its type.
func expect(t *testing.T, ch chan Event, typ EventType) Event {
	t.Helper()
	select {
	case e := <-ch:
		require.Equal(t, typ, e.Type, "got %v, want %v", e.Type, typ)
		return e
	case <-time.After(10 * time.Second):
		t.Fatalf("no %v event", typ)
		return Event{}
	}
}

// expectNone checks that ch stays quiet for d.
func expectNone(t *testing.T, ch chan Event, d time.Duration) {
	t.Helper()
	select {
	case e := <-ch:
		t.Fatalf("unexpected event %v", e.Type)
	case <-time.After(d):
	}
}

// establish runs the handshake with no loss and returns both connections.
func (p *pair) establish(t *testing.T) (active, passive *Conn) {
	t.Helper()
	active = p.connect(t)
	req := expect(t, p.bEv, EventREQReceived)
	require.NoError(t, req.Conn.Accept(repParams()))
	expect(t, p.aEv, EventREPReceived)
	require.NoError(t, active.ReadyToUse(nil))
	expect(t, p.bEv, EventRTUReceived)
	return active, req.Conn
}

// empty reports whether m holds no connection at all.
func (m *Manager) empty() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.conns) == 0 && len(m.remote) == 0 && len(m.outbox) == 0
}

// waitEmpty waits until m has forgotten every connection.
func waitEmpty(t *testing.T, m *Manager) {
	t.Helper()
	require.Eventually(t, m.empty, 10*time.Second, time.Millisecond)
}
