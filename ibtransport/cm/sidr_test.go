package cm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

const testUDPSvcID = 0x0111<<16 | 7174

func (p *pair) resolve(t *testing.T, svc uint64) *Conn {
	t.Helper()
	c, err := p.a.ResolveService(SIDRParams{Peer: ibv.AddressVector{DGID: p.w.gids[1], HopLimit: 64},
		ServiceID: svc, PrivateData: []byte{1, 2, 3}}, func(e Event) { p.aEv <- e })
	require.NoError(t, err)
	return c
}

// TestSIDRExchange resolves a service: the listener gets the request with
// its private data, answers with its QP, and the requester gets the QPN
// and Q_Key; both Conns are then gone.
func TestSIDRExchange(t *testing.T) {
	p := newPair(t)
	p.l.Close()
	_, err := p.b.Listen(testUDPSvcID, func(e Event) { p.bEv <- e })
	require.NoError(t, err)
	p.resolve(t, testUDPSvcID)
	req := expect(t, p.bEv, EventSIDRREQReceived)
	assert.Equal(t, StateSIDRREQRcvd, req.Conn.State())
	assert.Equal(t, uint64(testUDPSvcID), req.ServiceID)
	assert.Equal(t, uint16(0xffff), req.PKey)
	assert.Equal(t, p.w.gids[0], req.PeerGID)
	assert.Equal(t, []byte{1, 2, 3}, req.PrivateData[:3])
	require.NoError(t, req.Conn.SIDRReply(mad.SIDRValid, 0x1234, 0x01234567, []byte{9}))
	assert.ErrorIs(t, req.Conn.SIDRReply(mad.SIDRValid, 1, 1, nil), ErrState, "a second answer")
	rep := expect(t, p.aEv, EventSIDRREPReceived)
	assert.Equal(t, mad.SIDRValid, rep.SIDRStatus)
	assert.Equal(t, uint32(0x1234), rep.RemoteQPN)
	assert.Equal(t, uint32(0x01234567), rep.QKey)
	assert.Equal(t, byte(9), rep.PrivateData[0])
	assert.Zero(t, p.a.Conns())
	assert.Zero(t, p.b.Conns())
}

// TestSIDRUnsupported: nobody listens on the service, the answer says so
// at once.
func TestSIDRUnsupported(t *testing.T) {
	p := newPair(t)
	p.resolve(t, testUDPSvcID)
	rep := expect(t, p.aEv, EventSIDRREPReceived)
	assert.Equal(t, mad.SIDRUnsupported, rep.SIDRStatus)
	assert.Zero(t, rep.RemoteQPN)
}

// TestSIDRRetriesAndTimeout: a lost request is resent, a duplicate while
// the consumer has not answered is dropped, and a request nobody answers
// ends in EventTimeout after its retries.
func TestSIDRRetriesAndTimeout(t *testing.T) {
	p := newPair(t)
	p.l.Close()
	_, err := p.b.Listen(testUDPSvcID, func(e Event) { p.bEv <- e })
	require.NoError(t, err)
	p.w.setFilter(func(s sent, nth int) verdict {
		if s.msg.Header().AttrID() == mad.AttrSIDRREQ && nth == 0 {
			return drop
		}
		return deliver
	})
	c, err := p.a.ResolveService(SIDRParams{Peer: ibv.AddressVector{DGID: p.w.gids[1]},
		ServiceID: testUDPSvcID, Timeout: 100 * time.Millisecond, MaxRetries: 2}, func(e Event) { p.aEv <- e })
	require.NoError(t, err)
	req := expect(t, p.bEv, EventSIDRREQReceived)
	// Not answered: the requester's retries run out.
	expect(t, p.aEv, EventTimeout)
	assert.Equal(t, StateIdle, c.State())
	assert.Len(t, p.w.sentBy(0, mad.AttrSIDRREQ), 3, "the request and its two retries")
	assert.Empty(t, p.bEv, "the retries were duplicates, dropped")
	// Destroying the unanswered request refuses it.
	req.Conn.Destroy()
	assert.Zero(t, p.b.Conns())
	require.Eventually(t, func() bool { return len(p.w.sentBy(1, mad.AttrSIDRREP)) == 1 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, mad.SIDRRejected, mad.SIDRREP(p.w.sentBy(1, mad.AttrSIDRREP)[0]).Status())
}

func TestSIDRPrivateDataTooLong(t *testing.T) {
	p := newPair(t)
	_, err := p.a.ResolveService(SIDRParams{PrivateData: make([]byte, mad.SIDRREQPrivateDataLen+1)}, nil)
	assert.ErrorIs(t, err, ErrParams)
}
