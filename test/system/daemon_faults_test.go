package system

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
)

// runningTool is a tool started in the background.
type runningTool struct {
	name string
	cmd  *exec.Cmd
	out  syncbuf.Buffer
	done chan struct{}
	err  error // once done is closed
}

// start starts softnic with args as user nobody in end's namespace; the
// test's end kills it if it still runs.
func (v *servedVeth) start(t *testing.T, name string, end *netnstest.End, args ...string) *runningTool {
	r := &runningTool{name: name, cmd: v.asNobody(end, args...), done: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	require.NoError(t, r.cmd.Start())
	go func() { r.err = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() { r.cmd.Process.Kill(); <-r.done })
	return r
}

// startPair starts a tool's server on end srv and its client on end cli,
// aimed at srv's IPv4 address, with the GID index flag gidFlag (-x or -g)
// of their IPv4 addresses.
func (v *servedVeth) startPair(t *testing.T, name string, srv, cli *netnstest.End, gidFlag string, args ...string) (*runningTool, *runningTool) {
	gs, gc := v.ia, v.ib
	if srv == &v.p.B {
		gs, gc = v.ib, v.ia
	}
	s := v.start(t, name+" server", srv, append(args, gidFlag, gs, "-d", srv.Ifname)...)
	c := v.start(t, name+" client", cli, append(args, gidFlag, gc, "-d", cli.Ifname, "--connect-wait=20s", srv.Addr4().String())...)
	return s, c
}

// waitFor polls cond until it holds or limit passes, then fails with
// msg's message (made then: the outputs it shows grow meanwhile).
func waitFor(t *testing.T, limit time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(msg())
		}
	}
}

// wait waits up to limit for the tool to exit and reports whether it did.
func (r *runningTool) wait(limit time.Duration) bool {
	select {
	case <-r.done:
		return true
	case <-time.After(limit):
		return false
	}
}

// stat runs softnic stat res -d on end's interface as user nobody.
func (v *servedVeth) stat(t *testing.T, end *netnstest.End) string {
	out, err := v.asNobody(end, "stat", "res", "-d", end.Ifname).CombinedOutput()
	require.NoError(t, err, "softnic stat: %s", out)
	return string(out)
}

// statQPs returns the qp count of stat's summary line.
func statQPs(t *testing.T, stat string) int {
	m := regexp.MustCompile(`(?m)^\d+: softnic_\S+: pd \d+ cq \d+ qp (\d+) `).FindStringSubmatch(stat)
	require.NotNil(t, m, "no summary line in softnic stat's output:\n%s", stat)
	n, _ := strconv.Atoi(m[1])
	return n
}

// sessionLine returns stat's line for the session of pid, or "".
func sessionLine(stat string, pid int) string {
	return regexp.MustCompile(fmt.Sprintf(`(?m)^dev \S+ ctxn \d+ pid %d .*$`, pid)).FindString(stat)
}

// waitTraffic waits until the tool printed its results' header (its
// measurement starts) and then until end's interface sent another 8 MB.
func waitTraffic(t *testing.T, r *runningTool, end *netnstest.End) {
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(r.out.String(), "#bytes") },
		func() string { return fmt.Sprintf("%s did not start:\n%s", r.name, r.out.String()) })
	from := txBytes(t, end)
	waitFor(t, 30*time.Second, func() bool { return txBytes(t, end) > from+8<<20 },
		func() string {
			return fmt.Sprintf("no data moves from %s; %s:\n%s", end.Ifname, r.name, r.out.String())
		})
}

func txBytes(t *testing.T, end *netnstest.End) uint64 {
	out, err := end.Command("cat", "/sys/class/net/"+end.Ifname+"/statistics/tx_bytes").Output()
	require.NoError(t, err)
	n, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	require.NoError(t, err)
	return n
}

