package rping

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/verbs"
)

var (
	serverAddr = netip.MustParseAddr("10.0.0.1")
	clientAddr = netip.MustParseAddr("10.0.0.2")
)

// cmPair returns a CM on each of two memlink devices: the server's
// (10.0.0.1) and the client's (10.0.0.2).
func cmPair(t *testing.T) (srv, cli *rdmacm.CM) {
	t.Helper()
	da, db := memDevices(t)
	var err error
	srv, err = rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{da}})
	require.NoError(t, err)
	cli, err = rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{db}})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close(); cli.Close() })
	return srv, cli
}

// outcome is what one Run printed and returned.
type outcome struct {
	stdout, stderr syncbuf.Buffer // read while the run writes them
	err            error
}

func (o *outcome) String() string {
	return fmt.Sprintf("status %d (%v)\nstdout:\n%s\nstderr:\n%s", ExitStatus(o.err), o.err, o.stdout.String(), o.stderr.String())
}

// start runs cfg on cm on a goroutine; wait returns its outcome.
func start(ctx context.Context, cm *rdmacm.CM, cfg Config) (wait func() *outcome) {
	return startInto(ctx, cm, cfg, &outcome{})
}

// startInto is start with the outcome o, which the caller may read while
// the run goes on.
func startInto(ctx context.Context, cm *rdmacm.CM, cfg Config, o *outcome) (wait func() *outcome) {
	cfg.Stdout, cfg.Stderr = &o.stdout, &o.stderr
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.err = Run(ctx, cm, cfg)
	}()
	return func() *outcome { <-done; return o }
}

func serverConfig() Config {
	cfg := DefaultConfig()
	cfg.Server, cfg.Addr = true, serverAddr
	return cfg
}

func clientConfig() Config {
	cfg := DefaultConfig()
	cfg.Addr = serverAddr
	return cfg
}

// runPair runs a server and a client to the end, the client once the
// server listens.
func runPair(t *testing.T, scfg, ccfg Config) (srv, cli *outcome) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	scm, ccm := cmPair(t)
	waitServer := start(ctx, scm, scfg)
	waitListening(t, scm)
	cli = start(ctx, ccm, ccfg)()
	srv = waitServer()
	require.NoError(t, ctx.Err(), "server:\n%v\nclient:\n%v", srv, cli)
	return srv, cli
}

// waitListening waits until the server's listening ID exists.
func waitListening(t *testing.T, cm *rdmacm.CM) {
	t.Helper()
	for i := 0; cm.IDs() == 0; i++ {
		require.Less(t, i, 1000, "the server did not listen")
		time.Sleep(time.Millisecond)
	}
}

// pingLines returns the -v lines of count pings of size bytes.
func pingLines(prefix string, count, size int) string {
	var b strings.Builder
	buf := make([]byte, size)
	start := byte('A')
	for ping := range count {
		fillPing(buf, ping, start)
		start = nextLetter(start)
		fmt.Fprintf(&b, "%s%s\n", prefix, cString(buf))
	}
	return b.String()
}

// TestRunClientServer runs rping's client and server through the RDMA CM
// with -C 100 -v -V at several sizes: every ping's line on both sides,
// both DISCONNECT lines, the server's end on the client's disconnect, exit
// status 0 on both.
func TestRunClientServer(t *testing.T) {
	for _, size := range []int{MinSize, DefaultSize, 4096, BufSize - 1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			scfg, ccfg := serverConfig(), clientConfig()
			scfg.Verbose, scfg.Size = true, size
			ccfg.Verbose, ccfg.Validate, ccfg.Count, ccfg.Size = true, true, 100, size
			srv, cli := runPair(t, scfg, ccfg)
			require.NoError(t, cli.err, "client:\n%v\nserver:\n%v", cli, srv)
			require.NoError(t, srv.err, "server:\n%v", srv)
			assert.Equal(t, pingLines("ping data: ", 100, size), cli.stdout.String())
			assert.Equal(t, "client DISCONNECT EVENT...\n", cli.stderr.String())
			assert.Equal(t, pingLines("server ping data: ", 100, size), srv.stdout.String())
			assert.Equal(t, "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n", srv.stderr.String())
		})
	}
}

