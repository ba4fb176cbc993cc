package middleware

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/softnic/softnic/internal/systest"
)

// nobody is the unprivileged user the programs run as.
const nobody = systest.Nobody

func TestMain(m *testing.M) { systest.Main(m) }

// mpi is testdata/mpicheck.c, built once per test binary by mpiProgram.
var mpi struct {
	once sync.Once
	prog string
	err  error
}

// world is a softnic daemon on each end of a veth pair, sharing one run
// directory, as the README runs them, with softnic (static, as a release
// is), its provider and librdmacm in a root-owned directory every user
// may enter.
type world struct {
	bin    string // softnic
	runDir string // root-owned, 0755
	pair   *netnstest.Pair
	a, b   *systest.Daemon
}

// newWorld checks that the programs the test runs are installed (install
// names their packages), builds the tools, makes the veth pair and starts
// a daemon on each end.
func newWorld(t *testing.T, install string, programs ...string) *world {
	t.Helper()
	return newWorldArgs(t, nil, install, programs...)
}

// newWorldArgs is newWorld with more arguments for both daemons.
func newWorldArgs(t *testing.T, daemonArgs []string, install string, programs ...string) *world {
	t.Helper()
	netnstest.Integration(t)
	netnstest.RequireCommands(t, "apt-get install libibverbs-dev librdmacm-dev gcc make util-linux iproute2",
		"cc", "make", "setpriv", "prlimit", "ip", "ss")
	netnstest.RequireCommands(t, "apt-get install "+install, programs...)
	sw := systest.NewWorld(t, systest.Config{Provider: true, Args: [2][]string{daemonArgs, daemonArgs}, AwaitGID: true})
	return &world{bin: sw.Bin, runDir: sw.RunDir, pair: sw.Pair, a: sw.A, b: sw.B}
}

// rootDir is a temporary root-owned directory every user may enter and
// none but root may write.
func rootDir(t *testing.T) string { return systest.RootDir(t) }

// userDir is a temporary directory nobody owns.
func userDir(t *testing.T) string { return systest.UserDir(t, nobody) }

// user is argv run on end's device through softnic exec, as user nobody
// with CAP_IPC_LOCK (registered pages count against RLIMIT_MEMLOCK, as
// the kernel's do, and RDMA hosts grant their programs the capability), in
// end's namespace, where its TCP exchanges run. softnic exec runs as root
// and the program drops to nobody inside it, so that the program gets the
// private /sys/class view (a user namespace would take its capability).
// Its process group is its own, so that a test's end kills what it
// started, and nothing else.
func (w *world) user(ctx context.Context, end *netnstest.End, argv ...string) *exec.Cmd {
	return w.userWith(ctx, end, nil, argv...)
}

// userWith is user with the prlimit(1) options limits (as root, before
// the user changes: raising a hard limit needs root).
func (w *world) userWith(ctx context.Context, end *netnstest.End, limits []string, argv ...string) *exec.Cmd {
	args := []string{"netns", "exec", end.Namespace}
	if len(limits) > 0 {
		args = append(append(append(args, "prlimit"), limits...), "--")
	}
	args = append(args, w.execArgs(end)...)
	args = append(args, systest.AsUserIPCLock(nobody, argv...)...)
	return w.command(ctx, "ip", args...)
}

// execArgs is `softnic exec` on end's device, ready for the program's
// argv.
func (w *world) execArgs(end *netnstest.End) []string {
	return []string{w.bin, "exec", "--run-dir", w.runDir, "-d", end.Ifname, "--"}
}

// command is exec.CommandContext in a process group of its own, run from
// a directory every user may read, with the test's environment less what
// would change the programs' behaviour.
func (w *world) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second // a grandchild may hold the pipes
	cmd.Dir = "/"
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "UCX_") && !strings.HasPrefix(e, "FI_") && !strings.HasPrefix(e, "OMPI_") && !strings.HasPrefix(e, "MW_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	return cmd
}

// proc is a program started in the background, its output collected.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
	err  error
}

