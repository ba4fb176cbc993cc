package cm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// dropFirst drops the first MAD of attribute a that side from sends.
func dropFirst(from int, a mad.AttrID) func(sent, int) verdict {
	return func(s sent, nth int) verdict {
		if s.from == from && s.msg.Header().AttrID() == a && nth == 0 {
			return drop
		}
		return deliver
	}
}

// runToTimewait runs a whole connection and its disconnect, whatever the
// wire does, and waits until both sides have forgotten it.
func (p *pair) runToTimewait(t *testing.T) {
	t.Helper()
	active, _ := p.establish(t)
	require.NoError(t, active.Disconnect(nil))
	expect(t, p.bEv, EventDREQReceived)
	expect(t, p.aEv, EventDisconnected)
	expect(t, p.aEv, EventTimewaitExit)
	expect(t, p.bEv, EventTimewaitExit)
	waitEmpty(t, p.a)
	waitEmpty(t, p.b)
}

// TestLossOfEachMessage drops each message of the exchange once in turn:
// the REQ, REP and DREQ are resent by their timers, a lost RTU is made good
// by the REP's resend being answered with the RTU again, a lost DREP by the
// DREQ's resend being answered from TIMEWAIT.
func TestLossOfEachMessage(t *testing.T) {
	cases := []struct {
		from     int
		attr     mad.AttrID
		resender *Manager // whose timer recovers
		dupSeen  int      // which side counts a duplicate
	}{
		{0, mad.AttrREQ, nil, -1},
		{1, mad.AttrREP, nil, -1},
		{0, mad.AttrRTU, nil, 0},
		{0, mad.AttrDREQ, nil, -1},
		{1, mad.AttrDREP, nil, -1},
	}
	for _, tc := range cases {
		t.Run(tc.attr.String(), func(t *testing.T) {
			p := newPair(t)
			p.w.setFilter(dropFirst(tc.from, tc.attr))
			p.runToTimewait(t)
			sender := []*Manager{p.a, p.b}[tc.from]
			switch tc.attr {
			case mad.AttrREQ, mad.AttrDREQ:
				assert.Equal(t, uint64(1), sender.Counters().Retransmissions.Load())
			case mad.AttrREP, mad.AttrRTU:
				assert.Equal(t, uint64(1), p.b.Counters().Retransmissions.Load(), "the REP is resent")
			case mad.AttrDREP:
				assert.Equal(t, uint64(1), p.a.Counters().Retransmissions.Load(), "the DREQ is resent")
				// b's TIMEWAIT (2^11) is over before a's DREQ timeout
				// (2×2^10 + 2^12), as with Linux's values: b answers the
				// DREQ of a connection it forgot.
				assert.Equal(t, uint64(1), p.b.Counters().UnknownConn.Load())
			}
			if tc.dupSeen >= 0 {
				assert.NotZero(t, []*Manager{p.a, p.b}[tc.dupSeen].Counters().Duplicates.Load())
			}
			assert.Len(t, p.w.sentBy(tc.from, tc.attr), 2, "sent twice")
		})
	}
}

// TestDuplicatesAnswered duplicates every message: each side answers as cm.c
// does and the connection comes up and down once.
func TestDuplicatesAnswered(t *testing.T) {
	p := newPair(t)
	p.w.setFilter(func(sent, int) verdict { return duplicate })
	p.runToTimewait(t)
	expectNone(t, p.aEv, 20*time.Millisecond)
	expectNone(t, p.bEv, 0)
	assert.Equal(t, uint64(2), p.b.Counters().In.REQ.Load())
	// Each duplicate arrives at once, so the REQ's and the REP's come before
	// the consumer answered and are dropped, as in cm.c; the RTU's comes when
	// established. b's DREQ duplicate is answered with a second DREP.
	assert.Equal(t, uint64(3), p.b.Counters().Duplicates.Load(), "REQ, RTU, DREQ")
	assert.Len(t, p.w.sentBy(1, mad.AttrREP), 1)
	assert.Len(t, p.w.sentBy(0, mad.AttrRTU), 1)
	assert.Len(t, p.w.sentBy(1, mad.AttrDREP), 2)
	// a sees the REP twice and the two DREPs twice each: one of them ends
	// its DREQ, the rest are duplicates in TIMEWAIT (or, on a slow
	// machine, come after it and find no connection).
	c := p.a.Counters()
	assert.Equal(t, uint64(4), c.Duplicates.Load()+c.UnknownConn.Load())
	assert.Zero(t, c.WrongState.Load()+p.b.Counters().WrongState.Load())
}

