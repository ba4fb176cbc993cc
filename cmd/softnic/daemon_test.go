package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/daemon"
	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// useServedMem makes openServed serve the in-memory devices of
// useMemDevices (memA, memB).
func useServedMem(t *testing.T) {
	useMemDevices(t)
	saved := openServed
	openServed = func(_ context.Context, ifname, _ string, _ *slog.Logger, _ func()) (*verbs.Device, func(), error) {
		d, closeDev, err := openDevice(ifname, 0)
		return d.Verbs, closeDev, err
	}
	t.Cleanup(func() { openServed = saved })
}

// The daemon serves each interface on its socket, refuses a second daemon
// for the same device, starts over a killed one's files, and leaves none
// of its own when it stops.
func TestDaemonCommandLifecycle(t *testing.T) {
	useServedMem(t)
	dir := t.TempDir()
	// What a SIGKILLed daemon leaves: a socket file and a lock file
	// naming a dead pid.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "softnic_memA.sock"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "softnic_memA.lock"), []byte("999999\n"), 0o644))

	var logs bytes.Buffer
	cfg := daemon.Config{Mode: 0o666, Group: -1, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serveDevices(ctx, daemonOptions{ifaces: listFlag{"memA", "memB"}, runDir: dir}, cfg)
	}()
	sock := filepath.Join(dir, "softnic_memA.sock")
	c := dialWhenServed(t, sock)
	_, err := c.AllocPD()
	require.NoError(t, err)
	fi, err := os.Stat(sock)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o666), fi.Mode().Perm())
	pid, err := os.ReadFile(filepath.Join(dir, "softnic_memA.lock"))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%d\n", os.Getpid()), string(pid))

	_, err = serveDevice(context.Background(), dir, serveSpec{iface: "memA", name: "softnic_memA"}, cfg)
	require.ErrorContains(t, err, "another softnic daemon serves this device")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the daemon did not stop")
	}
	c.Close()
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, left, "files left in the run directory")
	require.Contains(t, logs.String(), "serving")
}

func TestDaemonCommandErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no interface"},
		{[]string{"-d", "x", "--mode", "999"}, "--mode"},
		{[]string{"-d", "x", "--log-level", "loud"}, "--log-level"},
		{[]string{"-d", "x", "--group", "no-such-group-here"}, "--group"},
	} {
		var out, errOut bytes.Buffer
		require.Equal(t, 2, runDaemon(c.args, &out, &errOut), "%v", c.args)
		require.Contains(t, errOut.String(), c.want)
	}
	var out, errOut bytes.Buffer
	// A device's name for its interface; an interface not there yet is
	// waited for (test/system TestDaemonWaitsForItsInterface).
	require.Equal(t, 1, runDaemon([]string{"-d", "softnic_lo", "--run-dir", t.TempDir()}, &out, &errOut))
	require.Contains(t, errOut.String(), "give -d lo")
}

func hostifQP(pd, cq uint32) hostif.CreateQPRequest {
	return hostif.CreateQPRequest{PD: pd, SendCQ: cq, RecvCQ: cq, MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
}

// serveMemAB serves the in-memory devices memA and memB in the test's
// process, as `softnic daemon -d memB -d memA` would, until the test ends,
// and returns their run directory and a session on memA once both sockets
// are there.
func serveMemAB(t *testing.T) (string, *session.Conn) {
	t.Helper()
	useServedMem(t)
	dir := t.TempDir()
	cfg := daemon.Config{Mode: 0o666, Group: -1, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveDevices(ctx, daemonOptions{ifaces: listFlag{"memB", "memA"}, runDir: dir}, cfg) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	c := dialWhenServed(t, filepath.Join(dir, "softnic_memA.sock"))
	t.Cleanup(func() { c.Close() })
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "softnic_memB.sock"))
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	return dir, c
}

// dialWhenServed connects to the daemon socket sock once a daemon starting
// up serves it.
func dialWhenServed(t *testing.T, sock string) *session.Conn {
	t.Helper()
	var c *session.Conn
	require.Eventually(t, func() bool {
		var err error
		c, err = session.Dial(sock)
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "the daemon never served %s", sock)
	return c
}
