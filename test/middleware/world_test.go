package middleware

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/softnic/softnic/roce"
)

// nobody is the unprivileged user the programs run as.
const nobody = 65534

func TestMain(m *testing.M) {
	code := m.Run()
	if tools.dir != "" {
		os.RemoveAll(tools.dir)
	}
	os.Exit(code)
}

// tools are built once per test binary: softnic (static, as a release
// is), its provider and librdmacm, and testdata/mpicheck.c, in a
// root-owned directory every user may enter.
var tools struct {
	once     sync.Once
	dir      string
	bin      string // softnic
	mpicheck string // "" until mpiProgram builds it
	mpiOnce  sync.Once
	mpiErr   error
	err      error
}

func buildTools(t *testing.T) {
	t.Helper()
	tools.once.Do(func() {
		dir, err := os.MkdirTemp("", "softnic-middleware-")
		if err != nil {
			tools.err = err
			return
		}
		tools.dir = dir
		if err := os.Chmod(dir, 0o755); err != nil {
			tools.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		tools.bin = filepath.Join(dir, "softnic")
		build := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", tools.bin,
			"github.com/softnic/softnic/cmd/softnic")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			tools.err = fmt.Errorf("go build softnic: %v: %s", err, out)
			return
		}
		if out, err := exec.CommandContext(ctx, "make", "-s", "-C", filepath.Join("..", "..", "provider"),
			"O="+dir).CombinedOutput(); err != nil {
			tools.err = fmt.Errorf("make provider: %v: %s", err, out)
		}
	})
	require.NoError(t, tools.err)
}

// world is a softnic daemon on each end of a veth pair, sharing one run
// directory, as the README runs them.
type world struct {
	runDir string // root-owned, 0755
	pair   *netnstest.Pair
	a, b   *daemon
}

// daemon is one `softnic daemon`, watched: done closes when it exits.
type daemon struct {
	end  *netnstest.End
	dev  string // its device's name
	cmd  *exec.Cmd
	log  *syncbuf.Buffer
	done chan struct{}
	err  error
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
	netnstest.RequireCommands(t, "apt-get install libibverbs-dev gcc make util-linux iproute2",
		"cc", "make", "setpriv", "prlimit", "ip", "ss")
	netnstest.RequireCommands(t, "apt-get install "+install, programs...)
	buildTools(t)
	w := &world{runDir: rootDir(t)}
	w.pair = netnstest.NewT(t, netnstest.Config{MTU: 1500})
	w.a = w.startDaemon(t, &w.pair.A, daemonArgs)
	w.b = w.startDaemon(t, &w.pair.B, daemonArgs)
	return w
}

// rootDir is a temporary root-owned directory every user may enter and
// none but root may write.
func rootDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "softnic-middleware-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

// userDir is a temporary directory nobody owns.
func userDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "softnic-middleware-user-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chown(dir, nobody, nobody))
	return dir
}

