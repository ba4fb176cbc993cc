package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
)

// TestMain lets the test binary play a daemon's client in another process
// (with SOFTNIC_DAEMON_CLIENT naming the socket), as an ordinary user.
func TestMain(m *testing.M) {
	if sock := os.Getenv("SOFTNIC_DAEMON_CLIENT"); sock != "" {
		os.Exit(daemonClient(sock))
	}
	os.Exit(m.Run())
}

// daemonClient makes a PD, an MR over its own heap, a CQ and a QP, says
// "ready", and holds them until its standard input closes.
func daemonClient(sock string) int {
	fail := func(err error) int { fmt.Println("error:", err); return 1 }
	c, err := client.Dial(sock)
	if err != nil {
		return fail(err)
	}
	pd, err := c.AllocPD()
	if err != nil {
		return fail(err)
	}
	buf := make([]byte, 1<<20)
	if _, err := c.RegMR(pd, buf, ibv.AccessLocalWrite|ibv.AccessRemoteWrite); err != nil {
		return fail(err)
	}
	cq, err := c.CreateCQ(16, nil, 0)
	if err != nil {
		return fail(err)
	}
	qp, err := c.CreateQP(hostifQP(pd, cq.Handle))
	if err != nil {
		return fail(err)
	}
	fmt.Printf("ready uid=%d qpn=%d\n", os.Getuid(), qp.QPN)
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// TestDaemonOnVeth runs the softnic binary as a daemon on a veth end:
// ordinary users' processes use it, a second daemon is refused, a killed
// client's session ends at once, a SIGKILLed daemon's successor starts
// over its files, and SIGTERM leaves no XDP program and no file.
func TestDaemonOnVeth(t *testing.T) {
	netnstest.Integration(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := buildSoftnic(t, ctx)
	pair := netnstest.NewT(t, netnstest.Config{})
	runDir := worldDir(t)
	sock := filepath.Join(runDir, "softnic_"+pair.A.Ifname+".sock")
	xdpAttached := func() bool {
		out, err := pair.A.Command("ip", "link", "show", "dev", pair.A.Ifname).CombinedOutput()
		require.NoError(t, err, string(out))
		return strings.Contains(string(out), "xdp")
	}
	start := func() (*exec.Cmd, *syncbuf.Buffer) { return startDaemon(t, bin, &pair.A, runDir) }
	d, dout := start()
	require.True(t, xdpAttached())

	second, err := exec.Command("ip", "netns", "exec", pair.A.Namespace, bin, "daemon", "-d", pair.A.Ifname, "--run-dir", runDir).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(second), "another softnic daemon serves this device")

	// Two ordinary users' processes at once; one is killed.
	c1, out1 := startClient(t, sock)
	c2, out2 := startClient(t, sock)
	require.Contains(t, out1, "ready uid=65534")
	require.Contains(t, out2, "ready uid=65534")
	require.NoError(t, c1.Process.Kill())
	c1.Wait()
	require.Eventually(t, func() bool {
		return strings.Contains(dout.String(), fmt.Sprintf(`msg="session ended" pid=%d`, c1.Process.Pid))
	}, time.Second, 5*time.Millisecond, "the killed client's session did not end within a second:\n%s", dout.String())
	c2.Process.Kill()
	c2.Wait()

	// SIGKILL: the XDP link dies with the process; the files stay and the
	// next daemon starts over them.
	require.NoError(t, d.Process.Kill())
	d.Wait()
	require.False(t, xdpAttached(), "XDP program left after SIGKILL")
	require.FileExists(t, sock)
	d, dout = start()
	c3, out3 := startClient(t, sock)
	require.Contains(t, out3, "ready")
	c3.Process.Kill()
	c3.Wait()

	require.NoError(t, d.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- d.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, dout.String())
	case <-time.After(10 * time.Second):
		d.Process.Kill()
		t.Fatalf("the daemon did not stop on SIGTERM:\n%s", dout.String())
	}
	assert.False(t, xdpAttached(), "XDP program left after SIGTERM")
	left, err := os.ReadDir(runDir)
	require.NoError(t, err)
	assert.Empty(t, left, "files left in the run directory")
}

// startDaemon runs bin as `softnic daemon` on end's interface with run
// directory runDir (and the flags extra), returns once it serves, and
// kills it when the test ends (a failed test leaves no daemon running).
func startDaemon(t *testing.T, bin string, end *netnstest.End, runDir string, extra ...string) (*exec.Cmd, *syncbuf.Buffer) {
	args := append([]string{"netns", "exec", end.Namespace, bin, "daemon", "-d", end.Ifname, "--run-dir", runDir}, extra...)
	cmd := exec.Command("ip", args...)
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stopDaemon(cmd) })
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "serving") }, 10*time.Second,
		20*time.Millisecond, "the daemon did not start:\n%s", out.String())
	return cmd, out
}

// stopDaemon ends a daemon with SIGTERM, so that it takes away what it
// published (its device file in /dev/infiniband too), and with SIGKILL if
// it has not stopped within 10 s.
func stopDaemon(cmd *exec.Cmd) {
	if cmd.ProcessState != nil {
		return // the test waited for it already
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// worldDir is a temporary directory every user may enter.
func worldDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "softnic-daemon-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

// startClient runs this test binary as user nobody, as the daemon's client
// on sock, and returns it once it holds its objects.
func startClient(t *testing.T, sock string) (*exec.Cmd, string) {
	bin := filepath.Join(worldDir(t), "client.test")
	self, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, self, 0o755))
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), "SOFTNIC_DAEMON_CLIENT="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the client said nothing")
	return cmd, line
}
