package verbs_test

import (
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/daemon"
	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// mode is how a test reaches the devices its endpoints use.
type mode string

const (
	// inProcess: the device opened here (verbs.Open), engines and all.
	inProcess mode = "in-process"
	// throughDaemon: the same device served by a softnic daemon
	// (daemon.Server, in this test process) and reached through it
	// (client.DialDevice). Every post, poll and event of the test's endpoints
	// crosses the host interface's rings and pipes, and the engines reach
	// the test's registered memory through procmem, as they reach a
	// client's.
	throughDaemon mode = "through-daemon"
	// throughDaemonShared: throughDaemon, with the test's regions in
	// memory from Device.AllocMemory, which the daemon maps too and
	// reaches with plain copies instead of procmem (see regMR).
	throughDaemonShared mode = "through-daemon-shared"
)

// sharedDevices are the devices opened in throughDaemonShared mode.
var sharedDevices sync.Map

// forEachMode runs fn as one subtest per mode.
func forEachMode(t *testing.T, fn func(t *testing.T, m mode)) {
	for _, m := range []mode{inProcess, throughDaemon, throughDaemonShared} {
		t.Run(string(m), func(t *testing.T) { fn(t, m) })
	}
}

// closers are what a test opened, closed last first, once: by the test's
// cleanup, or earlier by a test that checks what closing leaves.
type closers struct {
	once sync.Once
	fns  []func()
}

func (c *closers) add(fn func()) { c.fns = append(c.fns, fn) }

func (c *closers) close() {
	c.once.Do(func() {
		for i := len(c.fns) - 1; i >= 0; i-- {
			c.fns[i]()
		}
	})
}

// openMode opens a device at addr on link and returns the device a test's
// endpoints use in mode m, and the engine: the in-process device that runs
// their transport (its counters, its RoCE device). In-process they are one
// device.
func openMode(t testing.TB, m mode, link roce.Link, dc verbs.Config, addr netip.Addr, cl *closers) (dev, engine *verbs.Device) {
	t.Helper()
	dc.Addrs = []netip.Addr{addr}
	engine, err := verbs.Open(link, dc)
	require.NoError(t, err)
	cl.add(func() { engine.Close() })
	if m == inProcess {
		return engine, engine
	}
	dev, _ = serve(t, engine, cl)
	if m == throughDaemonShared {
		sharedDevices.Store(dev, true)
		cl.add(func() { sharedDevices.Delete(dev) })
	}
	return dev, engine
}

// serve serves engine with a daemon and dials it.
func serve(t testing.TB, engine *verbs.Device, cl *closers) (*verbs.Device, *daemon.Server) {
	t.Helper()
	// A directory of its own, short: a socket's path has at most 107 bytes.
	dir, err := os.MkdirTemp("", "softnic-verbs")
	require.NoError(t, err)
	cl.add(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "softnic_test.sock")
	srv, err := daemon.Serve(engine, daemon.Config{Socket: sock, Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	cl.add(func() { srv.Close() })
	dev, err := client.DialDevice(sock)
	require.NoError(t, err)
	cl.add(func() { dev.Close() })
	require.True(t, dev.Remote())
	require.Nil(t, dev.RoCE(), "the dialed device runs no engine here")
	require.Equal(t, 1, srv.Sessions())
	return dev, srv
}
