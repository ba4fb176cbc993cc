package daemon_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/daemon"
	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/rdmacm/rdmacmtest"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// TestCMAddressResolutionThroughDaemon: the daemon's connection manager
// resolves with its Config's routes and neighbours, within the client's
// timeout: no route fails cm_resolve_addr at once (ENETUNREACH), a peer
// that does not answer is ADDR_ERROR with ETIMEDOUT, and a loopback
// listener and a client resolving 127.0.0.1 connect on the device.
func TestCMAddressResolutionThroughDaemon(t *testing.T) {
	la, lb := memlink.Pair(memlink.Config{})
	dev, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{addrA}})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close(); la.Close(); lb.Close() })
	unrouted, noHost := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("10.0.0.99")
	var asked []time.Duration
	asks := make(chan time.Duration, 4)
	socket := filepath.Join(t.TempDir(), "softnic_a.sock")
	srv, err := daemon.Serve(dev, daemon.Config{Socket: socket, Log: slog.New(slog.DiscardHandler),
		CMRoute: func(dst netip.Addr) (netip.Addr, error) {
			if dst == unrouted {
				return netip.Addr{}, fmt.Errorf("%v: %w", dst, rdmacm.ErrNoRoute)
			}
			return addrA, nil
		},
		CMNeighbor: func(_ *verbs.Device, peer netip.Addr, timeout time.Duration) error {
			asks <- timeout
			if peer == noHost {
				return errors.New("nobody answered")
			}
			return nil
		}})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	s := &cmSide{dev: dev, socket: socket}
	rdev, _ := s.program(t)
	// The program's routing table, as the tools' (xdplink.RouteTo): no
	// route through loopback, which the daemon resolves to its device.
	c, err := rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{rdev}, Route: func(dst netip.Addr) (netip.Addr, error) {
		if dst.IsLoopback() || dst == unrouted {
			return netip.Addr{}, fmt.Errorf("%v: %w", dst, rdmacm.ErrNoRoute)
		}
		return addrA, nil
	}})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ch := c.NewEventChannel()
	newID := func() *rdmacm.ID {
		id, err := c.CreateID(ch, rdmacm.PortSpaceTCP)
		require.NoError(t, err)
		return id
	}

	err = newID().ResolveAddr(netip.Addr{}, netip.AddrPortFrom(unrouted, 1), time.Second)
	assert.ErrorIs(t, err, rdmacm.ErrNoRoute)

	require.NoError(t, newID().ResolveAddr(netip.Addr{}, netip.AddrPortFrom(noHost, 1), 1200*time.Millisecond))
	ev := cmEvent(t, ch, rdmacm.EventAddrError)
	assert.ErrorIs(t, ev.Err, rdmacm.ErrTimedOut)
	asked = append(asked, <-asks)
	assert.Equal(t, []time.Duration{1200 * time.Millisecond}, asked, "the neighbour is given the client's timeout")

	// 127.0.0.1: a wildcard bind with no device, and the device itself.
	lch := c.NewEventChannel()
	lid, err := c.CreateID(lch, rdmacm.PortSpaceTCP)
	require.NoError(t, err)
	require.NoError(t, lid.Bind(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 7500)))
	assert.Nil(t, lid.Device(), "a loopback bind attaches no device")
	require.NoError(t, lid.Listen(0))
	cli := newID()
	require.NoError(t, cli.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 7500), time.Second))
	cmEvent(t, ch, rdmacm.EventAddrResolved)
	assert.NotNil(t, cli.Device())
	assert.Equal(t, "127.0.0.1", cli.LocalAddr().Addr().String())
	require.NoError(t, cli.ResolveRoute(time.Second))
	cmEvent(t, ch, rdmacm.EventRouteResolved)
	cq := rdmacmtest.NewQP(t, cli)
	require.NoError(t, cli.Connect(&rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
	req := cmEvent(t, lch, rdmacm.EventConnectRequest)
	sq := rdmacmtest.NewQP(t, req.ID)
	require.NoError(t, req.ID.Accept(&rdmacm.ConnParam{RNRRetryCount: 7}))
	cmEvent(t, ch, rdmacm.EventEstablished)
	cmEvent(t, lch, rdmacm.EventEstablished)
	rdmacmtest.SendRecv(t, cq, sq, "over the device's loopback", 10*time.Second)
}
