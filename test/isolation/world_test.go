package isolation

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/softnic/softnic/roce"
)

// The unprivileged users: the attacker, and the user who must keep being
// served whatever the attacker does. Neither needs a passwd entry.
const (
	attackerUID = 65534
	otherUID    = 65533
)

// world is a softnic daemon on each end of a veth pair, as the README
// runs them (socket mode 0666, every local user served), with softnic, its
// provider and the test's programs in a root-owned directory every user
// may enter.
type world struct {
	dir    string // root-owned, 0755
	bin    string // softnic
	runDir string // root-owned, 0755, as the daemon's run directory must be
	pair   *netnstest.Pair
	a, b   *daemonProc

	once    sync.Once
	testBin string // this test binary, where other users may run it
}

// daemonProc is one `softnic daemon`, watched: done closes when it exits,
// with err its exit (a crash shows as a signal or Go's exit status 2).
type daemonProc struct {
	end  *netnstest.End
	sock string
	cmd  *exec.Cmd
	log  *syncbuf.Buffer
	done chan struct{}
	err  error
}

// newWorld builds softnic (static, as a release is) and the provider,
// makes the veth pair and starts a daemon on each end.
func newWorld(t *testing.T) *world {
	netnstest.Integration(t)
	netnstest.RequireCommands(t, "apt-get install libibverbs-dev gcc make util-linux iproute2", "cc", "make", "setpriv", "ip")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w := &world{dir: worldDir(t)}
	w.bin = filepath.Join(w.dir, "softnic")
	build := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", w.bin,
		"github.com/softnic/softnic/cmd/softnic")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build softnic: %s", out)
	out, err = exec.CommandContext(ctx, "make", "-s", "-C", filepath.Join("..", "..", "provider"), "O="+w.dir).CombinedOutput()
	require.NoError(t, err, "make provider: %s", out)
	w.pair = netnstest.NewT(t, netnstest.Config{MTU: 1500})
	w.runDir = worldDir(t)
	w.a = w.startDaemon(t, &w.pair.A)
	w.b = w.startDaemon(t, &w.pair.B)
	return w
}

// worldDir is a temporary root-owned directory every user may enter and
// none but root may write.
func worldDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "softnic-isolation-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

// userDir is a temporary directory owned by uid, mode 0700.
func userDir(t *testing.T, uid int) string {
	dir, err := os.MkdirTemp("", "softnic-isolation-user-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chown(dir, uid, uid))
	return dir
}

// startDaemon runs `softnic daemon` on end and returns once it serves and
// its GID table holds the end's IPv4 address; the test's end stops it.
func (w *world) startDaemon(t *testing.T, end *netnstest.End) *daemonProc {
	d := &daemonProc{end: end, sock: filepath.Join(w.runDir, "softnic_"+end.Ifname+".sock"), log: &syncbuf.Buffer{},
		done: make(chan struct{})}
	d.cmd = exec.Command("ip", "netns", "exec", end.Namespace, w.bin, "daemon", "-d", end.Ifname, "--run-dir", w.runDir)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	require.NoError(t, d.cmd.Start())
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() { d.stop(t, w.runDir) })
	require.Eventually(t, func() bool { return strings.Contains(d.log.String(), "serving") || d.exited() }, 20*time.Second,
		20*time.Millisecond, "the daemon on %s did not start:\n%s", end.Ifname, d.log.String())
	require.False(t, d.exited(), "the daemon on %s exited: %v\n%s", end.Ifname, d.err, d.log.String())
	require.Eventually(t, func() bool {
		c, err := client.Dial(d.sock)
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = gidIndex(c, roce.GIDFromAddr(end.Addr4()))
		return err == nil
	}, 20*time.Second, 50*time.Millisecond, "the daemon on %s never had %v in its GID table", end.Ifname, end.Addr4())
	return d
}

