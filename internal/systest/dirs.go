package systest

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Nobody is the unprivileged user the tests run programs as; it needs no
// passwd entry.
const Nobody = 65534

// RootDir returns a temporary directory, removed when the test ends, that
// root owns and every user may enter but none other may write: a run
// directory the daemon accepts, or where programs for other users go.
func RootDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "softnic-systest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// UserDir returns a temporary directory owned by uid (and its group uid),
// mode 0700, removed when the test ends.
func UserDir(t testing.TB, uid int) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "softnic-systest-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	return dir
}

// DeviceFile is the file in /dev/infiniband a daemon of run directory
// runDir publishes for its device name: NAME.HASH, HASH the FNV-1a hash of
// the run directory, so that the daemons of two run directories on one
// host publish apart.
func DeviceFile(runDir, name string) string {
	h := fnv.New32a()
	h.Write([]byte(runDir))
	return filepath.Join("/dev/infiniband", fmt.Sprintf("%s.%08x", name, h.Sum32()))
}

// AsUser is argv run through setpriv(1) as uid, with gid uid and no
// supplementary groups.
func AsUser(uid int, argv ...string) []string {
	return append([]string{"setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups"}, argv...)
}

// AsUserIPCLock is AsUser with CAP_IPC_LOCK inherited and ambient, as RDMA
// hosts grant their programs (registered pages count against
// RLIMIT_MEMLOCK), and the parent-death signal SIGKILL set again after the
// change of user, which clears it: the program still dies with whatever
// started it (softnic exec).
func AsUserIPCLock(uid int, argv ...string) []string {
	return AsUser(uid, append([]string{"--inh-caps=+ipc_lock", "--ambient-caps=+ipc_lock", "--pdeathsig=KILL"}, argv...)...)
}

// Credential is the process attribute that starts a program as uid, with
// gid uid.
func Credential(uid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
}
