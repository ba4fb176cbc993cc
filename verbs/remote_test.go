package verbs_test

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon"
	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// OpenDevice finds a daemon's device by name in $SOFTNIC_RUN_DIR, and says
// ErrNoDevice when no daemon serves it: no socket, or a socket nobody
// listens on.
func TestOpenDeviceByName(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SOFTNIC_RUN_DIR", dir)
	require.Equal(t, dir, client.RunDir())
	names, err := client.DeviceNames()
	require.NoError(t, err)
	require.Empty(t, names)

	la, lb := memlink.Pair(memlink.Config{})
	engine, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{addrA}})
	require.NoError(t, err)
	defer func() { engine.Close(); la.Close(); lb.Close() }()
	srv, err := daemon.Serve(engine, daemon.Config{Socket: client.DeviceSocket("softnic_t0"), Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer srv.Close()
	names, err = client.DeviceNames()
	require.NoError(t, err)
	require.Equal(t, []string{"softnic_t0"}, names)

	dev, err := client.OpenDevice("softnic_t0")
	require.NoError(t, err)
	require.True(t, dev.Remote())
	gid, err := dev.GID(0)
	require.NoError(t, err)
	want, _ := engine.GID(0)
	require.Equal(t, want, gid)
	// The engines are the daemon's: their counts are not here, and asking
	// does not panic.
	require.Zero(t, dev.QPs())
	require.Zero(t, dev.Counters().RxPackets.Load())
	require.Zero(t, dev.GSICounters().TxMADs.Load())
	require.NoError(t, dev.Close())
	require.NoError(t, dev.Close(), "a second Close does nothing")

	_, err = client.OpenDevice("softnic_t1")
	require.ErrorIs(t, err, client.ErrNoDevice)
	for _, bad := range []string{"", ".", "..", "../softnic_t0", "a/b", "x\x00"} {
		_, err = client.OpenDevice(bad)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "%q", bad)
	}
	// The socket a killed daemon left behind: bound, nobody listening.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
	require.NoError(t, err)
	require.NoError(t, unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(dir, "softnic_dead.sock")}))
	unix.Close(fd)
	_, err = client.OpenDevice("softnic_dead")
	require.ErrorIs(t, err, client.ErrNoDevice)

	// A device named by softnic daemon -d IFACE:NAME is listed and opened
	// by its name; files beside the sockets are not devices.
	srv2, err := daemon.Serve(engine, daemon.Config{Socket: client.DeviceSocket("rxe0"), Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer srv2.Close()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rxe0.lock"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "file.sock"), nil, 0o644))
	names, err = client.DeviceNames()
	require.NoError(t, err)
	require.Equal(t, []string{"rxe0", "softnic_dead", "softnic_t0"}, names)
	dev, err = client.OpenDevice("rxe0")
	require.NoError(t, err)
	require.NoError(t, dev.Close())
}

// When the daemon goes, a dialed device's blocked waits end with
// session.ErrDaemonGone, and its events say EventDeviceFatal.
func TestDaemonGoneEndsWaits(t *testing.T) {
	var cl closers
	defer cl.close()
	dev, srv := servedEngine(t, &cl)
	ch := dev.NewCompChannel()
	cq, err := dev.CreateCQ(8, ch)
	require.NoError(t, err)
	require.NoError(t, cq.RequestNotify(false))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	go func() {
		_, err := cq.Wait(ctx, make([]verbs.WC, 1))
		errs <- err
	}()
	go func() {
		_, err := ch.Get(ctx)
		errs <- err
	}()
	time.Sleep(10 * time.Millisecond) // both block
	require.NoError(t, srv.Close())
	for range 2 {
		require.ErrorIs(t, <-errs, session.ErrDaemonGone)
	}
	select {
	case ev := <-dev.Events():
		require.Equal(t, verbs.EventDeviceFatal, ev.Type)
	case <-ctx.Done():
		t.Fatal("no DEVICE_FATAL event")
	}
}

// Many goroutines wait on one CQ, each for one completion, and the
// completions come one at a time: each must wake them all to look, so
// that those still waiting arm the CQ again after one took its completion
// and left. Every completion is taken once.
func TestWaitersShareACQ(t *testing.T) { forEachMode(t, testWaitersShareACQ) }

func testWaitersShareACQ(t *testing.T, m mode) {
	_, x, y := connectedPairMode(t, m, memlink.Config{}, defaultOpts())
	lmr, _ := regMR(t, x.pd, 64, allAccess)
	rmr, _ := regMR(t, y.pd, 64, allAccess)
	const waiters = 32
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	taken := make(chan verbs.WC, waiters)
	errs := make(chan error, waiters)
	for range waiters {
		go func() {
			var wc [1]verbs.WC
			n, err := x.scq.Wait(ctx, wc[:])
			if err == nil && n == 1 {
				taken <- wc[0]
			}
			errs <- err
		}()
	}
	time.Sleep(10 * time.Millisecond) // they all sleep
	for i := range uint64(waiters) {
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: i, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{lmr.SGE(0, 8)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
		select {
		case wc := <-taken:
			require.Equal(t, i, wc.WRID)
			require.Equal(t, verbs.WCSuccess, wc.Status)
		case <-ctx.Done():
			t.Fatalf("completion %d was not taken", i)
		}
		time.Sleep(100 * time.Microsecond) // the others sleep again
	}
	for range waiters {
		require.NoError(t, <-errs)
	}
}

// The daemon's AH goes when the program drops its *AH, and not before: a
// program making an AH per datagram does not fill the daemon with them.
func TestDroppedAHLeavesTheDaemon(t *testing.T) {
	var cl closers
	defer cl.close()
	dev, srv := servedEngine(t, &cl)
	mon, err := session.DialMonitor(srv.Socket())
	require.NoError(t, err)
	defer mon.Close()
	ahs := func() uint32 {
		res, err := mon.Resources()
		require.NoError(t, err)
		return res.Total.AH
	}
	pd := dev.AllocPD()
	gid, err := dev.GID(0)
	require.NoError(t, err)
	kept, err := pd.CreateAH(&verbs.AddressVector{DGID: gid, HopLimit: 64})
	require.NoError(t, err)
	for range 10 {
		_, err := pd.CreateAH(&verbs.AddressVector{DGID: gid, HopLimit: 64})
		require.NoError(t, err)
	}
	require.EqualValues(t, 11, ahs())
	require.Eventually(t, func() bool { runtime.GC(); return ahs() == 1 }, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, gid, kept.AV().DGID)
	runtime.GC()
	require.EqualValues(t, 1, ahs(), "the AH still held stays")
	runtime.KeepAlive(kept)
}

// servedEngine opens a device on one end of an in-memory link, serves it
// with a daemon.Server and dials it (serve); cl closes them all.
func servedEngine(t *testing.T, cl *closers) (*verbs.Device, *daemon.Server) {
	la, lb := memlink.Pair(memlink.Config{})
	engine, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{addrA}})
	require.NoError(t, err)
	cl.add(func() { engine.Close(); la.Close(); lb.Close() })
	return serve(t, engine, cl)
}
