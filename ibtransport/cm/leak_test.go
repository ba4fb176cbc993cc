package cm

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// waitGoroutines waits for the goroutine count to come back to n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, baseline %d:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCyclesLeaveNothing runs 200 connect, accept, disconnect cycles, the
// passive side accepting from its handler, then checks that both Managers
// are empty, no timer is armed, and after Close no goroutine is left.
func TestCyclesLeaveNothing(t *testing.T) {
	base := runtime.NumGoroutine()
	p := newScaledPair(t, fastMillisecond)
	p.l.handler = func(e Event) {
		if e.Type == EventREQReceived {
			assert.NoError(t, e.Conn.Accept(repParams()))
		}
		p.bEv <- e
	}
	const cycles = 200
	for i := 0; i < cycles; i++ {
		c, err := p.a.Connect(p.reqParams(), func(e Event) {
			if e.Type == EventREPReceived {
				assert.NoError(t, e.Conn.ReadyToUse(nil))
				assert.NoError(t, e.Conn.Disconnect(nil))
			}
			p.aEv <- e
		})
		require.NoError(t, err)
		expect(t, p.aEv, EventREPReceived)
		expect(t, p.aEv, EventDisconnected)
		expect(t, p.aEv, EventTimewaitExit)
		assert.Equal(t, StateIdle, c.State())
	}
	seen := map[EventType]int{}
	for seen[EventTimewaitExit] < cycles {
		seen[expectAny(t, p.bEv).Type]++
	}
	assert.Equal(t, map[EventType]int{EventREQReceived: cycles, EventRTUReceived: cycles,
		EventDREQReceived: cycles, EventTimewaitExit: cycles}, seen)
	waitEmpty(t, p.a)
	waitEmpty(t, p.b)
	for _, m := range []*Manager{p.a, p.b} {
		c := m.Counters()
		assert.Zero(t, c.Timeouts.Load()+c.WrongState.Load())
		// With 61 ms waits a loaded machine may resend; that is no failure.
		t.Logf("retransmissions: %d", c.Retransmissions.Load())
	}
	assert.Equal(t, uint64(cycles), p.b.Counters().In.RTU.Load())
	p.close()
	waitGoroutines(t, base)
}

// expectAny waits for the next event on ch.
func expectAny(t *testing.T, ch chan Event) Event {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
		return Event{}
	}
}

// TestCloseWithLiveConnections closes Managers holding connections in
// several states with timers armed: no goroutine or timer is left, later
// calls fail with ErrClosed and later MADs are dropped.
func TestCloseWithLiveConnections(t *testing.T) {
	base := runtime.NumGoroutine()
	p := newPair(t)
	est, _ := p.establish(t)
	p.w.setFilter(func(sent, int) verdict { return drop })
	waiting := p.connect(t) // REQ_SENT, timer armed
	require.NoError(t, est.Disconnect(nil))
	p.w.setFilter(nil)
	pass := p.connect(t)
	req := expect(t, p.bEv, EventREQReceived)
	require.NoError(t, req.Conn.Accept(repParams())) // REP_SENT on b
	p.close()
	waitGoroutines(t, base)
	assert.True(t, p.a.empty())
	assert.True(t, p.b.empty())
	assert.ErrorIs(t, waiting.Disconnect(nil), ErrClosed)
	assert.ErrorIs(t, pass.ReadyToUse(nil), ErrClosed)
	_, err := p.a.Connect(p.reqParams(), nil)
	assert.ErrorIs(t, err, ErrClosed)
	_, err = p.b.Listen(1, nil)
	assert.ErrorIs(t, err, ErrClosed)
	p.b.Receive(ibv.AddressVector{}, p.w.sentBy(0, mad.AttrREQ)[0])
	assert.True(t, p.b.empty())
	p.a.Close() // twice is fine
}

// TestDestroy checks what Destroy tells the peer in each state, as cm.c's
// ib_destroy_cm_id: REJ Timeout for an outstanding REQ, a consumer REJ for
// an unanswered REQ, one DREQ for an established connection; and that the
// destroyed connection gets no more events.
func TestDestroy(t *testing.T) {
	t.Run("REQ sent", func(t *testing.T) {
		p := newPair(t)
		c := p.connect(t)
		req := expect(t, p.bEv, EventREQReceived)
		c.Destroy()
		ev := expect(t, p.bEv, EventREJReceived)
		assert.Equal(t, req.Conn, ev.Conn)
		assert.Equal(t, mad.RejectTimeout, ev.Reason)
		assert.Equal(t, guidBytes(guidA), [8]byte(ev.ARI))
		waitEmpty(t, p.a)
		waitEmpty(t, p.b)
	})
	t.Run("REQ received", func(t *testing.T) {
		p := newPair(t)
		p.connect(t)
		req := expect(t, p.bEv, EventREQReceived)
		req.Conn.Destroy()
		ev := expect(t, p.aEv, EventREJReceived)
		assert.Equal(t, mad.RejectConsumer, ev.Reason)
		waitEmpty(t, p.a)
		waitEmpty(t, p.b)
	})
	t.Run("established", func(t *testing.T) {
		p := newPair(t)
		active, passive := p.establish(t)
		passive.Destroy()
		expect(t, p.aEv, EventDREQReceived)
		expect(t, p.aEv, EventTimewaitExit)
		assert.Equal(t, StateIdle, active.State())
		expectNone(t, p.bEv, 50*time.Millisecond)
		waitEmpty(t, p.a)
		waitEmpty(t, p.b)
		assert.Len(t, p.w.sentBy(1, mad.AttrDREQ), 1, "one DREQ, not retried")
	})
}

// TestListen refuses a second listener on a service; a closed listener's
// service gets REJ 8.
func TestListen(t *testing.T) {
	p := newPair(t)
	_, err := p.b.Listen(testSvcID, nil)
	assert.ErrorIs(t, err, ErrServiceInUse)
	p.l.Close()
	l, err := p.b.Listen(testSvcID, nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(testSvcID), l.ServiceID())
	l.Close()
	p.connect(t)
	ev := expect(t, p.aEv, EventREJReceived)
	assert.Equal(t, mad.RejectInvalidServiceID, ev.Reason)
}

// TestConnectRefusesBadParams refuses what a REQ cannot carry.
func TestConnectRefusesBadParams(t *testing.T) {
	p := newPair(t)
	for name, f := range map[string]func(*REQParams){
		"RD":           func(r *REQParams) { r.Transport = mad.TransportRD },
		"MTU":          func(r *REQParams) { r.PathMTU = 6 },
		"private data": func(r *REQParams) { r.PrivateData = make([]byte, mad.REQPrivateDataLen+1) },
		"QPN":          func(r *REQParams) { r.LocalQPN = 1 << 24 },
		"retries":      func(r *REQParams) { r.MaxCMRetries = 16 },
	} {
		rp := p.reqParams()
		f(&rp)
		_, err := p.a.Connect(rp, nil)
		assert.ErrorIs(t, err, ErrParams, name)
	}
	assert.True(t, p.a.empty())
}