// startDaemon runs `softnic daemon` on end and returns once it serves and
// its GID table holds the end's IPv4 address.
func (w *world) startDaemon(t *testing.T, end *netnstest.End, args []string) *daemon {
	d := &daemon{end: end, dev: "softnic_" + end.Ifname, log: &syncbuf.Buffer{}, done: make(chan struct{})}
	argv := append([]string{"netns", "exec", end.Namespace, tools.bin, "daemon", "-d", end.Ifname, "--run-dir", w.runDir}, args...)
	d.cmd = exec.Command("ip", argv...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	require.NoError(t, d.cmd.Start())
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() { d.stop(t, w.runDir) })
	require.Eventually(t, func() bool { return strings.Contains(d.log.String(), "serving") || d.exited() }, 20*time.Second,
		20*time.Millisecond, "the daemon on %s did not start:\n%s", end.Ifname, d.log.String())
	require.False(t, d.exited(), "the daemon on %s exited: %v\n%s", end.Ifname, d.err, d.log.String())
	want := roce.GIDFromAddr(end.Addr4())
	require.Eventually(t, func() bool {
		c, err := client.Dial(d.sock(w.runDir))
		if err != nil {
			return false
		}
		defer c.Close()
		port, err := c.QueryPort()
		if err != nil {
			return false
		}
		for i := 0; i < int(port.GIDTableLen); i++ {
			if g, err := c.QueryGID(i); err == nil && g == want {
				return true
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "the daemon on %s never had %v in its GID table", end.Ifname, end.Addr4())
	return d
}

func (d *daemon) sock(runDir string) string { return filepath.Join(runDir, d.dev+".sock") }

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// stop ends the daemon with SIGTERM (SIGKILL after 10 s) and takes away
// the device file a crashed daemon left in the host's /dev/infiniband.
func (d *daemon) stop(t *testing.T, runDir string) {
	if !d.exited() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			d.cmd.Process.Kill()
			<-d.done
		}
	}
	h := fnv.New32a()
	h.Write([]byte(runDir))
	cdev := filepath.Join("/dev/infiniband", fmt.Sprintf("%s.%08x", d.dev, h.Sum32()))
	if target, err := os.Readlink(cdev); err == nil && target == "/dev/null" {
		os.Remove(cdev)
	}
	if t.Failed() {
		t.Logf("daemon on %s (exit %v) said:\n%s", d.end.Ifname, d.err, tail(d.log.String(), 30))
	}
}

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
	args = append(args, "setpriv", fmt.Sprintf("--reuid=%d", nobody), fmt.Sprintf("--regid=%d", nobody), "--clear-groups",
		"--inh-caps=+ipc_lock", "--ambient-caps=+ipc_lock", "--pdeathsig=KILL")
	args = append(args, argv...)
	return w.command(ctx, "ip", args...)
}

// execArgs is `softnic exec` on end's device, ready for the program's
// argv.
func (w *world) execArgs(end *netnstest.End) []string {
	return []string{tools.bin, "exec", "--run-dir", w.runDir, "-d", end.Ifname, "--"}
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
			t.Logf("%s said:\n%s", name, tail(p.out.String(), 40))
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
func (w *world) listeningCM(t *testing.T, d *daemon, port int, p *proc) {
	t.Helper()
	want := regexp.MustCompile(fmt.Sprintf(`state LISTEN .*src-addr \S*:%d\b`, port))
	ok := func() bool {
		if p.exited() {
			return true
		}
		out, _ := exec.Command(tools.bin, "stat", "res", "cm_id", "--run-dir", w.runDir, "-d", d.end.Ifname).Output()
		return want.Match(out)
	}
	require.Eventually(t, ok, 30*time.Second, 20*time.Millisecond, "%s never listened on rdma_cm port %d:\n%s", p.name, port, p.out.String())
	require.False(t, p.exited(), "%s ended before it listened: %v\n%s", p.name, p.err, p.out.String())
}

// counters are a device's counters as `softnic stat -j` prints them.
type counters map[string]uint64

// stat reads d's device counters with `softnic stat -j`.
func (w *world) stat(t *testing.T, d *daemon) counters {
	t.Helper()
	out, err := exec.Command(tools.bin, "stat", "-j", "--run-dir", w.runDir, "-d", d.end.Ifname).Output()
	require.NoError(t, err, "softnic stat: %s", out)
	var devs []map[string]any
	require.NoError(t, json.Unmarshal(out, &devs), "softnic stat -j: %s", out)
	require.Len(t, devs, 1, "softnic stat -j -d %s: %s", d.end.Ifname, out)
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
func (w *world) res(t *testing.T, d *daemon) (resources, string) {
	t.Helper()
	out, err := exec.Command(tools.bin, "stat", "res", "--run-dir", w.runDir, "-d", d.end.Ifname).CombinedOutput()
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

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[%d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
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
