package system

import (
	"bufio"
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

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/systest"
)

// TestMain lets the test binary play a daemon's client in another process
// (with SOFTNIC_DAEMON_CLIENT naming the socket), as an ordinary user.
func TestMain(m *testing.M) {
	if sock := os.Getenv("SOFTNIC_DAEMON_CLIENT"); sock != "" {
		os.Exit(daemonClient(sock))
	}
	systest.Main(m)
}

func hostifQP(pd, cq uint32) hostif.CreateQPRequest {
	return hostif.CreateQPRequest{PD: pd, SendCQ: cq, RecvCQ: cq, MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
}

// daemonClient makes a PD, an MR over its own heap, a CQ and a QP, says
// "ready", and holds them until its standard input closes.
func daemonClient(sock string) int {
	fail := func(err error) int { fmt.Println("error:", err); return 1 }
	c, err := session.Dial(sock)
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
	bin := systest.Softnic(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	runDir := systest.RootDir(t)
	sock := filepath.Join(runDir, "softnic_"+pair.A.Ifname+".sock")
	xdpAttached := func() bool {
		out, err := pair.A.Command("ip", "link", "show", "dev", pair.A.Ifname).CombinedOutput()
		require.NoError(t, err, string(out))
		return strings.Contains(string(out), "xdp")
	}
	start := func() *systest.Daemon { return systest.StartDaemon(t, bin, &pair.A, runDir) }
	d := start()
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
		return strings.Contains(d.Log.String(), fmt.Sprintf(`msg="session ended" pid=%d`, c1.Process.Pid))
	}, time.Second, 5*time.Millisecond, "the killed client's session did not end within a second:\n%s", d.Log.String())
	c2.Process.Kill()
	c2.Wait()

	// SIGKILL: the XDP link dies with the process; the files stay and the
	// next daemon starts over them.
	require.NoError(t, d.Kill())
	require.False(t, xdpAttached(), "XDP program left after SIGKILL")
	require.FileExists(t, sock)
	d = start()
	c3, out3 := startClient(t, sock)
	require.Contains(t, out3, "ready")
	c3.Process.Kill()
	c3.Wait()

	require.NoError(t, d.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- d.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, d.Log.String())
	case <-time.After(10 * time.Second):
		d.Kill()
		t.Fatalf("the daemon did not stop on SIGTERM:\n%s", d.Log.String())
	}
	assert.False(t, xdpAttached(), "XDP program left after SIGTERM")
	left, err := os.ReadDir(runDir)
	require.NoError(t, err)
	assert.Empty(t, left, "files left in the run directory")
}

// startClient runs this test binary as user nobody, as the daemon's client
// on sock, and returns it once it holds its objects.
func startClient(t *testing.T, sock string) (*exec.Cmd, string) {
	cmd := exec.Command(systest.TestBinary(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), "SOFTNIC_DAEMON_CLIENT="+sock)
	cmd.SysProcAttr = systest.Credential(systest.Nobody)
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
