package rdmacm_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/rdmacm/rdmacmtest"
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

// nextEvent returns ch's next event, which must be of type want.
func nextEvent(t testing.TB, ch *rdmacm.EventChannel, want rdmacm.EventType) rdmacm.Event {
	t.Helper()
	return rdmacmtest.NextEvent(t, ch, want, 10*time.Second)
}

// conn is one side's end of a connection: its ID, QP, CQ and a buffer.
type conn struct {
	id  *rdmacm.ID
	ch  *rdmacm.EventChannel
	qp  *verbs.QP
	cq  *verbs.CQ
	mr  *verbs.MR
	dev *verbs.Device
	q   *rdmacmtest.QP // qp, cq and mr
}

// makeQP gives the ID a QP on a CQ of its own and a registered buffer
// with a receive posted.
func makeQP(t testing.TB, id *rdmacm.ID, ch *rdmacm.EventChannel) *conn {
	t.Helper()
	q := rdmacmtest.NewQP(t, id)
	return &conn{id: id, ch: ch, qp: q.QP, cq: q.CQ, mr: q.MR, dev: q.Dev, q: q}
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
	return rdmacmtest.WaitWC(t, c.cq, 10*time.Second)
}
