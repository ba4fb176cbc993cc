package cm

import (
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// fixture is a Manager with a listener and connections in many states,
// made by feeding it hand-built MADs; its timers are Linux's, so none fires
// while a fuzz input runs.
type fixture struct {
	m     *Manager
	conns []*Conn
	mu    sync.Mutex
	sent  int
}

var fixturePeer = ibv.AddressVector{DGID: ibv.GID{0: 0xfe, 0x80, 15: 9}, HopLimit: 64}

func newFixture(t testing.TB) *fixture {
	f := &fixture{}
	f.m = New(Config{CAGUID: guidB, Send: func(ibv.AddressVector, mad.MAD) error {
		f.mu.Lock()
		f.sent++
		f.mu.Unlock()
		return nil
	}})
	_, err := f.m.Listen(testSvcID, func(Event) {})
	require.NoError(t, err)
	for i := range uint32(3) {
		f.active(t, 0x1000+i, int(i))
	}
	for i := range uint32(5) {
		f.passive(t, 0x2000+i, int(i))
	}
	f.sidr(t)
	return f
}

// sidr adds a service ID resolution each way: one sent and unanswered,
// one received and not yet answered.
func (f *fixture) sidr(t testing.TB) {
	_, err := f.m.Listen(testUDPSvcID, func(Event) {})
	require.NoError(t, err)
	c, err := f.m.ResolveService(SIDRParams{Peer: fixturePeer, ServiceID: testUDPSvcID}, nil)
	require.NoError(t, err)
	f.conns = append(f.conns, c)
	req := newMAD(mad.AttrSIDRREQ, 0x3000)
	mad.SIDRREQ(req).SetRequestID(0x3000)
	mad.SIDRREQ(req).SetServiceID(testUDPSvcID)
	f.m.Receive(fixturePeer, req)
	f.m.mu.Lock()
	p := f.m.sidrRemote[sidrKey{0x3000, fixturePeer.DGID}]
	f.m.mu.Unlock()
	require.NotNil(t, p)
	f.conns = append(f.conns, p)
}

func (f *fixture) params() REQParams {
	return REQParams{Peer: fixturePeer, ServiceID: testSvcID, LocalQPN: 0x20,
		PathMTU: ibv.MTU1024, Transport: mad.TransportRC, HopLimit: 64}
}

// active makes an active connection and takes it steps of the way:
// 0 REQ_SENT, 1 ESTABLISHED, 2 DREQ_SENT.
func (f *fixture) active(t testing.TB, peerID uint32, steps int) {
	c, err := f.m.Connect(f.params(), nil)
	require.NoError(t, err)
	f.conns = append(f.conns, c)
	if steps == 0 {
		return
	}
	rep := newMAD(mad.AttrREP, c.tid)
	mad.REP(rep).SetLocalCommID(peerID)
	mad.REP(rep).SetRemoteCommID(c.localID)
	mad.REP(rep).SetLocalCAGUID(guidA)
	mad.REP(rep).SetLocalQPN(0x30)
	f.m.Receive(fixturePeer, rep)
	require.NoError(t, c.ReadyToUse(nil))
	if steps == 2 {
		require.NoError(t, c.Disconnect(nil))
	}
}

// passive makes a passive connection from a REQ of peer ID peerID and takes
// it steps of the way: 0 REQ_RCVD, 1 MRA_REQ_SENT, 2 REP_SENT,
// 3 ESTABLISHED, 4 TIMEWAIT.
func (f *fixture) passive(t testing.TB, peerID uint32, steps int) {
	p := f.params()
	req := f.m.buildREQ(&Conn{localID: peerID, tid: uint64(peerID)}, &p)
	f.m.Receive(fixturePeer, req)
	f.m.mu.Lock()
	c := f.m.remote[remoteKey{peerID, guidB}]
	f.m.mu.Unlock()
	require.NotNil(t, c)
	f.conns = append(f.conns, c)
	switch steps {
	case 0:
		return
	case 1:
		require.NoError(t, c.MRA(20, nil))
		return
	}
	require.NoError(t, c.Accept(REPParams{LocalQPN: 0x40}))
	if steps == 2 {
		return
	}
	rtu := newMAD(mad.AttrRTU, c.tid)
	mad.RTU(rtu).SetLocalCommID(peerID)
	mad.RTU(rtu).SetRemoteCommID(c.localID)
	f.m.Receive(fixturePeer, rtu)
	if steps == 3 {
		return
	}
	dreq := newMAD(mad.AttrDREQ, 1)
	mad.DREQ(dreq).SetLocalCommID(peerID)
	mad.DREQ(dreq).SetRemoteCommID(c.localID)
	mad.DREQ(dreq).SetRemoteQPN(0x40)
	f.m.Receive(fixturePeer, dreq)
}

// steer points a MAD at one of the fixture's connections when its
// reserved header byte 18 says so, so that fuzzing reaches the state
// machine and not only the unknown-ID drops.
func (f *fixture) steer(b []byte) []byte {
	if len(b) < 32 || b[18]&1 == 0 {
		return b
	}
	b = append([]byte(nil), b...)
	c := f.conns[int(b[19])%len(f.conns)]
	c.m.mu.Lock()
	local, remote := c.localID, c.remoteID
	c.m.mu.Unlock()
	if mad.MAD(b).Header().AttrID() == mad.AttrSIDRREP {
		mad.SIDRREP(b).SetRequestID(local) // a SIDR_REP names the request by our ID
		return b
	}
	mad.RTU(b).SetRemoteCommID(local) // every message but REQ has the IDs here
	mad.RTU(b).SetLocalCommID(remote)
	return b
}

// check verifies the tables agree: every connection the peer-ID table
// holds is live, and no live connection is idle.
func (f *fixture) check(t testing.TB) {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, c := range m.remote {
		require.Same(t, c, m.conns[c.localID], "remote %v", k)
		require.Equal(t, k, c.remoteKey())
	}
	for k, c := range m.sidrRemote {
		require.Same(t, c, m.conns[c.localID], "SIDR request %v", k)
		require.Equal(t, k, c.sidrKey)
	}
	for id, c := range m.conns {
		require.Equal(t, id, c.localID)
		require.NotEqual(t, StateIdle, c.state)
	}
	require.Empty(t, m.outbox)
}

// seeds are the MADs of rxe-rping.pcap and variants of them.
func seeds(t testing.TB) [][]byte {
	var out [][]byte
	for _, c := range loadMADs(t, rpingCapture) {
		out = append(out, c.msg, c.msg[:100], append(append([]byte(nil), c.msg...), 0))
		for _, off := range []int{0, 1, 2, 3, 17} {
			b := append([]byte(nil), c.msg...)
			b[off] ^= 0x80
			out = append(out, b)
		}
		steered := append([]byte(nil), c.msg...)
		steered[18] = 1
		for i := range byte(10) {
			steered[19] = i
			out = append(out, append([]byte(nil), steered...))
		}
	}
	for _, attr := range []mad.AttrID{mad.AttrSIDRREQ, mad.AttrSIDRREP} {
		m := newMAD(attr, 1)
		mad.SIDRREQ(m).SetServiceID(testUDPSvcID) // a SIDR_REP's QPN: any
		out = append(out, m)
		steered := append([]byte(nil), m...)
		steered[18] = 1
		for i := range byte(10) {
			steered[19] = i
			out = append(out, append([]byte(nil), steered...))
		}
	}
	return out
}

// FuzzReceive feeds arbitrary bytes to a Manager with a listener and
// connections in several states: nothing panics, the tables stay
// consistent, and Close leaves nothing running.
func FuzzReceive(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fx := newFixture(t)
		fx.m.Receive(fixturePeer, fx.steer(b))
		fx.check(t)
		fx.m.Close()
	})
}

// TestReceiveSeeds runs the fuzz seeds, each on a fresh fixture, then
// checks no goroutine is left.
func TestReceiveSeeds(t *testing.T) {
	base := runtime.NumGoroutine()
	for _, s := range seeds(t) {
		fx := newFixture(t)
		fx.m.Receive(fixturePeer, fx.steer(s))
		fx.check(t)
		fx.m.Close()
	}
	waitGoroutines(t, base)
}

// TestFixtureStates checks the fixture has the states it claims.
func TestFixtureStates(t *testing.T) {
	fx := newFixture(t)
	defer fx.m.Close()
	var got []State
	for _, c := range fx.conns {
		got = append(got, c.State())
	}
	require.Equal(t, []State{StateREQSent, StateEstablished, StateDREQSent,
		StateREQRcvd, StateMRAREQSent, StateREPSent, StateEstablished, StateTimewait,
		StateSIDRREQSent, StateSIDRREQRcvd}, got)
}
