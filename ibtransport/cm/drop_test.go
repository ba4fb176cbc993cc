package cm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/mad"
)

// TestDropREQ: a REQ the consumer has no room for is dropped without a
// word (cm.c's answer to a handler's ENOMEM); the active side's
// retransmission of it is a new request, which can be accepted.
func TestDropREQ(t *testing.T) {
	p := newPair(t)
	active := p.connect(t)
	first := expect(t, p.bEv, EventREQReceived)
	require.NoError(t, first.Conn.Drop())
	assert.Equal(t, StateIdle, first.Conn.State())
	assert.ErrorIs(t, first.Conn.Drop(), ErrState, "a dropped REQ is gone")

	again := expect(t, p.bEv, EventREQReceived) // the REQ's retransmission
	assert.NotSame(t, first.Conn, again.Conn)
	assert.Equal(t, active.LocalID(), again.Conn.RemoteID())
	require.NoError(t, again.Conn.Accept(repParams()))
	expect(t, p.aEv, EventREPReceived)
	assert.Empty(t, p.w.sentBy(1, mad.AttrREJ), "the passive side sent a REJ")
	assert.GreaterOrEqual(t, len(p.w.sentBy(0, mad.AttrREQ)), 2)

	assert.ErrorIs(t, again.Conn.Drop(), ErrState, "an answered REQ cannot be dropped")
}

// TestMRAWaitIsTheMessages: an MRA lengthens the wait of the message it
// answers only, as cm.c changes that MAD's timeout: the DREQ that ends
// the connection later waits the connection's timeout again, not the
// MRA's 69 s (cma.c's MRA service timeout 24).
func TestMRAWaitIsTheMessages(t *testing.T) {
	p := newPair(t)
	active := p.connect(t)
	ev := expect(t, p.bEv, EventREQReceived)
	require.NoError(t, ev.Conn.MRA(24, nil))
	expect(t, p.aEv, EventMRAReceived)
	p.a.mu.Lock()
	mraWait, timeout := active.wait, active.timeout
	p.a.mu.Unlock()
	assert.Greater(t, mraWait, timeout, "the MRA did not lengthen the REQ's wait")
	require.NoError(t, ev.Conn.Accept(repParams()))
	expect(t, p.aEv, EventREPReceived)
	require.NoError(t, active.ReadyToUse(nil))
	expect(t, p.bEv, EventRTUReceived)
	p.w.setFilter(func(s sent, nth int) verdict { return drop }) // the DREQ waits
	require.NoError(t, active.Disconnect(nil))
	p.a.mu.Lock()
	defer p.a.mu.Unlock()
	assert.Equal(t, timeout, active.wait, "the DREQ waits as long as the MRA asked for the REQ")
}