// TestReordered holds each message back behind the next one on its wire.
func TestReordered(t *testing.T) {
	p := newPair(t)
	p.w.setFilter(func(s sent, nth int) verdict {
		if nth == 0 && s.msg.Header().AttrID() != mad.AttrDREP {
			return hold
		}
		return deliver
	})
	p.runToTimewait(t)
}

// TestDuplicateREQAnswers checks the answer to a REQ seen again in each
// state of the passive side: none before the consumer answers, the MRA
// after an MRA, the REP after the REP, a stale-connection REJ in TIMEWAIT.
func TestDuplicateREQAnswers(t *testing.T) {
	p := newPair(t)
	p.w.setFilter(func(s sent, _ int) verdict {
		if s.from == 1 && s.msg.Header().AttrID() != mad.AttrDREP {
			return drop // b's answers are looked at, not delivered
		}
		return deliver
	})
	active := p.connect(t)
	ev := expect(t, p.bEv, EventREQReceived)
	req := p.w.sentBy(0, mad.AttrREQ)[0]
	from := ibv.AddressVector{DGID: p.w.gids[0]}
	count := func(a mad.AttrID) int { return len(p.w.sentBy(1, a)) }

	p.b.Receive(from, req)
	assert.Zero(t, count(mad.AttrMRA)+count(mad.AttrREP)+count(mad.AttrREJ))

	require.NoError(t, ev.Conn.MRA(10, []byte("wait")))
	assert.Equal(t, StateMRAREQSent, ev.Conn.State())
	p.b.Receive(from, req)
	require.Equal(t, 2, count(mad.AttrMRA))
	assert.Equal(t, p.w.sentBy(1, mad.AttrMRA)[0], p.w.sentBy(1, mad.AttrMRA)[1])

	require.NoError(t, ev.Conn.Accept(repParams()))
	p.b.Receive(from, req)
	require.Equal(t, 2, count(mad.AttrREP))

	require.NoError(t, ev.Conn.Reject(mad.RejectConsumer, nil))
	assert.Equal(t, StateTimewait, ev.Conn.State(), "a REJ after the REP goes to TIMEWAIT")
	p.b.Receive(from, req)
	rejs := p.w.sentBy(1, mad.AttrREJ)
	require.Len(t, rejs, 2)
	assert.Equal(t, mad.RejectStaleConn, mad.REJ(rejs[1]).Reason())
	assert.Equal(t, active.LocalID(), mad.REJ(rejs[1]).RemoteCommID())
	assert.Equal(t, uint64(4), p.b.Counters().Duplicates.Load())
}

// TestUnlistenedService gets REJ invalid service ID at once, long before
// any retry.
func TestUnlistenedService(t *testing.T) {
	p := newPair(t)
	rp := p.reqParams()
	rp.ServiceID = testSvcID + 1
	start := time.Now()
	c, err := p.a.Connect(rp, func(e Event) { p.aEv <- e })
	require.NoError(t, err)
	ev := expect(t, p.aEv, EventREJReceived)
	assert.Less(t, time.Since(start), 250*time.Millisecond, "before the first retry, at 307 ms")
	assert.Equal(t, mad.RejectInvalidServiceID, ev.Reason)
	assert.Equal(t, uint8(mad.MsgREQ), ev.MessageRejected)
	assert.Equal(t, StateIdle, c.State())
	rej := mad.REJ(p.w.sentBy(1, mad.AttrREJ)[0])
	assert.Equal(t, c.LocalID(), rej.RemoteCommID())
	assert.Zero(t, rej.LocalCommID())
	waitEmpty(t, p.a)
	waitEmpty(t, p.b)
	assert.Zero(t, p.a.Counters().Retransmissions.Load())
	assert.Equal(t, uint64(1), p.b.Counters().RejectsSent.Load())
}

