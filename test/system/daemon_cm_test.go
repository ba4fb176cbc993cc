package system

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCMToolsThroughDaemon runs softnic rping (IPv4 and IPv6) and softnic
// perf write_bw -R and send_bw -R as user nobody through daemons on both
// veth ends: the connection
// manager runs in the daemons (rdmacm's remote mode), the data moves on
// the programs' QPs as for any daemon client.
func TestCMToolsThroughDaemon(t *testing.T) {
	v := newServedVeth(t)
	for _, a := range []string{v.p.A.Addr4().String(), v.p.A.Addr6().String()} {
		srv := v.asNobody(&v.p.A, "rping", "-s", "-v", "-a", a, "-C", "50", "-S", "4000")
		var sout strings.Builder
		srv.Stdout, srv.Stderr = &sout, &sout
		require.NoError(t, srv.Start())
		cout, cerr := rpingClientWhenListening(t, func() *exec.Cmd {
			return v.asNobody(&v.p.B, "rping", "-c", "-vV", "-a", a, "-C", "50", "-S", "4000")
		})
		serr := srv.Wait()
		require.True(t, cerr == nil && serr == nil, "rping to %s: client %v:\n%s\nserver %v:\n%s\ndaemon A:\n%s\ndaemon B:\n%s",
			a, cerr, cout, serr, sout.String(), v.logs[0].String(), v.logs[1].String())
		assert.Equal(t, 50, strings.Count(cout, "ping data: rdma-ping-"), cout)
		assert.Contains(t, cout, "ping data: rdma-ping-49: ")
		assert.Equal(t, 50, strings.Count(sout.String(), "server ping data: rdma-ping-"), sout.String())
		assert.Contains(t, sout.String(), "server DISCONNECT EVENT...")
	}

	for _, tt := range []string{"write_bw", "send_bw"} {
		// write_bw on four QPs: five IDs a side, the exchange's and the
		// test's.
		cmd, iters := "perf "+tt+" -R -n 400 -p 18611 --softnic-stats", uint64(400)
		if tt == "write_bw" {
			cmd, iters = cmd+" -q 4", 4*400 // perftest counts every QP's
		}
		out := v.run(toolPair{tt + " -R", cmd, cmd})
		require.False(t, strings.HasPrefix(out[0], "FAILED") || strings.HasPrefix(out[1], "FAILED"),
			"%s -R through the daemon:\nserver:\n%s\nclient:\n%s\ndaemon A:\n%s\ndaemon B:\n%s", tt, out[0], out[1],
			v.logs[0].String(), v.logs[1].String())
		requireBWResult(t, tt+" -R server", out[0], 65536, iters)
		requireBWResult(t, tt+" -R client", out[1], 65536, iters)
		require.Contains(t, out[1], "the device is the daemon's", "%s -R went through the daemon", tt)
		t.Logf("%s -R: %s", tt, bwLine.FindString(out[1]))
	}

	// Every program went through its end's daemon, and its session ended.
	for i, l := range v.logs {
		require.Eventually(t, func() bool {
			s := l.String()
			return strings.Count(s, "session started") >= 4 && strings.Count(s, "session started") == strings.Count(s, "session ended")
		}, 10*time.Second, 10*time.Millisecond, "daemon %d's sessions:\n%s", i, l.String())
	}
}

// TestRpingClientKilledThroughDaemon kills an rping client mid-run: its
// daemon ends the session, its IDs first (their QPs to ERR, a DREQ to the
// peer), then its QPs. The server hears it, by DISCONNECTED or by an
// error completion of an RDMA operation to the dead client (as the real
// rping does when a client dies), and ends rather than hang.
func TestRpingClientKilledThroughDaemon(t *testing.T) {
	v := newServedVeth(t)
	a4 := v.p.A.Addr4().String()
	srv := v.asNobody(&v.p.A, "rping", "-s", "-v", "-a", a4)
	var sout syncbuf.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	require.NoError(t, srv.Start())
	cout := &syncbuf.Buffer{}
	var cli *exec.Cmd
	var exited chan error
	require.Eventually(t, func() bool {
		// Until the server listens, the client is refused and ends; one
		// that runs is waited for, however slowly it starts.
		cli = v.asNobody(&v.p.B, "rping", "-c", "-v", "-a", a4, "-C", "1000000")
		cout = &syncbuf.Buffer{}
		cli.Stdout, cli.Stderr = cout, cout
		require.NoError(t, cli.Start())
		exited = make(chan error, 1)
		go func(c *exec.Cmd, ch chan error) { ch <- c.Wait() }(cli, exited)
		for {
			if strings.Count(cout.String(), "ping data: rdma-ping-") >= 20 {
				return true
			}
			select {
			case <-exited:
				return false
			case <-time.After(20 * time.Millisecond):
			}
		}
	}, 2*time.Minute, 100*time.Millisecond, "the client never pinged:\n%s", cout.String())
	require.NoError(t, cli.Process.Kill())
	<-exited

	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case err := <-done:
		t.Logf("server after the client's death (%v):\n%s", err, lastLines(sout.String(), 3))
	case <-time.After(30 * time.Second):
		srv.Process.Kill()
		t.Fatalf("the server did not hear the killed client's disconnection:\n%s", lastLines(sout.String(), 10))
	}
	assert.Regexp(t, `server DISCONNECT EVENT|cq completion failed status`, sout.String())
	for i, l := range v.logs {
		require.Eventually(t, func() bool {
			s := l.String()
			return strings.Count(s, "session started") == strings.Count(s, "session ended")
		}, 10*time.Second, 10*time.Millisecond, "daemon %d's sessions:\n%s", i, l.String())
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
