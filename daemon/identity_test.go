package daemon_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	hostsession "github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
)

// The tests here run this test binary again as the daemon's client in
// another process (roleEnv names what it plays), since what they check is
// how the daemon tells processes apart.
const roleEnv = "SOFTNIC_DAEMON_TEST_ROLE"

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(playRole(role, os.Getenv("SOFTNIC_DAEMON_TEST_SOCK")))
	}
	os.Exit(m.Run())
}

// playRole plays one client role, saying what happened a line each.
func playRole(role, sock string) int {
	switch role {
	case "foreign":
		// A process the session's socket was handed to (descriptor 3):
		// it may make objects, under the session's credentials, but not
		// register memory.
		fmt.Println(rawCommand(3, hostif.OpAllocPD), rawCommand(3, hostif.OpRegMR))
		return 0
	case "hand-on", "hand-on-other", "setuid", "exec":
	default:
		fmt.Println("no role", role)
		return 2
	}
	c, err := hostsession.Dial(sock)
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	switch role {
	case "hand-on":
		// The session's socket goes to a process of its own: a forked
		// child, as far as the daemon can tell.
		fmt.Println(handOn(c, nil))
		_, err := c.AllocPD()
		fmt.Println("own:", errText(err))
	case "hand-on-other":
		// To a process under another uid.
		fmt.Println(handOn(c, &syscall.Credential{Uid: 65534, Gid: 65534}))
		_, err := c.AllocPD()
		fmt.Println("own:", errText(err))
	case "setuid":
		if err := syscall.Setresuid(65534, 65534, 65534); err != nil {
			fmt.Println("setresuid:", err)
			return 1
		}
		_, err := c.AllocPD()
		fmt.Println("after setuid:", errText(err))
		_, err = c.AllocPD()
		fmt.Println("next:", errText(err))
	case "exec":
		// The same process execs, keeping the socket: the session was
		// its old address space's.
		fd := socketFD(c)
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			fmt.Println("fcntl:", err)
			return 1
		}
		os.Setenv(roleEnv, "exec-after")
		os.Setenv("SOFTNIC_DAEMON_TEST_FD", strconv.Itoa(fd))
		err := unix.Exec("/proc/self/exe", []string{os.Args[0], "-test.run=^$"}, os.Environ())
		fmt.Println("exec:", err)
		return 1
	}
	return 0
}

func init() {
	// After the exec: the command on the inherited socket.
	if os.Getenv(roleEnv) == "exec-after" {
		fd, _ := strconv.Atoi(os.Getenv("SOFTNIC_DAEMON_TEST_FD"))
		fmt.Println("after exec:", rawCommand(fd, hostif.OpAllocPD))
		fmt.Println("next:", rawCommand(fd, hostif.OpAllocPD))
		os.Exit(0)
	}
}

// rawCommand sends one bodiless command on the control socket fd and says
// the reply's errno ("ok", "EACCES", ...) or how the socket failed.
func rawCommand(fd int, op hostif.Op) string {
	unix.SetNonblock(fd, false) // the Go client's descriptor was the runtime poller's
	buf := make([]byte, hostif.MaxMessage)
	msg, err := hostif.Encode(buf, hostif.Header{Op: op, Seq: 99}, hostif.Empty{})
	if err != nil {
		return err.Error()
	}
	if _, err := unix.Write(fd, msg); err == unix.EPIPE || err == unix.ECONNRESET {
		return "closed"
	} else if err != nil {
		return "write: " + err.Error()
	}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 10})
	n, err := unix.Read(fd, buf)
	switch {
	case n == 0 || err == unix.ECONNRESET:
		return "closed"
	case err != nil:
		return "read: " + err.Error()
	}
	h, err := hostif.DecodeHeader(buf[:n])
	if err != nil {
		return err.Error()
	}
	if h.Status == 0 {
		return "ok"
	}
	return unix.ErrnoName(unix.Errno(-h.Status))
}

func errText(err error) string {
	var ce *hostsession.Error
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &ce):
		return unix.ErrnoName(ce.Errno)
	case errors.Is(err, hostsession.ErrDaemonGone):
		return "closed"
	}
	return err.Error()
}

