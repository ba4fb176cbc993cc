package system

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/softnic/softnic/internal/systest"
)

// stockTools are Debian's packaged RDMA programs the provider runs.
var stockTools = []string{"ibv_devices", "ibv_devinfo", "ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong",
	"ibv_srq_pingpong", "ib_write_bw", "ib_send_bw", "ib_read_bw", "ib_atomic_bw", "ib_write_lat", "ib_send_lat",
	"ib_read_lat", "ibv_asyncwatch", "ss"}

// providerWorld is a daemon on each end of a veth pair, sharing one run
// directory, and softnic with its provider where user nobody may run them.
type providerWorld struct {
	bin, runDir string
	a, b        *netnstest.End
	daemons     []*systest.Daemon
	logs        []*syncbuf.Buffer // the daemons' output, a's first
	// runuser: command runs softnic exec itself as user nobody
	// (runuser -u nobody --), as a user without privileges starts it.
	runuser bool
	// pairLimit bounds one cmPair attempt; 0: 2 minutes.
	pairLimit time.Duration
}

func newProviderWorld(t *testing.T) *providerWorld {
	w, _ := newProviderWorldNet(t, netnstest.Config{})
	return w
}

// newProviderWorldNet is newProviderWorld on the pair net describes
// (Bridged: the returned World's Pair.Middle between the ends).
func newProviderWorldNet(t *testing.T, net netnstest.Config) (*providerWorld, *systest.World) {
	netnstest.RequireCommands(t, "apt-get install ibverbs-utils perftest libibverbs-dev librdmacm-dev gcc make",
		append([]string{"cc", "make", "setpriv"}, stockTools...)...)
	sw := systest.NewWorld(t, systest.Config{Provider: true, Net: net})
	return &providerWorld{bin: sw.Bin, runDir: sw.RunDir, a: &sw.Pair.A, b: &sw.Pair.B,
		daemons: []*systest.Daemon{sw.A, sw.B}, logs: []*syncbuf.Buffer{sw.A.Log, sw.B.Log}}, sw
}

// stop ends the daemons with SIGTERM and checks that they took their
// trees and device files with them.
func (w *providerWorld) stop(t *testing.T) {
	for _, d := range w.daemons {
		require.NoError(t, d.Signal(syscall.SIGTERM))
		require.NoError(t, d.Wait())
	}
	left, err := os.ReadDir(w.runDir)
	require.NoError(t, err)
	assert.Empty(t, left, "files left in the run directory")
	for _, end := range []*netnstest.End{w.a, w.b} {
		assert.NoFileExists(t, systest.DeviceFile(w.runDir, "softnic_"+end.Ifname), "device file left")
	}
}

// command runs a stock program on end's device, through softnic exec, as
// user nobody, in end's namespace. The program may lock memory without
// bound (CAP_IPC_LOCK, as a host grants RDMA programs, here because the
// daemon counts registered pages against RLIMIT_MEMLOCK, whose 8 MiB
// perftest -a passes, and a hard limit this host cannot raise). So
// softnic exec runs as root, which gives the program its /sys/class in a
// mount namespace, and setpriv makes it nobody after that: as nobody with
// an ambient capability, softnic exec would keep the capability and make
// no view (execview.go). Changing uids clears the parent-death signal
// softnic exec gave the program; --pdeathsig sets it again, so that the
// program still dies with softnic exec (killed by a test).
func (w *providerWorld) command(ctx context.Context, end *netnstest.End, argv ...string) *exec.Cmd {
	if w.runuser {
		args := append([]string{"netns", "exec", end.Namespace, "runuser", "-u", "nobody", "--",
			w.bin, "exec", "--run-dir", w.runDir, "-d", end.Ifname, "--"}, argv...)
		return exec.CommandContext(ctx, "ip", args...)
	}
	args := append([]string{"netns", "exec", end.Namespace, w.bin, "exec", "--run-dir", w.runDir, "-d", end.Ifname, "--"},
		systest.AsUserIPCLock(systest.Nobody, argv...)...)
	return exec.CommandContext(ctx, "ip", args...)
}

// pair runs a stock server on end A and its client on end B, aimed at A's
// IPv4 address once the server listens on its TCP port, and returns both
// outputs; both must succeed. A run that perftest ended for want of a fit
// of its cycle counter (perftestNoClock) is run again, up to three times in
// all.
func (w *providerWorld) pair(t *testing.T, port int, server, client []string) (string, string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		r := w.pairAttempt(t, port, server, client)
		if r.againForClock(t, attempt, client) {
			continue
		}
		require.True(t, r.serr == nil && r.cerr == nil, "%v: server %v:\n%s\nclient %v:\n%s", server, r.serr, r.sout, r.cerr, r.cout)
		return r.sout, r.cout
	}
}