// exited reports whether the daemon's process is gone.
func (d *daemonProc) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// stop ends the daemon with SIGTERM (SIGKILL after 10 s), and takes away
// its device file if a crashed daemon left it: /dev/infiniband is the
// host's.
func (d *daemonProc) stop(t *testing.T, runDir string) {
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
	cdev := filepath.Join("/dev/infiniband", fmt.Sprintf("softnic_%s.%08x", d.end.Ifname, h.Sum32()))
	if target, err := os.Readlink(cdev); err == nil && target == "/dev/null" {
		os.Remove(cdev)
	}
	if t.Failed() {
		t.Logf("daemon on %s (exit %v) said:\n%s", d.end.Ifname, d.err, tail(d.log.String(), 40))
	}
}

// alive fails the test unless the daemon still runs and serves a new
// session (root's, which no user limit refuses).
func (d *daemonProc) alive(t *testing.T, when string) {
	t.Helper()
	if d.exited() {
		t.Errorf("%s: the daemon on %s is gone: %v\n%s", when, d.end.Ifname, d.err, crash(d.log.String()))
		return
	}
	c, err := dialWithin(d.sock, 10*time.Second)
	if err != nil {
		t.Errorf("%s: the daemon on %s serves no new session: %v", when, d.end.Ifname, err)
		return
	}
	c.Close()
}

// crash returns the lines of a Go program's output from where it says
// why it crashed, up to 20, or its last 40 lines.
func crash(out string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		for _, p := range []string{"fatal error:", "panic:", "unexpected fault", "SIGSEGV", "runtime: "} {
			if strings.HasPrefix(l, p) {
				return strings.Join(lines[i:min(i+20, len(lines))], "\n")
			}
		}
	}
	return tail(out, 40)
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[%d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// errNoReply is a call the daemon did not answer within its bound.
var errNoReply = errors.New("no reply")

// dialWithin is client.Dial bounded by d: a daemon that stopped accepting
// leaves the connection in its backlog, and the hello unanswered.
func dialWithin(sock string, d time.Duration) (*client.Conn, error) {
	type result struct {
		c   *client.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := client.Dial(sock)
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-time.After(d):
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, fmt.Errorf("hello on %s: %w within %v", sock, errNoReply, d)
	}
}

// userCommand runs argv on end's device through `softnic exec`, as uid,
// in end's namespace (where a stock program's TCP exchange runs). The
// program sees the devices through SYSFS_PATH (--sysfs env), not in a
// user namespace, as an attacker who sets the variables himself: there a
// set-user-ID program it runs gains root's rights.
func (w *world) userCommand(ctx context.Context, end *netnstest.End, uid int, argv ...string) *exec.Cmd {
	args := append([]string{"netns", "exec", end.Namespace, "setpriv", fmt.Sprintf("--reuid=%d", uid),
		fmt.Sprintf("--regid=%d", uid), "--clear-groups", w.bin, "exec", "--run-dir", w.runDir, "--sysfs", "env",
		"-d", end.Ifname, "--"}, argv...)
	return exec.CommandContext(ctx, "ip", args...)
}

// compileC compiles testdata/NAME.c into the world's directory.
func (w *world) compileC(t *testing.T, name string, libs ...string) string {
	prog := filepath.Join(w.dir, name)
	args := append([]string{"-O1", "-Wall", "-Werror", "-o", prog, filepath.Join("testdata", name+".c")}, libs...)
	out, err := exec.Command("cc", args...).CombinedOutput()
	require.NoError(t, err, "cc %s: %s", name, out)
	return prog
}

// startRole runs this test binary as uid, with the environment env,
// playing one of the roles of roles_test.go: it reads commands on its
// stdin and answers a line each on its stdout.
func (w *world) startRole(t *testing.T, name string, uid int, env ...string) *program {
	return w.startRoleWith(t, name, uid, nil, env...)
}

// startRoleWith is startRole with attr's capabilities (AmbientCaps) for
// the role's process.
func (w *world) startRoleWith(t *testing.T, name string, uid int, attr *syscall.SysProcAttr, env ...string) *program {
	return w.startRoleVia(t, name, uid, attr, nil, env...)
}

// startRoleVia is startRoleWith, the test binary run through the command
// via (e.g. unshare -Ur) when not nil.
func (w *world) startRoleVia(t *testing.T, name string, uid int, attr *syscall.SysProcAttr, via []string, env ...string) *program {
	w.once.Do(func() {
		self, err := os.ReadFile(os.Args[0])
		require.NoError(t, err)
		w.testBin = filepath.Join(w.dir, "isolation.test")
		require.NoError(t, os.WriteFile(w.testBin, self, 0o755))
	})
	argv := append(append([]string{}, via...), w.testBin, "-test.run=^$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), roleEnv+"="+name), env...)
	cmd.Dir = w.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if attr != nil {
		cmd.SysProcAttr.AmbientCaps = attr.AmbientCaps
	}
	return startProgram(t, name, cmd)
}

// program is a process whose stdin the test writes and whose stdout lines
// it reads.
type program struct {
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	log   *syncbuf.Buffer // stderr, and every stdout line
}

// startProgram starts cmd; the test's end kills it if it still runs.
func startProgram(t *testing.T, name string, cmd *exec.Cmd) *program {
	p := &program{name: name, cmd: cmd, lines: make(chan string, 1024), log: &syncbuf.Buffer{}}
	cmd.Stderr = p.log
	cmd.WaitDelay = 5 * time.Second // a grandchild may hold the pipes
	var err error
	p.in, err = cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.log.Write([]byte(s.Text() + "\n"))
			p.lines <- s.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		p.in.Close()
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s said:\n%s", name, tail(p.log.String(), 40))
		}
	})
	return p
}

