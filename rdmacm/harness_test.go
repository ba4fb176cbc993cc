package rdmacm_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

var (
	addrA = netip.MustParseAddr("10.0.0.1")
	addrB = netip.MustParseAddr("10.0.0.2")
)

// side is one device and a CM over it.
type side struct {
	dev  *verbs.Device
	cm   *rdmacm.CM
	link *memlink.Endpoint
}

// newSides opens two devices joined by an in-memory link (with lc's
// faults) and a CM on each; ms is how long a millisecond of the IB CM's
// timeouts lasts (0: a millisecond).
func newSides(t testing.TB, lc memlink.Config, ms time.Duration) (a, b *side) {
	t.Helper()
	la, lb := memlink.Pair(lc)
	open := func(l *memlink.Endpoint, addr netip.Addr) *side {
		dev, err := verbs.Open(l, verbs.Config{Addrs: []netip.Addr{addr}, CMMillisecond: ms})
		require.NoError(t, err)
		c, err := rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{dev}})
		require.NoError(t, err)
		return &side{dev: dev, cm: c, link: l}
	}
	a, b = open(la, addrA), open(lb, addrB)
	t.Cleanup(func() {
		for _, s := range []*side{a, b} {
			s.cm.Close()
			s.dev.Close()
			s.link.Close()
		}
	})
	return a, b
}

// nextEvent returns ch's next event, which must be of type want. It
// passes over TIMEWAIT_EXIT events, which come when an earlier
// connection's TIMEWAIT ends, whenever that is.
func nextEvent(t testing.TB, ch *rdmacm.EventChannel, want rdmacm.EventType) rdmacm.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		ev, err := ch.Get(ctx)
		require.NoError(t, err, "waiting for %v", want)
		if ev.Type == rdmacm.EventTimewaitExit && want != ev.Type {
			continue
		}
		require.Equal(t, want, ev.Type, "event (error %v)", ev.Err)
		return ev
	}
}

// conn is one side's end of a connection: its ID, QP, CQ and a buffer.
type conn struct {
	id  *rdmacm.ID
	ch  *rdmacm.EventChannel
	qp  *verbs.QP
	cq  *verbs.CQ
	mr  *verbs.MR
	dev *verbs.Device
}

// makeQP gives the ID a QP on a CQ of its own and a registered buffer
// with a receive posted.
func makeQP(t testing.TB, id *rdmacm.ID, ch *rdmacm.EventChannel) *conn {
	t.Helper()
	dev := id.Device()
	require.NotNil(t, dev)
	cq, err := dev.CreateCQ(64, nil)
	require.NoError(t, err)
	pd := dev.AllocPD()
	qp, err := id.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	require.NoError(t, qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{mr.SGE(2048, 2048)}}))
	return &conn{id: id, ch: ch, qp: qp, cq: cq, mr: mr, dev: dev}
}

// listen makes an ID of s listen on port.
func listen(t testing.TB, s *side, ap netip.AddrPort) (*rdmacm.ID, *rdmacm.EventChannel) {
	t.Helper()
	ch := s.cm.NewEventChannel()
	id, err := s.cm.CreateID(ch, rdmacm.PortSpaceTCP)
	require.NoError(t, err)
	require.NoError(t, id.Bind(ap))
	require.NoError(t, id.Listen(8))
	return id, ch
}

// dial resolves dst from s and connects with p, without waiting for the
// outcome.
func dial(t testing.TB, s *side, dst netip.AddrPort, p *rdmacm.ConnParam) *conn {
	t.Helper()
	ch := s.cm.NewEventChannel()
	id, err := s.cm.CreateID(ch, rdmacm.PortSpaceTCP)
	require.NoError(t, err)
	require.NoError(t, id.ResolveAddr(netip.Addr{}, dst, time.Second))
	nextEvent(t, ch, rdmacm.EventAddrResolved)
	require.NoError(t, id.ResolveRoute(time.Second))
	nextEvent(t, ch, rdmacm.EventRouteResolved)
	c := makeQP(t, id, ch)
	require.NoError(t, id.Connect(p))
	return c
}

// accept takes the next connect request on the listener's channel and
// accepts it with p.
func accept(t testing.TB, lch *rdmacm.EventChannel, p *rdmacm.ConnParam) (*conn, rdmacm.Event) {
	t.Helper()
	ev := nextEvent(t, lch, rdmacm.EventConnectRequest)
	c := makeQP(t, ev.ID, lch)
	require.NoError(t, ev.ID.Accept(p))
	return c, ev
}

// waitWC waits for the next completion of c's CQ, which must succeed.
func (c *conn) waitWC(t testing.TB) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 1)
	n, err := c.cq.Wait(ctx, wcs)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, verbs.WCSuccess, wcs[0].Status, "completion %+v", wcs[0])
	return wcs[0]
}