// pairAttempt is one run of pair.
func (w *providerWorld) pairAttempt(t *testing.T, port int, server, client []string) pairRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv := w.command(ctx, w.a, server...)
	var sout syncbuf.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	srv.WaitDelay = 5 * time.Second // a killed server's output pipe may outlive it
	require.NoError(t, srv.Start())
	listening := func() bool {
		out, _ := w.a.Command("ss", "-Hltn", fmt.Sprintf("sport = :%d", port)).Output()
		return strings.TrimSpace(string(out)) != ""
	}
	if !assert.Eventually(t, listening, 30*time.Second, 20*time.Millisecond, "%v never listened", server) {
		srv.Process.Kill()
		srv.Wait()
		t.Fatalf("server output:\n%s", sout.String())
	}
	cli := w.command(ctx, w.b, append(client, w.a.Addr4().String())...)
	cli.WaitDelay = 5 * time.Second
	cout, cerr := cli.CombinedOutput()
	serr := srv.Wait()
	return pairRun{sout: sout.String(), cout: string(cout), serr: serr, cerr: cerr}
}

// TestStockProgramsThroughProvider runs Debian's unmodified ibv_devices,
// ibv_devinfo, the ibv_*_pingpong programs (ibv_rc_pingpong with a
// completion channel too) and perftest's bandwidth, atomic and latency
// tests between two daemons in two namespaces, as user nobody, through
// the C provider; then ibv_asyncwatch and ibv_devinfo see a port follow
// its link down and up.
func TestStockProgramsThroughProvider(t *testing.T) {
	w := newProviderWorld(t)
	t.Run("devices", w.testDevices)
	// -e: both sides sleep on their completion channels (the interposed
	// ibv_create_comp_channel, armed CQs, events through the daemon).
	pingpongs := []struct{ server, client []string }{
		{[]string{"ibv_rc_pingpong", "-g", "1", "-n", "500"}, nil},
		{[]string{"ibv_rc_pingpong", "-g", "1", "-n", "500", "-e"}, nil},
		// -N: the work requests built with ibv_wr_* (ibv_create_qp_ex);
		// -c: the receiver checks every buffer.
		{[]string{"ibv_rc_pingpong", "-g", "1", "-n", "500", "-N", "-c"}, nil},
		{[]string{"ibv_uc_pingpong", "-g", "1", "-n", "500"}, nil},
		{[]string{"ibv_ud_pingpong", "-g", "1", "-n", "500"}, nil},
		{[]string{"ibv_srq_pingpong", "-g", "1", "-n", "500"}, nil},
	}
	for _, pp := range pingpongs {
		if pp.client == nil {
			pp.client = pp.server
		}
		t.Run(strings.Join(pp.server, " "), func(t *testing.T) {
			sout, cout := w.pair(t, 18515, pp.server, pp.client)
			for _, out := range []string{sout, cout} {
				assert.Contains(t, out, "500 iters in", "a side did not finish")
			}
		})
	}
	for _, tool := range []string{"ib_write_bw", "ib_send_bw", "ib_read_bw"} {
		t.Run(tool, func(t *testing.T) {
			args := []string{tool, "-x", "1", "-n", "500"}
			sout, cout := w.pair(t, 18515, args, args)
			for _, out := range []string{sout, cout} {
				require.Greater(t, perftestLast(t, out, 65536), 0.0, "no figure:\n%s", out)
			}
		})
	}
	perftests := []struct {
		args []string
		size int
	}{
		{[]string{"ib_atomic_bw", "-n", "500"}, 8},
		{[]string{"ib_atomic_bw", "-n", "500", "-A", "FETCH_AND_ADD"}, 8},
		{[]string{"ib_write_lat", "-n", "200"}, 2},
		{[]string{"ib_send_lat", "-n", "200"}, 2},
		{[]string{"ib_read_lat", "-n", "200"}, 2},
	}
	for _, p := range perftests {
		t.Run(strings.Join(p.args, " "), func(t *testing.T) {
			args := append(p.args, "-x", "1")
			_, cout := w.pair(t, 18515, args, args)
			require.Greater(t, perftestLast(t, cout, p.size), 0.0, "no figure:\n%s", cout)
		})
	}
	// Four QPs, and every size from 2 bytes to 8 MiB (-a): each line the
	// client prints, the first and the last size checked.
	variants := []struct {
		args  []string
		sizes []int
	}{
		{[]string{"ib_write_bw", "-q", "4", "-n", "200"}, []int{65536}},
		{[]string{"ib_send_bw", "-q", "4", "-n", "200"}, []int{65536}},
		{[]string{"ib_read_bw", "-q", "4", "-n", "200"}, []int{65536}},
		{[]string{"ib_write_bw", "-a", "-n", "20"}, []int{2, 8388608}},
		{[]string{"ib_read_bw", "-a", "-n", "20"}, []int{2, 8388608}},
		{[]string{"ib_send_bw", "-a", "-n", "20"}, []int{2, 8388608}},
		{[]string{"ib_write_lat", "-a", "-n", "10"}, []int{2, 8388608}},
		{[]string{"ib_send_lat", "-a", "-n", "10"}, []int{2, 8388608}},
		{[]string{"ib_read_lat", "-a", "-n", "10"}, []int{2, 8388608}},
	}
	for _, v := range variants {
		t.Run(strings.Join(v.args, " "), func(t *testing.T) {
			args := append(v.args, "-x", "1")
			_, cout := w.pair(t, 18515, args, args)
			for _, size := range v.sizes {
				require.Greater(t, perftestLast(t, cout, size), 0.0, "no figure for %d bytes:\n%s", size, cout)
			}
		})
	}
	t.Run("port state", w.testPortState)
	w.stop(t)
}