// send writes a line to the program's stdin.
func (p *program) send(t *testing.T, line string) {
	t.Helper()
	_, err := io.WriteString(p.in, line+"\n")
	require.NoError(t, err, "%s", p.name)
}

// next returns the program's next line; the program ending or saying
// nothing within d fails the test.
func (p *program) next(t *testing.T, d time.Duration) string {
	t.Helper()
	l, err := p.read(d)
	require.NoError(t, err)
	return l
}

// read returns the program's next line, or an error if it ended or said
// nothing within d.
func (p *program) read(d time.Duration) (string, error) {
	select {
	case l, ok := <-p.lines:
		if !ok {
			return "", fmt.Errorf("%s ended:\n%s", p.name, p.log.String())
		}
		return l, nil
	case <-time.After(d):
		return "", fmt.Errorf("%s: %w within %v", p.name, errNoReply, d)
	}
}

// round asks the transfer role for transfer number k and returns its
// failure, if any.
func (p *program) round(k int) error {
	if _, err := fmt.Fprintf(p.in, "round %d\n", k); err != nil {
		return err
	}
	l, err := p.read(2 * time.Minute)
	if err != nil {
		return err
	}
	if l != fmt.Sprintf("ok %d", k) {
		return errors.New(l)
	}
	return nil
}

// exit closes the program's stdin, reads it to its end and waits for it.
func (p *program) exit(t *testing.T) {
	t.Helper()
	p.in.Close()
	for range p.lines {
	}
	require.NoError(t, p.cmd.Wait(), "%s:\n%s", p.name, p.log.String())
}

// addrs are the IPv4 addresses of the two ends, which the roles' GIDs are.
func (w *world) addrs() (netip.Addr, netip.Addr) { return w.pair.A.Addr4(), w.pair.B.Addr4() }

// transferEnv is what the transfer role needs to move data between the
// two daemons.
func (w *world) transferEnv() []string {
	a, b := w.addrs()
	return []string{"SOCK_A=" + w.a.sock, "SOCK_B=" + w.b.sock, "ADDR_A=" + a.String(), "ADDR_B=" + b.String()}
}

// noCores keeps a crashing daemon from dumping a core: one that mapped
// terabytes of sparse memory would write for a long time.
func noCores(t *testing.T) {
	require.NoError(t, unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}))
}
