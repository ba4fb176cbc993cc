package rdmacm_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/roce/memlink"
)

// TestMigrate moves a listener with a connect request queued to another
// channel: the request and everything after it (the new ID's ESTABLISHED
// and DISCONNECTED) come there, nothing more on the first channel; the
// client's ID migrates after connecting and gets its DISCONNECTED on its
// new channel.
func TestMigrate(t *testing.T) {
	a, b := newSides(t, memlink.Config{}, 0)
	srvAddr := netip.AddrPortFrom(addrB, 7177)
	lid, lch := listen(t, b, srvAddr)
	cli := dial(t, a, srvAddr, &rdmacm.ConnParam{RNRRetryCount: 7})
	// The request is queued on lch before the listener moves.
	require.Eventually(t, func() bool { return lch.Pending() == 1 }, 10*time.Second, time.Millisecond)
	nch := b.cm.NewEventChannel()
	assert.ErrorIs(t, lid.Migrate(nil), rdmacm.ErrInvalidArgument)
	require.NoError(t, lid.Migrate(nch))
	assert.Zero(t, lch.Pending(), "the queued request moved")
	srv, req := accept(t, nch, &rdmacm.ConnParam{RNRRetryCount: 7})
	assert.Same(t, lid, req.Listen)
	nextEvent(t, cli.ch, rdmacm.EventEstablished)
	nextEvent(t, nch, rdmacm.EventEstablished)

	cch := a.cm.NewEventChannel()
	require.NoError(t, cli.id.Migrate(cch))
	require.NoError(t, srv.id.Disconnect())
	nextEvent(t, nch, rdmacm.EventDisconnected)
	nextEvent(t, cch, rdmacm.EventDisconnected)
	assert.Zero(t, lch.Pending())
	assert.Zero(t, cli.ch.Pending())
}