// TestDaemonClientKilled SIGKILLs a softnic perf client while it writes:
// the daemon goes on, another pair running at the same time passes, and
// softnic stat shows the killed process's objects go.
func TestDaemonClientKilled(t *testing.T) {
	v := newServedVeth(t)
	p := v.p
	longS, long := v.startPair(t, "write_bw", &p.A, &p.B, "-x", "perf", "write_bw", "-n", "5000000", "-p", "18611")
	otherS, otherC := v.startPair(t, "send_bw", &p.A, &p.B, "-x", "perf", "send_bw", "-D", "4", "-p", "18612")
	waitTraffic(t, long, &p.B)
	waitTraffic(t, otherC, &p.B)

	before := v.stat(t, &p.B)
	line := sessionLine(before, long.cmd.Process.Pid)
	require.Regexp(t, `comm softnic pd 1 cq \d+ qp 1 cm_id 0 cm_listen 0 mr 1 `, line, "the write_bw client in softnic stat:\n%s", before)
	qps := statQPs(t, before)
	t.Logf("before the kill:\n%s", before)

	require.False(t, otherC.wait(0), "the other pair ended before the kill:\n%s", otherC.out.String())
	require.NoError(t, long.cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	var after string
	polls := 0
	waitFor(t, 10*time.Second, func() bool {
		polls++
		after = v.stat(t, &p.B)
		return sessionLine(after, long.cmd.Process.Pid) == ""
	}, func() string { return "the killed client's session is still listed:\n" + after })
	took := time.Since(killed)
	t.Logf("the killed client's objects left softnic stat %v after SIGKILL (%d stat runs):\n%s", took, polls, after)
	require.Equal(t, qps-1, statQPs(t, after), "the killed client's QP is gone, the others stay")
	require.Contains(t, v.logs[1].String(), fmt.Sprintf(`msg="session ended" pid=%d`, long.cmd.Process.Pid))

	for _, r := range []*runningTool{otherS, otherC} {
		require.True(t, r.wait(60*time.Second), "%s did not end:\n%s", r.name, r.out.String())
		require.NoError(t, r.err, "%s after the other client's kill:\n%s", r.name, r.out.String())
		requireBWResult(t, r.name, r.out.String(), 65536, 0)
	}
	// The killed client's server learns it from the TCP exchange.
	require.True(t, longS.wait(30*time.Second), "the killed client's server still runs:\n%s", longS.out.String())
	require.Error(t, longS.err, longS.out.String())
	for i, d := range v.daemons {
		require.False(t, d.Exited(), "daemon %d exited:\n%s", i, v.logs[i].String())
		require.NoError(t, d.Signal(syscall.Signal(0)), "daemon %d", i)
	}
}

// TestDaemonSIGTERMUnderLoad stops a daemon with SIGTERM while its
// clients move data: it leaves the interface and the run directory
// clean, and every tool on either side exits with an error within a
// bounded time instead of hanging.
func TestDaemonSIGTERMUnderLoad(t *testing.T) {
	v := newServedVeth(t)
	p := v.p
	// On A, through the daemon that stops: a write_bw client (it posts
	// and polls), a send_bw server and a pingpong server (they poll for
	// receives).
	wS, wC := v.startPair(t, "write_bw", &p.B, &p.A, "-x", "perf", "write_bw", "-n", "5000000", "-p", "18621")
	sS, sC := v.startPair(t, "send_bw", &p.A, &p.B, "-x", "perf", "send_bw", "-n", "5000000", "-p", "18622")
	pS, pC := v.startPair(t, "pingpong", &p.A, &p.B, "-g", "pingpong", "-n", "100000000", "-p", "18623")
	waitTraffic(t, wC, &p.A)
	waitTraffic(t, sC, &p.B)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(pC.out.String(), "remote address") },
		func() string { return "pingpong did not start:\n" + pC.out.String() })

	d := v.daemons[0]
	require.NoError(t, d.Signal(syscall.SIGTERM))
	stopped := time.Now()
	exited := make(chan error, 1)
	go func() { exited <- d.Wait() }()
	select {
	case err := <-exited:
		require.NoError(t, err, v.logs[0].String())
	case <-time.After(20 * time.Second):
		t.Fatalf("the daemon did not stop on SIGTERM under load:\n%s", v.logs[0].String())
	}
	t.Logf("the daemon exited %v after SIGTERM", time.Since(stopped))
	link, err := p.A.Command("ip", "link", "show", "dev", p.A.Ifname).CombinedOutput()
	require.NoError(t, err, string(link))
	require.NotContains(t, string(link), "xdp", "XDP program left on %s", p.A.Ifname)
	for _, f := range []string{".sock", ".lock"} {
		require.NoFileExists(t, filepath.Join(v.runDir, "softnic_"+p.A.Ifname+f))
	}
	require.FileExists(t, filepath.Join(v.runDir, "softnic_"+p.B.Ifname+".sock"), "the other daemon's socket")

	// The daemon's clients learn at once that it is gone; the write_bw
	// server on B learns it from its client's end of the TCP exchange.
	for _, r := range []*runningTool{wC, sS, pS, wS} {
		waitFor(t, 30*time.Second, func() bool { return r.wait(0) }, func() string {
			return fmt.Sprintf("%s still runs %v after its daemon's SIGTERM:\n%s", r.name, time.Since(stopped), r.out.String())
		})
		t.Logf("%s exited %v after SIGTERM: %v, %q", r.name, time.Since(stopped), r.err, lastLine(r.out.String()))
		require.Error(t, r.err, "%s ended well without its daemon:\n%s", r.name, r.out.String())
		require.Regexp(t, `(?m)^softnic (perf|pingpong): .+`, r.out.String(), "%s's error message", r.name)
		if r != wS {
			require.Contains(t, r.out.String(), "the daemon is gone", "%s's error", r.name)
		}
	}
	// The send_bw and pingpong clients on B wait for ACKs that no longer
	// come: with retry count 7 their QPs retry forever (as rxe's do, and
	// libibverbs' tools ask for 7), so perftest's stall check would end
	// the one after a minute and nothing the other. They stop on SIGINT,
	// and their daemon, which ran on, drops their QPs.
	for _, r := range []*runningTool{sC, pC} {
		require.False(t, r.wait(0), "%s ended:\n%s", r.name, r.out.String())
		require.NoError(t, r.cmd.Process.Signal(os.Interrupt))
		require.True(t, r.wait(30*time.Second), "%s did not stop on SIGINT:\n%s", r.name, r.out.String())
	}
	require.False(t, v.daemons[1].Exited(), "the other daemon exited:\n%s", v.logs[1].String())
	var stat string
	waitFor(t, 10*time.Second, func() bool { stat = v.stat(t, &p.B); return statQPs(t, stat) == 0 },
		func() string { return "the other daemon keeps the ended tools' QPs:\n" + stat })
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