// TestRunRefused connects to a port nobody listens on: the CM's REJ
// (reason 8) gives rping's three lines and status 255, in well under a
// second.
func TestRunRefused(t *testing.T) {
	_, ccm := cmPair(t)
	ccfg := clientConfig()
	ccfg.Port = 7175
	began := time.Now()
	cli := start(context.Background(), ccm, ccfg)()
	assert.Less(t, time.Since(began), time.Second)
	assert.Equal(t, 255, ExitStatus(cli.err), "%v", cli)
	assert.Equal(t, "cma event RDMA_CM_EVENT_REJECTED, error 8\nwait for CONNECTED state 4\nconnect error -1\n", cli.stderr.String())
	assert.Empty(t, cli.stdout.String())
}

// TestRunNoRoute: a client whose CM has no address of the destination's
// family fails address resolution at once, as rping over the kernel's
// rdma_cm (rdma_resolve_ip's ENETUNREACH), and perror's line says so.
func TestRunNoRoute(t *testing.T) {
	_, ccm := cmPair(t)
	ccfg := clientConfig()
	ccfg.Addr = netip.MustParseAddr("fd00::1")
	cli := start(context.Background(), ccm, ccfg)()
	assert.Equal(t, 255, ExitStatus(cli.err), "%v", cli)
	assert.Equal(t, "rdma_resolve_addr: Network is unreachable\n", cli.stderr.String())
}

// TestRunPersistent serves three clients one after the other, then two
// at once, with -P, and stops when the run is cancelled.
func TestRunPersistent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	scm, ccm := cmPair(t)
	scfg := serverConfig()
	scfg.Persistent, scfg.Verbose = true, true
	srvCtx, stop := context.WithCancel(ctx)
	waitServer := start(srvCtx, scm, scfg)
	waitListening(t, scm)
	ccfg := clientConfig()
	ccfg.Count, ccfg.Validate = 20, true
	for range 3 {
		cli := start(ctx, ccm, ccfg)()
		require.NoError(t, cli.err, "%v", cli)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli := start(ctx, ccm, ccfg)()
			assert.NoError(t, cli.err, "%v", cli)
		}()
	}
	wg.Wait()
	stop()
	srv := waitServer()
	assert.Equal(t, 130, ExitStatus(srv.err), "%v", srv)
	assert.Equal(t, 5*20, strings.Count(srv.stdout.String(), "server ping data: rdma-ping-"), "%v", srv)
	assert.Equal(t, 5, strings.Count(srv.stderr.String(), "server DISCONNECT EVENT...\n"), "%v", srv)
	assert.Zero(t, scm.IDs(), "the server's IDs left")
	assert.Zero(t, ccm.IDs(), "the clients' IDs left")
}

// TestRunSecondClientRejected: the one-connection server rejects a second
// client while it serves the first (a consumer reject, reason 28), and the
// first goes on.
func TestRunSecondClientRejected(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	scm, ccm := cmPair(t)
	waitServer := start(ctx, scm, serverConfig())
	waitListening(t, scm)
	firstCtx, stopFirst := context.WithCancel(ctx)
	ccfg := clientConfig()
	ccfg.Verbose = true
	first := start(firstCtx, ccm, ccfg)
	for i := 0; scm.IDs() < 2; i++ { // the first client's connection is there
		require.Less(t, i, 5000, "the first client did not connect")
		time.Sleep(time.Millisecond)
	}
	ccfg.Verbose, ccfg.Count = false, 1
	second := start(ctx, ccm, ccfg)()
	assert.Equal(t, 255, ExitStatus(second.err), "%v", second)
	assert.Equal(t, "cma event RDMA_CM_EVENT_REJECTED, error 28\nwait for CONNECTED state 4\nconnect error -1\n", second.stderr.String())
	stopFirst()
	assert.Equal(t, 130, ExitStatus(first().err))
	srv := waitServer()
	assert.NoError(t, srv.err, "%v", srv)
}