// TestUnsupportedTransport rejects an RD REQ, transport types that are
// not XRC's pair, and one with no valid MTU.
func TestUnsupportedTransport(t *testing.T) {
	p := newPair(t)
	req := p.w.gids // just for the address
	for _, tc := range []struct {
		set    func(mad.REQ)
		reason mad.RejectReason
	}{
		{func(r mad.REQ) { r.SetTransportServiceType(mad.TransportRD) }, mad.RejectInvalidTransportType},
		{func(r mad.REQ) { r.SetExtendedTransportType(1) }, mad.RejectInvalidTransportType},
		// XRC's service type goes with its extended type only.
		{func(r mad.REQ) { r.SetTransportServiceType(mad.TransportXRC) }, mad.RejectInvalidTransportType},
		{func(r mad.REQ) { r.SetTransportServiceType(mad.TransportXRC); r.SetExtendedTransportType(2) },
			mad.RejectInvalidTransportType},
		{func(r mad.REQ) { r.SetPathMTU(7) }, mad.RejectInvalidMTU},
	} {
		rp := p.reqParams()
		c := &Conn{localID: 99, tid: 5}
		msg := p.a.buildREQ(c, &rp)
		tc.set(mad.REQ(msg))
		before := len(p.w.sentBy(1, mad.AttrREJ))
		p.b.Receive(ibv.AddressVector{DGID: req[0]}, msg)
		rejs := p.w.sentBy(1, mad.AttrREJ)
		require.Len(t, rejs, before+1)
		assert.Equal(t, tc.reason, mad.REJ(rejs[before]).Reason())
		assert.Equal(t, uint32(99), mad.REJ(rejs[before]).RemoteCommID())
	}
	expectNone(t, p.bEv, 10*time.Millisecond)
	assert.True(t, p.b.empty())
}

// TestPeerVanishesDuringHandshake: nothing answers the REQ; after the
// retries the connection fails with EventTimeout, sends REJ Timeout, and
// nothing is left.
func TestPeerVanishesDuringHandshake(t *testing.T) {
	p := newPair(t)
	p.w.setFilter(func(sent, int) verdict { return drop })
	rp := p.reqParams()
	rp.MaxCMRetries = 3
	start := time.Now()
	c, err := p.a.Connect(rp, func(e Event) { p.aEv <- e })
	require.NoError(t, err)
	expect(t, p.aEv, EventTimeout)
	// Four waits of (2×2^10 + 2^12) × 50 µs.
	assert.GreaterOrEqual(t, time.Since(start), 4*307*time.Millisecond)
	assert.Equal(t, uint64(3), p.a.Counters().Retransmissions.Load())
	assert.Equal(t, uint64(1), p.a.Counters().Timeouts.Load())
	assert.Len(t, p.w.sentBy(0, mad.AttrREQ), 4)
	rej := p.w.sentBy(0, mad.AttrREJ)
	require.Len(t, rej, 1)
	assert.Equal(t, mad.RejectTimeout, mad.REJ(rej[0]).Reason())
	assert.Equal(t, StateIdle, c.State())
	assert.True(t, p.a.empty())
	expectNone(t, p.aEv, 100*time.Millisecond)
}

