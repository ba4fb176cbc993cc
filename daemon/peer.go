package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
)

// peer is the process at the other end of a control connection: the one
// that connected. Only it may use the session, and only with the
// credentials it connected with, as the kernel's uverbs write() path
// refuses a file used under another's credentials.
type peer struct {
	pid      int
	uid, gid uint32
	// pidfd names the process whatever its pid becomes; it is readable
	// once the process has exited.
	pidfd int
}

// peerOf identifies the process that connected on fd and asks the kernel
// to attach every message's sender credentials (SO_PASSCRED) from then on.
func peerOf(fd int) (peer, error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	pidfd, err := peerPidfd(fd, int(cred.Pid))
	if err != nil {
		return peer{}, fmt.Errorf("peer pidfd: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		unix.Close(pidfd)
		return peer{}, fmt.Errorf("SO_PASSCRED: %w", err)
	}
	return peer{pid: int(cred.Pid), uid: cred.Uid, gid: cred.Gid, pidfd: pidfd}, nil
}

// peerPidfd returns a pidfd of the process at the other end of the socket:
// SO_PEERPIDFD (Linux 6.5) names the process that connected, whatever
// happens to its pid; older kernels give the pid, opened as a pidfd at
// once (a process that exited before that has no session to lose).
func peerPidfd(fd, pid int) (int, error) {
	pidfd, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	if err == nil {
		return pidfd, nil
	}
	return unix.PidfdOpen(pid, 0)
}

// exited reports whether the peer process has exited.
func (p peer) exited() bool {
	fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// errCredentials ends a session whose process runs under other
// credentials than it connected with.
var errCredentials = errors.New("the process's credentials changed")

// check accepts a message of op whose sender (SCM_CREDENTIALS, which the
// kernel fills in) is the peer with its credentials, or another process
// holding the connection (a forked child, one it was passed to) under the
// same uid and gid, for an op of sharedOps (sharers.go). Another process
// gets EACCES for any other op, or under other credentials; the peer
// under other credentials ends the session.
func (p peer) check(c *unix.Ucred, op hostif.Op) error {
	switch {
	case c == nil:
		return fmt.Errorf("a command with no sender's credentials: %w", unix.EACCES)
	case int(c.Pid) != p.pid && (c.Uid != p.uid || c.Gid != p.gid):
		return fmt.Errorf("a command from pid %d as uid %d gid %d on a session of uid %d gid %d: %w",
			c.Pid, c.Uid, c.Gid, p.uid, p.gid, unix.EACCES)
	case int(c.Pid) != p.pid && !sharedOps[op]:
		return fmt.Errorf("%v from another process than the session's (pid %d), which only it may send: %w",
			op, p.pid, unix.EACCES)
	case int(c.Pid) == p.pid && (c.Uid != p.uid || c.Gid != p.gid):
		return fmt.Errorf("pid %d now uid %d gid %d, connected as %d %d: %w (%w)", p.pid, c.Uid, c.Gid,
			p.uid, p.gid, errCredentials, unix.EACCES)
	}
	return nil
}

// received is what came beside a message: the sender's credentials and
// the descriptors passed.
type received struct {
	cred *unix.Ucred
	fds  []int
}

// parseControl reads a message's ancillary data. Descriptors the caller
// does not take must be closed (closeFDs).
func parseControl(oob []byte) received {
	var r received
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return r
	}
	for i := range msgs {
		m := &msgs[i]
		if c, err := unix.ParseUnixCredentials(m); err == nil {
			r.cred = c
			continue
		}
		if fds, err := unix.ParseUnixRights(m); err == nil {
			r.fds = append(r.fds, fds...)
		}
	}
	return r
}

// oobSize is room for the credentials and at most maxPassed descriptors
// beside one message: the kernel closes any more.
var oobSize = unix.CmsgSpace(unix.SizeofUcred) + unix.CmsgSpace(4*maxPassed)

// maxPassed is the most descriptors a command takes (hello's two).
const maxPassed = 2

// statusOf reads the peer's /proc/PID/status fields named, after which it
// checks that the process has not exited, so that the file was not a
// later process's with the same pid.
func (p peer) status(fields ...string) (map[string]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
	if err != nil || p.exited() {
		return nil, fmt.Errorf("pid %d: %w", p.pid, unix.ESRCH)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		for _, f := range fields {
			if ok && k == f {
				out[k] = strings.TrimSpace(v)
			}
		}
	}
	return out, nil
}

// capIPCLock is CAP_IPC_LOCK's bit.
const capIPCLock = 14

// memlock returns the bytes the peer may have registered (its
// RLIMIT_MEMLOCK soft limit, as the kernel's ib_umem_get counts pinned
// pages), -1 for no bound: unlimited, or the process holds CAP_IPC_LOCK
// (root does) in the initial user namespace, as capable() asks: in a
// user namespace of its own any user holds every capability.
func (p peer) memlock() (int64, error) {
	st, err := p.status("CapEff")
	if err != nil {
		return 0, err
	}
	if caps, err := strconv.ParseUint(st["CapEff"], 16, 64); err == nil && caps&(1<<capIPCLock) != 0 && p.initialUserNS() {
		return -1, nil
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", p.pid))
	if err != nil || p.exited() {
		return 0, fmt.Errorf("pid %d: %w", p.pid, unix.ESRCH)
	}
	return parseMemlock(data)
}

// initialUserNS reports whether the peer runs in the initial user
// namespace: its uid_map (readable by anyone, where ns/user is not) maps
// every uid to itself, which only the initial namespace, or one root made
// so, does.
func (p peer) initialUserNS() bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", p.pid))
	if err != nil || p.exited() {
		return false
	}
	return identityMap(data)
}

// identityMap reports whether a uid_map is the single line "0 0
// 4294967295".
func identityMap(data []byte) bool {
	f := strings.Fields(string(data))
	return len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295"
}

// parseMemlock finds the soft limit in /proc/PID/limits' "Max locked
// memory" line.
func parseMemlock(limits []byte) (int64, error) {
	for _, line := range strings.Split(string(limits), "\n") {
		rest, ok := strings.CutPrefix(line, "Max locked memory")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 1 {
			break
		}
		if f[0] == "unlimited" {
			return -1, nil
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || v < 0 {
			break
		}
		return v, nil
	}
	return 0, fmt.Errorf("no RLIMIT_MEMLOCK in /proc/PID/limits: %w", unix.EINVAL)
}

// ids returns the peer's real uid and gid now, as SCM_CREDENTIALS gives
// them.
func (p peer) ids() (uid, gid uint32, err error) {
	st, err := p.status("Uid", "Gid")
	if err != nil {
		return 0, 0, err
	}
	first := func(v string) (uint32, error) {
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0, unix.EINVAL
		}
		n, err := strconv.ParseUint(f[0], 10, 32)
		return uint32(n), err
	}
	if uid, err = first(st["Uid"]); err == nil {
		gid, err = first(st["Gid"])
	}
	return uid, gid, err
}
