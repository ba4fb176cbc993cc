package rdmacm_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/rdmacm/rdmacmtest"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

var loopback4 = netip.MustParseAddr("127.0.0.1")

// connectLocal dials dst from s and accepts on lch, then checks that data
// goes both ways.
func connectLocal(t *testing.T, s *side, dst netip.AddrPort, lch *rdmacm.EventChannel) (cli, srv *conn) {
	t.Helper()
	cli = dial(t, s, dst, &rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7})
	srv, _ = accept(t, lch, &rdmacm.ConnParam{RNRRetryCount: 7})
	nextEvent(t, cli.ch, rdmacm.EventEstablished)
	nextEvent(t, lch, rdmacm.EventEstablished)
	rdmacmtest.SendRecv(t, cli.q, srv.q, "ping", 10*time.Second)
	rdmacmtest.SendRecv(t, srv.q, cli.q, "pong", 10*time.Second)
	return cli, srv
}

// TestLoopbackBind: as the kernel's rdma_cm, an ID bound to 127.0.0.1
// has no device (a wildcard bind), listens on every device and takes
// REQs to any IPv4 address; resolving 127.0.0.1 or 0.0.0.0 gives an ID
// the first device, its local address 127.0.0.1 and its own GID as the
// peer's, and the connection runs on the device's loopback.
func TestLoopbackBind(t *testing.T) {
	a, b := newSides(t, memlink.Config{}, 0)
	lid, lch := listen(t, b, netip.AddrPortFrom(loopback4, 0))
	port := lid.LocalAddr().Port()
	assert.NotZero(t, port, "port 0 picks one")
	assert.Equal(t, loopback4, lid.LocalAddr().Addr())
	assert.Nil(t, lid.Device(), "a loopback bind attaches no device")

	for _, dst := range []netip.Addr{loopback4, netip.IPv4Unspecified()} {
		cli, srv := connectLocal(t, b, netip.AddrPortFrom(dst, port), lch)
		assert.Same(t, b.dev, cli.id.Device())
		assert.Equal(t, loopback4, cli.id.LocalAddr().Addr())
		assert.Equal(t, dst, srv.id.LocalAddr().Addr(), "the REQ's rdma_cm header names the destination as given")
		gid, err := b.dev.GID(0)
		require.NoError(t, err)
		assert.Equal(t, gid, cli.qp.Query().AV.DGID, "the peer is the device itself")
	}

	// A REQ from another host to one of the device's addresses.
	connectLocal(t, a, netip.AddrPortFrom(addrB, port), lch)

	// The port is every address's: a specific bind to it is refused.
	ch := b.cm.NewEventChannel()
	id, err := b.cm.CreateID(ch, rdmacm.PortSpaceTCP)
	require.NoError(t, err)
	assert.ErrorIs(t, id.Bind(netip.AddrPortFrom(addrB, port)), rdmacm.ErrAddrInUse)
}

// TestWildcardAndOwnAddress: a listener on 0.0.0.0 takes a connection to
// the device's own address from the device itself, which resolves
// without a route or a neighbour (the kernel's route to a local
// address).
func TestWildcardAndOwnAddress(t *testing.T) {
	_, b := newSides(t, memlink.Config{}, 0)
	c, err := rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{b.dev},
		Route: func(dst netip.Addr) (netip.Addr, error) {
			return netip.Addr{}, fmt.Errorf("asked the route to %v: %w", dst, rdmacm.ErrNoRoute)
		},
		Neighbor: func(*verbs.Device, netip.Addr, time.Duration) error { return errors.New("asked for a neighbour") }})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	s := &side{dev: b.dev, cm: c}
	lid, lch := listen(t, s, netip.AddrPortFrom(netip.IPv4Unspecified(), 7300))
	assert.Nil(t, lid.Device())
	cli, _ := connectLocal(t, s, netip.AddrPortFrom(addrB, 7300), lch)
	assert.Equal(t, netip.AddrPortFrom(addrB, cli.id.LocalAddr().Port()), cli.id.LocalAddr())
	assert.Equal(t, roce.GIDFromAddr(addrB), cli.qp.Query().AV.DGID)
}

