package interop

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/test/interop/rxeguest"
)

// The checks each side of testdata/mw_peer.c makes.
const (
	mwServerChecks = 35
	mwClientChecks = 19
)

// TestInteropMemoryWindow runs testdata/mw_peer.c between softnic (as
// nobody through the daemon, softnic exec and the C provider) and rdma_rxe,
// both ways: first rxe owns the windows and softnic uses them, then the
// reverse. The owner binds type 2 windows (IBV_WR_BIND_MW, and
// ibv_wr_bind_mw on a QP of ibv_create_qp_ex) and a type 1 (ibv_bind_mw)
// over a region registered with IBV_ACCESS_MW_BIND and sends their rkeys;
// the user WRITEs and READs through each, the data checked on both sides;
// the owner ends each window, by IBV_WR_LOCAL_INV, by the user's
// IBV_WR_SEND_WITH_INV (its receive carries the rkey and says it was
// invalidated), by ibv_dealloc_mw and by ibv_wr_local_inv; the user's
// next access through the old rkey fails with IBV_WC_REM_ACCESS_ERR, and a
// denied WRITE changes nothing.
func TestInteropMemoryWindow(t *testing.T) {
	requireInteropHost(t)
	requirePeerBuild(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	e := prepareInterop(t, ctx, "snmw", interopPlan{}, rxeguest.Release{})
	e.startDaemon()
	prog, data := buildPeerProgram(t, ctx, filepath.Dir(e.bin), "mw_peer")
	script := peerScript("mw", "server", "/usr/bin/mw_peer", "server", "18800") +
		peerScript("mw", "client", "/usr/bin/mw_peer", "client", "10.77.0.1", "18801") + "echo '@@ all done'\n"
	g, err := rxeguest.Start(ctx, e.img, rxeguest.Config{Name: "snmw-peer", NetNS: e.net.BridgeNS, Tap: e.net.Taps[0],
		Addr: netip.MustParsePrefix("10.77.0.11/24"), Script: script, ScriptTimeout: 6 * time.Minute, MemoryMiB: 1024,
		Programs: map[string][]byte{"/usr/bin/mw_peer": data}})
	require.NoError(t, err)

	// softnic uses rxe's windows (its client retries until the guest's
	// server listens), then owns windows rxe uses.
	user, uerr := e.softnic(5*time.Minute, "exec", "--", prog, "client", "10.77.0.11", "18800")
	owner, oerr := e.softnic(5*time.Minute, "exec", "--", prog, "server", "18801")
	res, werr := g.Wait()
	require.NoError(t, werr)
	t.Logf("softnic using rxe's windows:\n%s\nsoftnic owning windows:\n%s\nguest (%v):\n%s", user, owner,
		res.Duration.Round(time.Second), res.Output)
	require.Zerof(t, res.ExitStatus, "guest script failed; console tail:\n%s", tailLines(res.Console, 40))
	guestOut := guestSections(t, res.Output)
	require.Contains(t, guestOut, "all done", "the guest finished its script")
	require.NoError(t, uerr, "softnic as the windows' user")
	require.NoError(t, oerr, "softnic as the windows' owner")
	checkPeerOutput(t, "rxe owning windows", guestOut["mw server"], mwServerChecks)
	checkPeerOutput(t, "softnic using rxe's windows", user, mwClientChecks)
	checkPeerOutput(t, "softnic owning windows", owner, mwServerChecks)
	checkPeerOutput(t, "rxe using softnic's windows", guestOut["mw client"], mwClientChecks)
}