// start starts cmd; the test's end kills its process group if it still
// runs.
func start(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{name: name, cmd: cmd, out: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start(), name)
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s said:\n%s", name, systest.Tail(p.out.String(), 40))
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends the process group and waits for the process.
func (p *proc) kill() {
	if !p.exited() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// wait waits at most d for the program to end and returns its error, or
// kills it and says it did not end.
func (p *proc) wait(d time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		p.kill()
		return fmt.Errorf("%s did not end within %v", p.name, d)
	}
}

// listeningTCP waits until a socket in end's namespace listens on TCP
// port, or p ends; it fails the test if neither happens within 30 s.
func listeningTCP(t *testing.T, end *netnstest.End, port int, p *proc) {
	t.Helper()
	ok := func() bool {
		if p.exited() {
			return true
		}
		out, _ := end.Command("ss", "-Hltn", fmt.Sprintf("sport = :%d", port)).Output()
		return strings.TrimSpace(string(out)) != ""
	}
	require.Eventually(t, ok, 30*time.Second, 20*time.Millisecond, "%s never listened on TCP port %d:\n%s", p.name, port, p.out.String())
	require.False(t, p.exited(), "%s ended before it listened: %v\n%s", p.name, p.err, p.out.String())
}

// listeningCM waits until an rdma_cm ID on d's device listens on port (as
// `softnic stat res cm_id` shows it), or p ends.
func (w *world) listeningCM(t *testing.T, d *systest.Daemon, port int, p *proc) {
	t.Helper()
	want := regexp.MustCompile(fmt.Sprintf(`state LISTEN .*src-addr \S*:%d\b`, port))
	ok := func() bool {
		if p.exited() {
			return true
		}
		out, _ := exec.Command(w.bin, "stat", "res", "cm_id", "--run-dir", w.runDir, "-d", d.End.Ifname).Output()
		return want.Match(out)
	}
	require.Eventually(t, ok, 30*time.Second, 20*time.Millisecond, "%s never listened on rdma_cm port %d:\n%s", p.name, port, p.out.String())
	require.False(t, p.exited(), "%s ended before it listened: %v\n%s", p.name, p.err, p.out.String())
}

// counters are a device's counters as `softnic stat -j` prints them.
type counters map[string]uint64

// stat reads d's device counters with `softnic stat -j`.
func (w *world) stat(t *testing.T, d *systest.Daemon) counters {
	t.Helper()
	out, err := exec.Command(w.bin, "stat", "-j", "--run-dir", w.runDir, "-d", d.End.Ifname).Output()
	require.NoError(t, err, "softnic stat: %s", out)
	var devs []map[string]any
	require.NoError(t, json.Unmarshal(out, &devs), "softnic stat -j: %s", out)
	require.Len(t, devs, 1, "softnic stat -j -d %s: %s", d.End.Ifname, out)
	c := counters{}
	for k, v := range devs[0] {
		if f, ok := v.(float64); ok {
			c[k] = uint64(f)
		}
	}
	require.Contains(t, c, "sent_pkts", "softnic stat -j: %s", out)
	return c
}

// snapshot is both devices' counters at one moment.
type snapshot struct{ a, b counters }

func (w *world) snapshot(t *testing.T) snapshot {
	return snapshot{w.stat(t, w.a), w.stat(t, w.b)}
}

// delta is what each device counted since s.
func (w *world) delta(t *testing.T, s snapshot) snapshot {
	now := w.snapshot(t)
	d := snapshot{counters{}, counters{}}
	for k, v := range now.a {
		d.a[k] = v - s.a[k]
	}
	for k, v := range now.b {
		d.b[k] = v - s.b[k]
	}
	return d
}

// maxPMTU is the largest payload a RoCE packet carries: a transfer of n
// bytes is at least n/maxPMTU packets, whatever MTU the QPs chose.
const maxPMTU = 4096

// carried checks that a device sent and its peer received at least the
// packets that n bytes take, QP1's management datagrams (the connection
// manager's) not counted: that the bytes went through softnic, not TCP or
// shared memory.
func carried(t *testing.T, what string, from, to counters, n int64) {
	t.Helper()
	min := max(uint64((n+maxPMTU-1)/maxPMTU), 1)
	sent, rcvd := from.data("sent_pkts", "gsi_tx_mads"), to.data("rcvd_pkts", "gsi_rx_mads")
	if sent < min || rcvd < min {
		t.Errorf("%s: %d bytes take at least %d RoCE packets besides QP1's; the sender's device sent %d, the receiver's received %d: "+
			"the bytes did not go through softnic", what, n, min, sent, rcvd)
	}
}

// data is the counter pkts less the management datagrams mads of QP1.
func (c counters) data(pkts, mads string) uint64 {
	if c[mads] > c[pkts] {
		return 0
	}
	return c[pkts] - c[mads]
}

// resources is one device's line of `softnic stat res`: how many objects
// of each kind it holds.
type resources map[string]int

var resLine = regexp.MustCompile(`(?m)^\d+: (\S+): (.*)$`)

// res reads d's device's objects with `softnic stat res`.
func (w *world) res(t *testing.T, d *systest.Daemon) (resources, string) {
	t.Helper()
	out, err := exec.Command(w.bin, "stat", "res", "--run-dir", w.runDir, "-d", d.End.Ifname).CombinedOutput()
	require.NoError(t, err, "softnic stat res: %s", out)
	m := resLine.FindSubmatch(out)
	require.NotNil(t, m, "softnic stat res: %s", out)
	r := resources{}
	f := strings.Fields(string(m[2]))
	for i := 0; i+1 < len(f); i += 2 {
		n, err := strconv.Atoi(f[i+1])
		require.NoError(t, err, "softnic stat res: %s", out)
		r[f[i]] = n
	}
	return r, string(out)
}

// holds reports whether r has exactly want of the kinds want names and
// none of the other object kinds (pd, cq, qp, cm_id, mr, srq; ctx is a
// session).
func (r resources) holds(want resources) bool {
	for _, k := range []string{"pd", "cq", "qp", "cm_id", "mr", "srq", "ctx"} {
		if r[k] != want[k] {
			return false
		}
	}
	return true
}

// firstError returns the first line of out that looks like an error, or
// its first line.
func firstError(out string) string {
	re := regexp.MustCompile(`(?i)(error|fatal|fail|invalid|unable|cannot|refused|timeout|timed out|abort|not found|unavailable|no components)`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines {
		if re.MatchString(l) {
			return strings.TrimSpace(l)
		}
	}
	if len(lines) > 0 {
		return lines[0]
	}
	return ""
}

// addr is end's IPv4 address as text.
func addr(end *netnstest.End) string { return end.Addr4().String() }

// absentHost is an address on the ends' subnet that no host has.
func (w *world) absentHost() netip.Addr {
	a := w.pair.A.Addr4().As4()
	a[3] = 99
	return netip.AddrFrom4(a)
}

// combined runs cmd to its end within d and returns its output.
func combined(cmd *exec.Cmd) (string, error) {
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.String(), err
}