// socketFD returns the session's control socket descriptor.
func socketFD(c *hostsession.Conn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	raw.Control(func(s uintptr) { fd = int(s) })
	return fd
}

// handOn runs a process of its own ("foreign") with the session's socket
// and returns what it said.
func handOn(c *hostsession.Conn, cred *syscall.Credential) string {
	dup, err := unix.Dup(socketFD(c))
	if err != nil {
		return err.Error()
	}
	f := os.NewFile(uintptr(dup), "session")
	defer f.Close()
	exe := os.Args[0]
	if cred != nil {
		// The build directory is its owner's only.
		dir, err := os.MkdirTemp("", "softnic-foreign")
		if err != nil {
			return err.Error()
		}
		defer os.RemoveAll(dir)
		exe = filepath.Join(dir, "foreign")
		if err := copyExecutable(os.Args[0], exe); err != nil {
			return err.Error()
		}
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=foreign")
	cmd.ExtraFiles = []*os.File{f}
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.Output()
	if err != nil {
		return fmt.Sprintf("foreign: %v: %s", err, out)
	}
	return "foreign: " + string(out[:len(out)-1])
}

// copyExecutable copies the program at from to to, which anyone may run,
// in a directory anyone may enter.
func copyExecutable(from, to string) error {
	data, err := os.ReadFile(from)
	if err == nil {
		err = os.Chmod(filepath.Dir(to), 0o755)
	}
	if err == nil {
		err = os.WriteFile(to, data, 0o755)
	}
	return err
}

// play runs role against the rig's daemon and returns its lines.
func play(t *testing.T, r *rig, role string, cred *syscall.Credential) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"="+role, "SOFTNIC_DAEMON_TEST_SOCK="+r.socket)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var lines []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.NoError(t, cmd.Wait(), "%s said %q", role, lines)
	return lines
}

// A process the session's socket was handed to (a forked child, as far
// as the daemon can tell) may make the session's objects under its
// credentials, as through the kernel's uverbs ioctl path, but not name
// memory: registering gets EACCES. Under another uid every command gets
// EACCES. The session goes on serving its own process.
func TestForeignCommands(t *testing.T) {
	r := newRig(t)
	require.Equal(t, []string{"foreign: ok EACCES", "own: ok"}, play(t, r, "hand-on", nil))
	require.EqualValues(t, 1, counter(t, r, "daemon_foreign_commands"))
	if os.Geteuid() != 0 {
		t.Skip("needs root: the foreign process runs as nobody")
	}
	require.Equal(t, []string{"foreign: EACCES EACCES", "own: ok"}, play(t, r, "hand-on-other", nil))
	require.EqualValues(t, 3, counter(t, r, "daemon_foreign_commands"))
}

// A process that changed its credentials, or exec'd, has its command
// refused and its session ended.
func TestCredentialChangeAndExecEndTheSession(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the client changes its uid")
	}
	r := newRig(t)
	require.Equal(t, []string{"after setuid: EACCES", "next: closed"}, play(t, r, "setuid", nil))
	require.Equal(t, []string{"after exec: ESRCH", "next: closed"}, play(t, r, "exec", nil))
	require.EqualValues(t, 1, counter(t, r, "daemon_sessions_ended_credentials"))
	require.EqualValues(t, 1, counter(t, r, "daemon_sessions_ended_exec"))
	require.Eventually(t, func() bool { return r.srv.Sessions() == 0 }, 10*time.Second, 10*time.Millisecond)
}

// Messages a client sends at once, before the daemon accepted its
// connection, carry its credentials too: the listener passes them on.
func TestCredentialsBeforeAccept(t *testing.T) {
	r := newRig(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := hostsession.Dial(r.socket)
			if err == nil {
				_, err = c.AllocPD()
				c.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// counter returns one of the daemon's counters.
func counter(t *testing.T, r *rig, name string) uint64 {
	t.Helper()
	for _, c := range r.srv.Counters() {
		if c.Name == name {
			return c.Value
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}
