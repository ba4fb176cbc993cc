package middleware

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/internal/systest"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/roce"
)

// TestRdmaXclient runs rdma-core's rdma_xserver and rdma_xclient -c r:
// the client asks for a QP with max_inline_data 0 and posts its 16-byte
// message inline, which ConnectX and rxe allow because they round the
// inline limit up.
func TestRdmaXclient(t *testing.T) { runRdmaXclient(t, "r") }

// runRdmaXclient runs rdma_xserver and rdma_xclient with -c mode between
// the world's two daemons as an unprivileged user: both must end well
// and the client's 16 bytes reach the server.
func runRdmaXclient(t *testing.T, mode string) {
	w := newWorld(t, "rdmacm-utils", "rdma_xserver", "rdma_xclient")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := w.snapshot(t)
	srv := start(t, "rdma_xserver", w.user(ctx, &w.pair.A, "rdma_xserver", "-c", mode))
	w.listeningCM(t, w.a, 7471, srv)
	cout, cerr := combined(w.user(ctx, &w.pair.B, "rdma_xclient", "-c", mode, "-s", addr(&w.pair.A)))
	serr := srv.wait(30 * time.Second)
	sout := srv.out.String()
	require.True(t, cerr == nil && serr == nil, "client %v: %s\nserver %v: %s\nclient said:\n%s\nserver said:\n%s",
		cerr, firstError(cout), serr, firstError(sout), cout, sout)
	assert.Contains(t, cout, "rdma_xclient: end 0")
	assert.Contains(t, sout, "rdma_xserver: end 0")
	d := w.delta(t, before)
	carried(t, "the client's message", d.b, d.a, 16)
}

// TestRdmaCMSuite runs rdma-core's own rdma_cm tests (tests/test_rdmacm.py,
// which python3-pyverbs ships gzipped in /usr/share/doc/rdma-core/tests)
// through softnic exec on end A's device, as nobody: every test must run
// and pass, none skip (the suite skips what the device lacks, such as a
// network interface under /sys/class/infiniband/DEV/device/net, or
// multicast).
func TestRdmaCMSuite(t *testing.T) {
	w := newWorld(t, "python3-pyverbs", "python3", "gunzip")
	dir := rdmaCoreTests(t)
	src, err := os.ReadFile(filepath.Join(dir, "test_rdmacm.py"))
	require.NoError(t, err)
	want := len(regexp.MustCompile(`(?m)^    def test_\w+\(`).FindAll(src, -1))
	require.NotZero(t, want, "test_rdmacm.py has no tests")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before := w.snapshot(t)
	cmd := w.user(ctx, &w.pair.A, "/usr/bin/python3", filepath.Join(dir, "run_tests.py"), "--dev", w.a.Name, "--port", "1",
		"--gid", fmt.Sprint(w.gidIndex(t, w.a)), "-v", "test_rdmacm")
	out2, err := combined(cmd)
	res := string(out2)
	ran := regexp.MustCompile(`(?m)^Ran (\d+) tests?`).FindStringSubmatch(res)
	require.NotNil(t, ran, "run_tests.py said:\n%s", res)
	assert.Equal(t, fmt.Sprint(want), ran[1], "tests run of test_rdmacm.py's %d", want)
	bad := regexp.MustCompile(`(?m)^.* \.\.\. (?:skipped .*|ERROR|FAIL)$`).FindAllString(res, -1)
	assert.Empty(t, bad, "tests that did not pass")
	require.NoError(t, err, "run_tests.py: %s\n%s", firstError(res), systest.Tail(res, 40))
	assert.Regexp(t, `(?m)^OK$`, res, "the suite's verdict")
	t.Logf("test_rdmacm.py: %d tests run, all passed", want)
	d := w.delta(t, before)
	carried(t, "the suite's traffic", d.a, d.a, 1)
}