// TestResolveAddrErrors: no route fails at once (ENETUNREACH); a
// neighbour not found within the caller's timeout is EventAddrError with
// ErrTimedOut, and the Neighbor function is given that timeout; a route
// through an interface no device has is EventAddrError with
// ErrNotOnDevice.
func TestResolveAddrErrors(t *testing.T) {
	a, _ := newSides(t, memlink.Config{}, 0)
	elsewhere := netip.MustParseAddr("192.0.2.9")
	noHost := netip.MustParseAddr("10.0.0.77")
	unrouted := netip.MustParseAddr("198.51.100.1")
	var asked []time.Duration
	c, err := rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{a.dev},
		Route: func(dst netip.Addr) (netip.Addr, error) {
			switch dst {
			case unrouted:
				return netip.Addr{}, fmt.Errorf("%v: %w", dst, rdmacm.ErrNoRoute)
			case elsewhere:
				return netip.MustParseAddr("192.0.2.1"), nil
			}
			return addrA, nil
		},
		Neighbor: func(_ *verbs.Device, peer netip.Addr, timeout time.Duration) error {
			asked = append(asked, timeout)
			if peer == noHost {
				return fmt.Errorf("no answer from %v", peer)
			}
			return nil
		}})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ch := c.NewEventChannel()
	newID := func() *rdmacm.ID {
		id, err := c.CreateID(ch, rdmacm.PortSpaceTCP)
		require.NoError(t, err)
		return id
	}
	id := newID()
	err = id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(unrouted, 1), time.Second)
	require.ErrorIs(t, err, rdmacm.ErrNoRoute)

	require.NoError(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(noHost, 1), 1500*time.Millisecond))
	ev := nextEvent(t, ch, rdmacm.EventAddrError)
	assert.ErrorIs(t, ev.Err, rdmacm.ErrTimedOut)
	assert.Equal(t, []time.Duration{1500 * time.Millisecond}, asked, "the caller's timeout")

	id = newID()
	require.NoError(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(elsewhere, 1), time.Second))
	ev = nextEvent(t, ch, rdmacm.EventAddrError)
	assert.ErrorIs(t, ev.Err, rdmacm.ErrNotOnDevice)

	id = newID()
	require.NoError(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(addrB, 1), time.Second))
	nextEvent(t, ch, rdmacm.EventAddrResolved)
	assert.Same(t, a.dev, id.Device())
}

// TestBacklogDropsREQs: a listener with a backlog of 1 holds one connect
// request not yet taken; the REQs that find it full get no answer (no
// REJ, as the kernel's CM when the ucma has no room), and their
// retransmissions come in once the program has taken the one queued:
// every connection is established.
func TestBacklogDropsREQs(t *testing.T) {
	a, b := newSides(t, memlink.Config{}, 50*time.Microsecond)
	ch := b.cm.NewEventChannel()
	lid, err := b.cm.CreateID(ch, rdmacm.PortSpaceTCP)
	require.NoError(t, err)
	require.NoError(t, lid.Bind(netip.AddrPortFrom(addrB, 7400)))
	require.NoError(t, lid.Listen(1))
	const n = 4
	var clis []*conn
	for range n {
		clis = append(clis, dial(t, a, netip.AddrPortFrom(addrB, 7400), &rdmacm.ConnParam{RetryCount: 7}))
	}
	cmc := b.dev.CM().Counters()
	require.Eventually(t, func() bool { return cmc.In.REQ.Load() > n }, 10*time.Second, time.Millisecond,
		"no REQ was sent again")
	assert.Equal(t, 1, ch.Pending(), "more requests queued than the backlog")
	// The listener's channel has its requests and their IDs' events.
	requests, established := 0, 0
	for requests < n || established < n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ev, err := ch.Get(ctx)
		cancel()
		require.NoError(t, err, "%d requests, %d established", requests, established)
		switch ev.Type {
		case rdmacm.EventConnectRequest:
			requests++
			makeQP(t, ev.ID, ch)
			require.NoError(t, ev.ID.Accept(&rdmacm.ConnParam{}))
		case rdmacm.EventEstablished:
			established++
		default:
			t.Fatalf("unexpected %v", ev.Type)
		}
	}
	for _, c := range clis {
		nextEvent(t, c.ch, rdmacm.EventEstablished)
	}
	assert.Zero(t, cmc.RejectsSent.Load(), "a request was rejected")
	assert.NotZero(t, cmc.Out.MRA.Load(), "no MRA answered a queued request")
}
