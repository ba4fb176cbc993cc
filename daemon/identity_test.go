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
	"github.com/softnic/softnic/ibtransport/ibv"
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
		// register memory, nor a raw packet QP, whose capability is asked
		// of the session's process only.
		pd, _ := strconv.Atoi(os.Getenv("SOFTNIC_DAEMON_TEST_PD"))
		cq, _ := strconv.Atoi(os.Getenv("SOFTNIC_DAEMON_TEST_CQ"))
		qp := func(t ibv.QPType) hostif.CreateQPRequest {
			return hostif.CreateQPRequest{PD: uint32(pd), SendCQ: uint32(cq), RecvCQ: uint32(cq), MaxSendWR: 1,
				MaxRecvWR: 1, Type: uint32(t)}
		}
		fmt.Println(rawCommand(3, hostif.OpAllocPD, hostif.Empty{}), rawCommand(3, hostif.OpRegMR, hostif.Empty{}),
			rawCommand(3, hostif.OpCreateQP, qp(ibv.QPTypeRawPacket)), rawCommand(3, hostif.OpCreateQP, qp(ibv.QPTypeRC)))
		return 0
	case "raw-nobody":
		// A user without CAP_NET_RAW (uid 65534 holds no capability).
		if err := syscall.Setresuid(65534, 65534, 65534); err != nil {
			fmt.Println("setresuid:", err)
			return 1
		}
		// The uid change made it undumpable: its /proc/self/mem, which
		// hello passes, would stay root's.
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
			fmt.Println("dumpable:", err)
			return 1
		}
		fallthrough
	case "raw":
		c, err := hostsession.Dial(sock)
		if err != nil {
			fmt.Println("dial:", err)
			return 1
		}
		fmt.Println("raw QP:", createRawQP(c))
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
		fmt.Println("after exec:", rawCommand(fd, hostif.OpAllocPD, hostif.Empty{}))
		fmt.Println("next:", rawCommand(fd, hostif.OpAllocPD, hostif.Empty{}))
		os.Exit(0)
	}
}

// createRawQP makes a raw packet QP on a new PD and CQ and says how that
// went.
func createRawQP(c *hostsession.Conn) string {
	pd, err := c.AllocPD()
	if err != nil {
		return "alloc PD: " + errText(err)
	}
	cq, err := c.CreateCQ(8, nil, 0)
	if err != nil {
		return "create CQ: " + errText(err)
	}
	_, err = c.CreateQP(hostif.CreateQPRequest{PD: pd, SendCQ: cq.Handle, RecvCQ: cq.Handle, MaxSendWR: 1, MaxRecvWR: 1,
		Type: uint32(ibv.QPTypeRawPacket)})
	return errText(err)
}

// rawCommand sends one bodiless command on the control socket fd and says
// the reply's errno ("ok", "EACCES", ...) or how the socket failed.
func rawCommand[B any](fd int, op hostif.Op, body B) string {
	unix.SetNonblock(fd, false) // the Go client's descriptor was the runtime poller's
	buf := make([]byte, hostif.MaxMessage)
	msg, err := hostif.Encode(buf, hostif.Header{Op: op, Seq: 99}, body)
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
// and returns what it said, with a PD and a CQ of the session's for it.
func handOn(c *hostsession.Conn, cred *syscall.Credential) string {
	pd, err := c.AllocPD()
	if err != nil {
		return err.Error()
	}
	cq, err := c.CreateCQ(8, nil, 0)
	if err != nil {
		return err.Error()
	}
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
	cmd.Env = append(os.Environ(), roleEnv+"=foreign", fmt.Sprint("SOFTNIC_DAEMON_TEST_PD=", pd),
		fmt.Sprint("SOFTNIC_DAEMON_TEST_CQ=", cq.Handle))
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
	require.Equal(t, []string{"foreign: ok EACCES EACCES ok", "own: ok"}, play(t, r, "hand-on", nil))
	require.EqualValues(t, 1, counter(t, r, "daemon_foreign_commands"))
	if os.Geteuid() != 0 {
		t.Skip("needs root: the foreign process runs as nobody")
	}
	require.Equal(t, []string{"foreign: EACCES EACCES EACCES EACCES", "own: ok"}, play(t, r, "hand-on-other", nil))
	require.EqualValues(t, 5, counter(t, r, "daemon_foreign_commands"))
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

// A raw packet QP needs CAP_NET_RAW, as the kernel asks: root's process
// gets one, a user's gets EPERM.
func TestRawPacketQPNeedsCapNetRaw(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the client drops to another uid")
	}
	r := newRig(t)
	// The user's client must reach the socket.
	for d := filepath.Dir(r.socket); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	require.Equal(t, []string{"raw QP: ok"}, play(t, r, "raw", nil))
	require.Equal(t, []string{"raw QP: EPERM"}, play(t, r, "raw-nobody", nil))
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
