package system

import (
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/syncbuf"
)

// startWatched starts c with its output collected; the channel gets its
// end. The test's end kills it.
func startWatched(t *testing.T, c *exec.Cmd) (*syncbuf.Buffer, chan error) {
	out := &syncbuf.Buffer{}
	c.Stdout, c.Stderr = out, out
	require.NoError(t, c.Start())
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	t.Cleanup(func() { c.Process.Kill() })
	return out, done
}

// A timed send_lat whose peer falls silent (its link goes down, as a
// stalled guest's NIC did in an interop run) still ends at SIGTERM: it
// used to wait out the perftest exchange's 30-minute limit for the peer's
// closing message.
func TestPerfEndsAtSIGTERMWithASilentPeer(t *testing.T) {
	bin, p, _, _ := vethSoftnic(t)
	server := p.A.Command(bin, "perf", "send_lat", "-D", "2", "-d", p.A.Ifname, "-x", "1")
	sout, sdone := startWatched(t, server)
	client := p.B.Command(bin, "perf", "send_lat", "-D", "2", "-d", p.B.Ifname, "-x", "1", "--connect-wait=20s",
		p.A.Addr4().String())
	cout, cdone := startWatched(t, client)
	require.Eventuallyf(t, func() bool { return strings.Contains(cout.String(), "t_avg") }, 20*time.Second, 50*time.Millisecond,
		"the test never started:\nclient:\n%s\nserver:\n%s", cout, sout)
	out, err := p.A.Command("ip", "link", "set", p.A.Ifname, "down").CombinedOutput()
	require.NoError(t, err, string(out))
	time.Sleep(4 * time.Second) // past the duration: each side waits for the other's closing message
	for _, s := range []struct {
		name string
		cmd  *exec.Cmd
		done chan error
		out  *syncbuf.Buffer
	}{{"server", server, sdone, sout}, {"client", client, cdone, cout}} {
		require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			require.FailNowf(t, "softnic did not end", "the %s, 10 s after SIGTERM:\n%s", s.name, s.out)
		}
	}
}

// A pingpong client whose server accepts the connection and then says
// nothing (a listener that is not ibv_rc_pingpong, or a hung one) ends
// at SIGTERM: the address exchange used to wait for its time limit.
func TestPingpongEndsAtSIGTERMWithASilentServer(t *testing.T) {
	bin, p, _, _ := vethSoftnic(t)
	var ln net.Listener
	require.NoError(t, p.A.Do(func() (err error) { ln, err = net.Listen("tcp", p.A.Addr4().String()+":18515"); return err }))
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c // held open, never written
		}
	}()
	client := p.B.Command(bin, "pingpong", "-d", p.B.Ifname, "-g", "1", p.A.Addr4().String())
	out, done := startWatched(t, client)
	select {
	case c := <-accepted:
		defer c.Close()
	case <-time.After(20 * time.Second):
		require.FailNowf(t, "the client never connected", "%s", out)
	}
	time.Sleep(500 * time.Millisecond) // into the exchange
	require.NoError(t, client.Process.Signal(syscall.SIGTERM))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		require.FailNowf(t, "softnic pingpong did not end", "10 s after SIGTERM:\n%s", out)
	}
}
