package system

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/systest"
)

// TestRsocketAsyncKeepalive runs testdata/rs_async.c between two softnic
// daemons through a bridge, as nobody. Non-blocking rsockets: a listener
// with no request gives EAGAIN; a connect to a server that has not
// accepted yet gives EINPROGRESS (so do a second connect and, EAGAIN, a
// send), and completes through rpoll once the server accepts. Then
// keepalive: with TCP_KEEPIDLE 1 s on the server's socket and every
// UDP/4791 frame dropped in the bridge, as when the peer's host is gone
// without a disconnect, the server's blocked rrecv must end with EIO, as
// rdma-core's rsockets end it: only keepalive traffic can find the loss,
// for the server sends nothing else.
func TestRsocketAsyncKeepalive(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install nftables gcc librdmacm-dev", "nft", "cc")
	w, _ := newProviderWorldNet(t, netnstest.Config{Bridged: true})
	dir, err := os.MkdirTemp("", "softnic-rsasync-") // t.TempDir's parent is closed to nobody
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	prog := filepath.Join(dir, "rs_async")
	out, err := exec.Command("cc", "-O1", "-Wall", "-Wextra", "-Werror", "-o", prog,
		filepath.Join("testdata", "rs_async.c"), "-lrdmacm").CombinedOutput()
	require.NoError(t, err, "cc rs_async.c: %s", out)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr := w.a.Addr4().String()
	srv := startStepper(t, w.command(ctx, w.a, prog, "server", addr, "7471"))
	srv.expect(t, "raccept before a request: Resource temporarily unavailable")
	srv.expect(t, "listening")
	cli := startStepper(t, w.command(ctx, w.b, prog, "client", addr, "7471"))
	cli.expect(t, "rconnect: Operation now in progress")
	cli.expect(t, "rconnect again: Operation now in progress")
	cli.expect(t, "rsend while connecting: Resource temporarily unavailable")
	cli.expect(t, "connecting")
	srv.send(t, "accept")
	cli.expect(t, "connected")
	srv.expect(t, "accepted "+w.b.Addr4().String())
	srv.expect(t, "keepalive")

	// Each connected rsocket's buffers are memory its daemon maps (the
	// provider's alloc_shared), not reached through the process's memory
	// file; they go with the sessions.
	for _, d := range w.daemons {
		assert.Equal(t, 1, sharedMappings(t, d), "rsocket buffers the daemon on %s maps", d.End.Ifname)
	}

	// Keepalive messages leave the idle server (nothing else does).
	before := rocePktsSentBy(t, w, w.a)
	require.Eventually(t, func() bool { return rocePktsSentBy(t, w, w.a) >= before+3 }, time.Minute, 100*time.Millisecond,
		"keepalive messages from the server's daemon")

	// The client killed: its daemon ends its session and its connection.
	require.NoError(t, cli.cmd.Process.Kill())
	cli.wait()
	srv.expect(t, "rrecv: 0 ") // the end of the stream, as a TCP peer's exit gives
	require.NoError(t, srv.wait(), "server")
	for _, d := range w.daemons {
		require.Eventually(t, func() bool { return sharedMappings(t, d) == 0 }, time.Minute, 50*time.Millisecond,
			"the daemon on %s still maps rsocket buffers of sessions that ended", d.End.Ifname)
	}
	w.stop(t)
}

// sharedMappings counts the mappings of the provider's shared memory
// (memfd "softnic-shared") in daemon d.
func sharedMappings(t *testing.T, d *systest.Daemon) int {
	t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", d.Cmd.Process.Pid))
	require.NoError(t, err)
	return strings.Count(string(maps), "/memfd:softnic-shared")
}

// stepper is a program that prints a line per step and reads commands.
type stepper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	seen  []string
}

func startStepper(t *testing.T, cmd *exec.Cmd) *stepper {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	cmd.WaitDelay = 5 * time.Second
	require.NoError(t, cmd.Start())
	s := &stepper{cmd: cmd, stdin: stdin, lines: make(chan string, 64)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	return s
}

// expect reads lines up to one that starts with want; a FAIL line, or
// the end of the output, fails the test.
func (s *stepper) expect(t *testing.T, want string) {
	t.Helper()
	for l := range s.lines {
		s.seen = append(s.seen, l)
		if strings.HasPrefix(l, want) {
			return
		}
		require.False(t, strings.HasPrefix(l, "FAIL"), "%s\n%s", l, strings.Join(s.seen, "\n"))
	}
	require.Failf(t, "output ended", "want %q; output:\n%s", want, strings.Join(s.seen, "\n"))
}

func (s *stepper) send(t *testing.T, line string) {
	t.Helper()
	_, err := io.WriteString(s.stdin, line+"\n")
	require.NoError(t, err)
}

func (s *stepper) wait() error {
	for l := range s.lines {
		s.seen = append(s.seen, l)
	}
	return s.cmd.Wait()
}