// TestActiveVanishesAfterREQ: the passive side's REP goes unanswered; after
// the REQ's max CM retries it fails with EventTimeout and the active side,
// hearing the REJ Timeout, drops its half too.
func TestActiveVanishesAfterREQ(t *testing.T) {
	p := newPair(t)
	rp := p.reqParams()
	rp.MaxCMRetries = 2
	// The REQ is resent every 512 ms (scaled), the REP every 205: the
	// passive side gives up at 614 ms, between the REQ's resends. With
	// the default 307 ms the REQ's second resend came at 614 too, and on
	// a loaded machine it could reach the passive side after it gave up,
	// as a new REQ that nobody accepts.
	rp.RemoteCMResponseTimeout = 21
	p.w.setFilter(func(s sent, _ int) verdict {
		if s.from == 1 && s.msg.Header().AttrID() == mad.AttrREP {
			return drop
		}
		return deliver
	})
	_, err := p.a.Connect(rp, func(e Event) { p.aEv <- e })
	require.NoError(t, err)
	ev := expect(t, p.bEv, EventREQReceived)
	require.NoError(t, ev.Conn.Accept(repParams()))
	expect(t, p.bEv, EventTimeout)
	assert.Equal(t, uint64(2), p.b.Counters().Retransmissions.Load())
	// Each resent REQ got the REP again too.
	assert.Equal(t, 3+int(p.b.Counters().Duplicates.Load()), len(p.w.sentBy(1, mad.AttrREP)))
	waitEmpty(t, p.b)
	// The active side, its REQ still out, takes the REJ Timeout (it names
	// the active's ID) and gives up too.
	rej := expect(t, p.aEv, EventREJReceived)
	assert.Equal(t, mad.RejectTimeout, rej.Reason)
	assert.Equal(t, guidBytes(guidB), [8]byte(rej.ARI))
	waitEmpty(t, p.a)
}

// TestEstablishedPeerVanishes: the DREQ goes unanswered; after the retries
// EventDisconnected (timed out), TIMEWAIT, and nothing left.
func TestEstablishedPeerVanishes(t *testing.T) {
	p := newScaledPair(t, fastMillisecond)
	active, _ := p.establish(t)
	p.w.setFilter(func(sent, int) verdict { return drop })
	require.NoError(t, active.Disconnect(nil))
	ev := expect(t, p.aEv, EventDisconnected)
	assert.True(t, ev.TimedOut)
	assert.Equal(t, uint64(15), p.a.Counters().Retransmissions.Load(), "the REQ's 15 CM retries")
	assert.Len(t, p.w.sentBy(0, mad.AttrDREQ), 16)
	expect(t, p.aEv, EventTimewaitExit)
	waitEmpty(t, p.a)
}

// TestMRAExtendsWait: an MRA for the REQ makes the active side wait the
// service timeout on top of the packet lifetime before resending.
func TestMRAExtendsWait(t *testing.T) {
	p := newScaledPair(t, fastMillisecond)
	active := p.connect(t)
	ev := expect(t, p.bEv, EventREQReceived)
	require.NoError(t, ev.Conn.MRA(24, nil)) // 2^16 × 10 µs = 655 ms
	mra := expect(t, p.aEv, EventMRAReceived)
	assert.Equal(t, uint8(24), mra.ServiceTimeout)
	assert.Equal(t, StateMRAREQRcvd, active.State())
	time.Sleep(150 * time.Millisecond) // past two REQ timeouts of 61 ms
	assert.Zero(t, p.a.Counters().Retransmissions.Load())
	require.NoError(t, ev.Conn.Accept(repParams()))
	expect(t, p.aEv, EventREPReceived)
}

// TestEstablishedBeforeRTU: data before the RTU establishes the passive
// side; the late RTU is a duplicate.
func TestEstablishedBeforeRTU(t *testing.T) {
	p := newPair(t)
	p.w.setFilter(func(s sent, _ int) verdict {
		if s.msg.Header().AttrID() == mad.AttrRTU {
			return hold
		}
		return deliver
	})
	active := p.connect(t)
	ev := expect(t, p.bEv, EventREQReceived)
	require.NoError(t, ev.Conn.Accept(repParams()))
	expect(t, p.aEv, EventREPReceived)
	require.NoError(t, active.ReadyToUse(nil))
	ev.Conn.Established()
	expect(t, p.bEv, EventEstablished)
	assert.Equal(t, StateEstablished, ev.Conn.State())
	p.w.setFilter(nil)
	require.NoError(t, ev.Conn.Disconnect(nil)) // releases the held RTU first
	expect(t, p.aEv, EventDREQReceived)
	expect(t, p.bEv, EventDisconnected)
	assert.Equal(t, uint64(1), p.b.Counters().Duplicates.Load(), "the RTU")
}

