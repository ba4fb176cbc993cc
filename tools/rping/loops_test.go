package rping

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// memDevices opens two softnic devices joined by an in-memory link.
func memDevices(t *testing.T) (a, b *verbs.Device) {
	t.Helper()
	la, lb := memlink.Pair(memlink.Config{})
	a, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}})
	require.NoError(t, err)
	b, err = verbs.Open(lb, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.2")}})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close(); b.Close(); la.Close(); lb.Close() })
	return a, b
}

// side is one end of a hand-made connection: its session and what it
// printed.
type side struct {
	s              *session
	stdout, stderr bytes.Buffer
}

func newSide(t *testing.T, ctx context.Context, dev *verbs.Device, cfg Config) *side {
	t.Helper()
	sd := &side{}
	cfg.Stdout, cfg.Stderr = &sd.stdout, &sd.stderr
	initial := stateConnected
	if cfg.Server {
		initial = stateConnectRequest
	}
	sd.s = newSession(&cfg, &logger{debug: cfg.Debug, stdout: cfg.Stdout, stderr: cfg.Stderr}, newLifetime(ctx), initial)
	create := func(pd *verbs.PD, init *verbs.QPInitAttr) (*verbs.QP, error) {
		// As rdma_create_qp, leave the QP in INIT, where it takes
		// receives, with the access rights the CM gives rping's.
		qp, err := pd.CreateQP(init)
		if err != nil {
			return nil, err
		}
		return qp, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1,
			AccessFlags: verbs.AccessRemoteRead | verbs.AccessRemoteWrite},
			verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPort|verbs.QPAttrPKeyIndex)
	}
	require.NoError(t, sd.s.setupQP(dev, create))
	require.NoError(t, sd.s.setupBuffers())
	require.NoError(t, sd.s.postRecv())
	t.Cleanup(func() { sd.s.freeBuffers(); sd.s.qp.Destroy() })
	return sd
}

// connectByHand moves both QPs from INIT to RTS aimed at each other, with
// the attributes the RDMA CM gives them for rping: one READ each way,
// retries 7.
func connectByHand(t *testing.T, x, y *side) {
	t.Helper()
	gid := func(s *side) verbs.GID {
		g, err := s.s.pd.Device().GID(0)
		require.NoError(t, err)
		return g
	}
	for _, pair := range [][2]*side{{x, y}, {y, x}} {
		me, peer := pair[0], pair[1]
		require.NoError(t, me.s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024,
			DestQPN: peer.s.qp.QPN(), RQPSN: verbs.PSN(peer.s.qp.QPN()), MaxDestRdAtomic: 1, MinRNRTimer: 12,
			AV: verbs.AddressVector{DGID: gid(peer), HopLimit: 64}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
	}
	for _, me := range []*side{x, y} {
		require.NoError(t, me.s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: verbs.PSN(me.s.qp.QPN()),
			Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
				verbs.QPAttrMaxQPRdAtomic))
	}
}

// disconnectByHand does what the CM does to a side on a disconnect: its
// QP goes to error (flushing its receive) and it hears of the event.
func disconnectByHand(t *testing.T, sd *side) {
	t.Helper()
	assert.NoError(t, sd.s.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState))
	sd.s.life.disconnect()
}

// runLoops runs the server's and the client's loops over a hand-made
// connection. When either loop ends, both sides are disconnected, as that
// side's rdma_disconnect would. It returns both loops' results.
func runLoops(t *testing.T, scfg, ccfg Config) (srv, cli *side, serr, cerr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	da, db := memDevices(t)
	scfg.Server = true
	srv, cli = newSide(t, ctx, da, scfg), newSide(t, ctx, db, ccfg)
	connectByHand(t, srv, cli)
	var once sync.Once
	hangUp := func() {
		once.Do(func() {
			disconnectByHand(t, cli)
			disconnectByHand(t, srv)
		})
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		serr = srv.s.testServer()
		hangUp()
	}()
	go func() {
		defer wg.Done()
		cerr = cli.s.testClient()
		hangUp()
	}()
	wg.Wait()
	require.NoError(t, ctx.Err(), "the loops did not end")
	return srv, cli, serr, cerr
}

// TestLoops runs 100 pings with -v and -V at several sizes, from rping's
// smallest to its largest: the client prints what came back, the server
// what it read, both rping's lines for every ping, and the server ends on
// the client's disconnect as rping does.
func TestLoops(t *testing.T) {
	for _, size := range []int{MinSize, DefaultSize, 1000, 5000, BufSize - 1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			cfg := Config{Size: size, Count: 100, Verbose: true, Validate: true}
			srv, cli, serr, cerr := runLoops(t, cfg, cfg)
			require.NoError(t, cerr, "client: %s", cli.stderr.String())
			require.NoError(t, serr, "server: %s", srv.stderr.String())
			buf := make([]byte, size)
			var want, wantServer strings.Builder
			start := byte('A')
			for ping := range 100 {
				fillPing(buf, ping, start)
				start = nextLetter(start)
				fmt.Fprintf(&want, "ping data: %s\n", cString(buf))
				fmt.Fprintf(&wantServer, "server ping data: %s\n", cString(buf))
			}
			assert.Equal(t, want.String(), cli.stdout.String(), "client's -v lines")
			assert.Empty(t, cli.stderr.String(), "client's complaints")
			assert.Equal(t, wantServer.String(), srv.stdout.String(), "server's -v lines")
			assert.Equal(t, "wait for RDMA_READ_ADV state 10\n", srv.stderr.String(), "server's end")
		})
	}
}

// TestLoopsQuiet: without -v nothing goes to stdout.
func TestLoopsQuiet(t *testing.T) {
	cfg := Config{Size: DefaultSize, Count: 20}
	srv, cli, serr, cerr := runLoops(t, cfg, cfg)
	require.NoError(t, cerr)
	require.NoError(t, serr)
	assert.Empty(t, cli.stdout.String())
	assert.Empty(t, srv.stdout.String())
}

// TestLoopsClientLarger: a client advertising more than the server's sink
// holds fails the server's loop with a complaint, before any READ.
func TestLoopsClientLarger(t *testing.T) {
	srv, cli, serr, cerr := runLoops(t, Config{Size: 100}, Config{Size: 200, Count: 5, Validate: true})
	assert.Error(t, serr)
	assert.Equal(t, "client's buffer of 200 bytes does not fit the rdma buffer of 100 (-S)\n", srv.stderr.String())
	// The client then hears of the disconnect while it waits, which rping
	// counts as success.
	assert.NoError(t, cerr)
	assert.Equal(t, "wait for RDMA_WRITE_ADV state 10\n", cli.stderr.String())
}

// TestLoopsServerLarger: a server with a larger sink reads the client's
// smaller buffer and writes back its string: -V passes.
func TestLoopsServerLarger(t *testing.T) {
	srv, cli, serr, cerr := runLoops(t, Config{Size: 4000}, Config{Size: 64, Count: 10, Validate: true, Verbose: true})
	require.NoError(t, serr, srv.stderr.String())
	require.NoError(t, cerr, cli.stderr.String())
	assert.Contains(t, cli.stdout.String(), "ping data: rdma-ping-9: JKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyzA\n")
}