// rdmaCoreTests is a copy of rdma-core's test suite as python3-pyverbs
// ships it (gzipped, in /usr/share/doc/rdma-core/tests), unpacked in a
// root-owned directory every user may read.
func rdmaCoreTests(t *testing.T) string {
	t.Helper()
	shipped := "/usr/share/doc/rdma-core/tests"
	if _, err := os.Stat(filepath.Join(shipped, "run_tests.py")); err != nil {
		require.Fail(t, "no rdma-core test suite", "%v: apt-get install python3-pyverbs", err)
	}
	dir := filepath.Join(rootDir(t), "tests")
	out, err := exec.Command("cp", "-r", shipped, dir).CombinedOutput()
	require.NoError(t, err, "cp: %s", out)
	gz, err := filepath.Glob(filepath.Join(dir, "*.gz"))
	require.NoError(t, err)
	out, err = exec.Command("gunzip", gz...).CombinedOutput()
	require.NoError(t, err, "gunzip: %s", out)
	require.NoError(t, exec.Command("chmod", "-R", "a+rX", dir).Run())
	return dir
}

// gidIndex is the index of d's end's IPv4 address in its device's GID
// table.
func (w *world) gidIndex(t *testing.T, d *systest.Daemon) int {
	t.Helper()
	c, err := session.Dial(d.Sock)
	require.NoError(t, err)
	defer c.Close()
	port, err := c.QueryPort()
	require.NoError(t, err)
	want := roce.GIDFromAddr(d.End.Addr4())
	for i := 0; i < int(port.GIDTableLen); i++ {
		if g, err := c.QueryGID(i); err == nil && g == want {
			return i
		}
	}
	require.Fail(t, "no IPv4 GID", "%v not in %s's GID table", d.End.Addr4(), d.Name)
	return 0
}

// rpingTimeout is what rping gives rdma_resolve_addr and
// rdma_resolve_route (2000 ms each, librdmacm/examples/rping.c).
const rpingTimeout = 2 * time.Second

// TestRpingNoHost runs rping's client to an address on the link that no
// host has: address resolution must fail within rping's timeout, as the
// kernel's rdma_cm fails it (RDMA_CM_EVENT_ADDR_ERROR, -ETIMEDOUT, when
// ARP finds no one), and rping must say so and exit, without having sent
// a connection request.
func TestRpingNoHost(t *testing.T) {
	w := newWorld(t, "rdmacm-utils", "rping")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before := w.snapshot(t)
	began := time.Now()
	out, err := combined(w.user(ctx, &w.pair.B, "rping", "-c", "-a", w.absentHost().String(), "-C", "1", "-v"))
	took := time.Since(began)
	t.Logf("rping -c -a %v: %v after %v:\n%s", w.absentHost(), err, took.Round(time.Millisecond), out)
	require.Error(t, err, "rping to an absent host succeeded:\n%s", out)
	assert.Regexp(t, `cma event RDMA_CM_EVENT_ADDR_ERROR, error -\d+`, out, "rping's message")
	// Both resolutions' timeouts and rping's exit, five times over: not a
	// measurement, a bound that only a hang passes.
	assert.Less(t, took, 10*rpingTimeout, "rping took %v to give up (its timeouts are %v)", took, rpingTimeout)
	d := w.delta(t, before)
	assert.Zero(t, d.b["cm_tx_req"], "connection requests sent to an address that did not resolve")
}

// cmtimeWanted is how many connections TestCmtime makes at once: the
// issue's 10,000, or as many as this host's descriptor limit allows.
const cmtimeWanted = 10000

// cmtimeDescriptors is how many descriptors a cmtime of n connections
// holds: librdmacm gives every QP it makes without CQs two completion
// channels (ucma_create_cqs), each a descriptor, with the kernel's
// rdma_cm as with softnic's; and a few more (standard streams, the event
// channel, the provider's sessions). Each daemon holds as many for the
// program: the other ends of the channels.
func cmtimeDescriptors(n int) uint64 { return uint64(2*n + 64) }

// cmtimeConnections is cmtimeWanted, or fewer where the hard
// RLIMIT_NOFILE (root may raise it only with CAP_SYS_RESOURCE) would
// refuse cmtime's descriptors over the kernel's rdma_cm too; with the
// limit that lets cmtime hold them (prlimit's argument).
func cmtimeConnections(t *testing.T) (int, []string) {
	t.Helper()
	var lim unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &lim))
	n := cmtimeWanted
	if lim.Max < cmtimeDescriptors(n) {
		n = int((lim.Max - 64) / 2)
		t.Logf("cmtime -c %d, not %d: it holds %d descriptors, over this host's hard RLIMIT_NOFILE (%d), "+
			"which root cannot raise here without CAP_SYS_RESOURCE", n, cmtimeWanted, cmtimeDescriptors(cmtimeWanted), lim.Max)
	}
	require.GreaterOrEqual(t, n, 1000, "this host's descriptor limit (%d) is too low for cmtime", lim.Max)
	return n, []string{fmt.Sprintf("--nofile=%d:%d", lim.Max, lim.Max)}
}