// TestConsumerReject: the passive consumer rejects; the active side gets the
// reason and private data and both forget the connection.
func TestConsumerReject(t *testing.T) {
	p := newPair(t)
	active := p.connect(t)
	ev := expect(t, p.bEv, EventREQReceived)
	require.NoError(t, ev.Conn.Reject(mad.RejectConsumer, []byte("no")))
	rej := expect(t, p.aEv, EventREJReceived)
	assert.Equal(t, mad.RejectConsumer, rej.Reason)
	assert.Equal(t, padded([]byte("no"), mad.REJPrivateDataLen), rej.PrivateData)
	assert.Equal(t, StateIdle, active.State())
	waitEmpty(t, p.a)
	waitEmpty(t, p.b)
	assert.ErrorIs(t, ev.Conn.Accept(repParams()), ErrState)
}

// TestDREQForUnknownConnection is answered with a DREP anyway.
func TestDREQForUnknownConnection(t *testing.T) {
	p := newPair(t)
	msg := newMAD(mad.AttrDREQ, 77)
	mad.DREQ(msg).SetLocalCommID(5)
	mad.DREQ(msg).SetRemoteCommID(6)
	p.b.Receive(ibv.AddressVector{DGID: p.w.gids[0]}, msg)
	dreps := p.w.sentBy(1, mad.AttrDREP)
	require.Len(t, dreps, 1)
	assert.Equal(t, uint32(6), mad.DREP(dreps[0]).LocalCommID())
	assert.Equal(t, uint32(5), mad.DREP(dreps[0]).RemoteCommID())
	assert.Equal(t, uint64(77), dreps[0].Header().TID())
	assert.True(t, p.b.empty())
}

// TestDelayedMRA: a delayed MRA (cm.c's IB_CM_MRA_FLAG_DELAY, as rdma_cm
// prepares for every request it queues) sends nothing by itself; the
// REQ's duplicate gets it, and the active side then waits longer.
func TestDelayedMRA(t *testing.T) {
	p := newPair(t)
	p.w.setFilter(func(s sent, _ int) verdict {
		if s.from == 1 {
			return drop // b's answers are looked at, not delivered
		}
		return deliver
	})
	p.connect(t)
	ev := expect(t, p.bEv, EventREQReceived)
	req := p.w.sentBy(0, mad.AttrREQ)[0]
	from := ibv.AddressVector{DGID: p.w.gids[0]}

	require.NoError(t, ev.Conn.DelayMRA(24, nil))
	assert.Equal(t, StateMRAREQSent, ev.Conn.State())
	assert.Empty(t, p.w.sentBy(1, mad.AttrMRA), "a delayed MRA was sent at once")
	p.b.Receive(from, req)
	mras := p.w.sentBy(1, mad.AttrMRA)
	require.Len(t, mras, 1, "the duplicate REQ got no MRA")
	assert.Equal(t, uint8(24), mad.MRA(mras[0]).ServiceTimeout())
	require.NoError(t, ev.Conn.Accept(repParams()))
	assert.Len(t, p.w.sentBy(1, mad.AttrREP), 1)
}

// TestXRCREQ sends an XRC initiator's REQ as cm.c does (transport service
// type 3, extended transport type 1), which the passive side takes.
func TestXRCREQ(t *testing.T) {
	p := newPair(t)
	rp := p.reqParams()
	rp.Transport = mad.TransportXRC
	msg := p.a.buildREQ(&Conn{localID: 99, tid: 5}, &rp)
	r := mad.REQ(msg)
	assert.Equal(t, uint8(3), r.TransportServiceType())
	assert.Equal(t, uint8(1), r.ExtendedTransportType())
	p.b.Receive(ibv.AddressVector{DGID: p.w.gids[0]}, msg)
	ev := expect(t, p.bEv, EventREQReceived)
	assert.Equal(t, uint8(mad.TransportXRC), ev.Transport)
	assert.Empty(t, p.w.sentBy(1, mad.AttrREJ))
}
