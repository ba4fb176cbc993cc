package isolation

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/softnic/softnic/internal/systest"
)

// The unprivileged users: the attacker, and the user who must keep being
// served whatever the attacker does. Neither needs a passwd entry.
const (
	attackerUID = 65534
	otherUID    = 65533
)

// world is a softnic daemon on each end of a veth pair, as the README
// runs them (socket mode 0666, every local user served), with softnic,
// its provider and the test's programs in root-owned directories every
// user may enter.
type world struct {
	dir    string // root-owned, 0755: the test's programs
	bin    string // softnic
	runDir string // root-owned, 0755, as the daemon's run directory must be
	pair   *netnstest.Pair
	a, b   *systest.Daemon
}

// newWorld builds softnic (static, as a release is) and the provider,
// makes the veth pair and starts a daemon on each end.
func newWorld(t *testing.T) *world {
	netnstest.Integration(t)
	netnstest.RequireCommands(t, "apt-get install libibverbs-dev librdmacm-dev gcc make util-linux iproute2", "cc", "make", "setpriv", "ip")
	sw := systest.NewWorld(t, systest.Config{Provider: true, AwaitGID: true})
	return &world{dir: systest.RootDir(t), bin: sw.Bin, runDir: sw.RunDir, pair: sw.Pair, a: sw.A, b: sw.B}
}

// userDir is a temporary directory owned by uid, mode 0700.
func userDir(t *testing.T, uid int) string { return systest.UserDir(t, uid) }

// alive fails the test unless the daemon d still runs and serves a new
// session (root's, which no user limit refuses).
func alive(t *testing.T, d *systest.Daemon, when string) {
	t.Helper()
	if d.Exited() {
		t.Errorf("%s: the daemon on %s is gone: %v\n%s", when, d.End.Ifname, d.Wait(), crash(d.Log.String()))
		return
	}
	c, err := dialWithin(d.Sock, 10*time.Second)
	if err != nil {
		t.Errorf("%s: the daemon on %s serves no new session: %v", when, d.End.Ifname, err)
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
	return systest.Tail(out, 40)
}

// errNoReply is a call the daemon did not answer within its bound.
var errNoReply = errors.New("no reply")

// dialWithin is session.Dial bounded by d: a daemon that stopped accepting
// leaves the connection in its backlog, and the hello unanswered.
func dialWithin(sock string, d time.Duration) (*session.Conn, error) {
	type result struct {
		c   *session.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := session.Dial(sock)
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
	args := append([]string{"netns", "exec", end.Namespace}, systest.AsUser(uid, append([]string{w.bin, "exec", "--run-dir", w.runDir,
		"--sysfs", "env", "-d", end.Ifname, "--"}, argv...)...)...)
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
	argv := append(append([]string{}, via...), systest.TestBinary(t), "-test.run=^$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), roleEnv+"="+name), env...)
	cmd.Dir = w.dir
	cmd.SysProcAttr = systest.Credential(uid)
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
			t.Logf("%s said:\n%s", name, systest.Tail(p.log.String(), 40))
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
	return []string{"SOCK_A=" + w.a.Sock, "SOCK_B=" + w.b.Sock, "ADDR_A=" + a.String(), "ADDR_B=" + b.String()}
}

// noCores keeps a crashing daemon from dumping a core: one that mapped
// terabytes of sparse memory would write for a long time.
func noCores(t *testing.T) {
	require.NoError(t, unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}))
}