// TestCmtime runs rdma-core's cmtime with 10,000 connections (fewer where
// the host's descriptor limit would refuse them over the kernel too)
// between the two daemons: every connection must be established (cmtime
// reports no failed step or rejected request), and every object must be
// gone afterwards (`softnic stat res`): on the client's device once it
// exits, on the server's all but its listening ID while it runs, and all
// once it is gone. The server's backlog is cmtime's 0: the ucma's most,
// 1,024. The daemons' descriptor bound per user is raised to what the
// connections need (--max-descriptors), as an administrator serving such
// a program would; the default is half of the daemon's limit.
func TestCmtime(t *testing.T) {
	n, limits := cmtimeConnections(t)
	w := newWorldArgs(t, []string{"--max-descriptors", fmt.Sprint(cmtimeDescriptors(n))}, "rdmacm-utils", "cmtime")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	before := w.snapshot(t)
	srv := start(t, "cmtime server", w.userWith(ctx, &w.pair.A, limits, "stdbuf", "-oL", "cmtime", "-b", addr(&w.pair.A)))
	w.listeningCM(t, w.a, 7471, srv)
	began := time.Now()
	out, err := combined(w.userWith(ctx, &w.pair.B, limits, "cmtime", "-s", addr(&w.pair.A), "-c", fmt.Sprint(n)))
	t.Logf("cmtime -c %d: %v after %v:\n%s", n, err, time.Since(began).Round(time.Millisecond), summarize(out))
	require.NoError(t, err, "cmtime: %s", firstError(out))
	failed := regexp.MustCompile(`(?m)^(?:event: .*|RDMA_CM_EVENT_\w+, error.*|failure.*|failing.*)$`).FindAllString(out, -1)
	require.Empty(t, failed, "cmtime's failed steps (%d)", len(failed))
	assert.Regexp(t, `(?m)^connect\s*:`, out, "cmtime's table")
	assert.NotContains(t, srv.out.String(), "failing connection request")

	d := w.delta(t, before)
	assert.GreaterOrEqual(t, d.a["cm_rx_req"], uint64(n), "requests the server's device received")
	assert.GreaterOrEqual(t, d.a["cm_tx_rep"], uint64(n), "replies the server's device sent")
	assert.Zero(t, d.a["cm_tx_rej"], "rejects the server's device sent")

	// The client exited: its session and every object are gone.
	w.settles(t, w.b, resources{}, "the client's device after cmtime exited")
	// The server destroys each connection's QP and ID when the client
	// disconnects: what is left is its listening ID and the PD librdmacm
	// gave the device, in its one session.
	w.settles(t, w.a, resources{"ctx": 1, "cm_id": 1, "pd": 1}, "the server's device after the client disconnected")
	srv.kill()
	w.settles(t, w.a, resources{}, "the server's device after the server ended")
}

// settles waits (up to a minute) until d's device holds what want says.
func (w *world) settles(t *testing.T, d *systest.Daemon, want resources, what string) {
	t.Helper()
	var last string
	ok := func() bool {
		r, out := w.res(t, d)
		last = out
		return r.holds(want)
	}
	assert.Eventually(t, ok, time.Minute, 100*time.Millisecond, "%s: want %v, softnic stat res says:\n%s", what, want, last)
}

// summarize shortens cmtime's output: its repeated lines counted once.
func summarize(out string) string {
	var b strings.Builder
	seen := map[string]int{}
	var order []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if seen[l] == 0 {
			order = append(order, l)
		}
		seen[l]++
	}
	for _, l := range order {
		if seen[l] > 1 {
			fmt.Fprintf(&b, "%s [×%d]\n", l, seen[l])
		} else {
			fmt.Fprintln(&b, l)
		}
	}
	return b.String()
}