// testDevices checks ibv_devices' list and that ibv_devinfo -v shows each
// device's GIDs as softnic devinfo does (the tree follows the GID table
// within a second).
func (w *providerWorld) testDevices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := w.command(ctx, w.a, "ibv_devices").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "softnic_"+w.a.Ifname)
	for _, end := range []*netnstest.End{w.a, w.b} {
		want, err := end.Command(w.bin, "devinfo", "-d", end.Ifname, "-v").CombinedOutput()
		require.NoError(t, err, string(want))
		wantGIDs := gidLines(string(want))
		require.NotEmpty(t, wantGIDs)
		var got []string
		assert.Eventually(t, func() bool {
			out, err := w.command(ctx, end, "ibv_devinfo", "-v").CombinedOutput()
			require.NoError(t, err, string(out))
			assert.Contains(t, string(out), "hca_id:\tsoftnic_"+end.Ifname)
			got = gidLines(string(out))
			return strings.Join(got, "\n") == strings.Join(wantGIDs, "\n")
		}, 10*time.Second, 100*time.Millisecond, "ibv_devinfo's GIDs %q, softnic devinfo's %q", got, wantGIDs)
	}
}

var gidLine = regexp.MustCompile(`(?m)^\s*GID\[\s*\d+\]:.*$`)

func gidLines(out string) []string {
	var lines []string
	for _, l := range gidLine.FindAllString(out, -1) {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return lines
}

// perftestLast returns the last figure perftest printed on its line for
// messages of size bytes: the message rate of a bandwidth test (the
// bandwidth of 20 two-byte writes rounds to 0.00 MB/s on a slow machine,
// the rate does not), the 99.9th percentile of a latency test. A figure
// before it may be -nan (t_stdev, when the variance overflows on a
// loaded machine).
func perftestLast(t *testing.T, out string, size int) float64 {
	t.Helper()
	m := regexp.MustCompile(fmt.Sprintf(`(?m)^[ \t]*%d[ \t]+\d+(?:[ \t]+(?:[\d.]+|-?nan))*[ \t]+([\d.]+)[ \t]*$`, size)).FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

func TestPerftestLast(t *testing.T) {
	bw := " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n" +
		" 2          20               0.00               0.00   \t\t   0.002398\n" +
		" 8388608    20               482.88             482.88 \t\t   0.000060\n"
	assert.Equal(t, 0.002398, perftestLast(t, bw, 2))
	assert.Equal(t, 0.00006, perftestLast(t, bw, 8388608))
	assert.Zero(t, perftestLast(t, bw, 4))
	lat := " 2       1000          3.61           11.20        3.85                4.02             0.31            5.10                    11.20   \n"
	assert.Equal(t, 11.2, perftestLast(t, lat, 2))
	loaded := " 2       200          41.65          234193.96      3378.31  \t       8582.21     \t-nan   \t\t128431.33 \t\t234193.96\n"
	assert.Equal(t, 234193.96, perftestLast(t, loaded, 2))
}
