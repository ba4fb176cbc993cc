package system

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/softnic/softnic/internal/systest"
)

// daemonOutcome runs bin as a daemon on end's interface with run
// directory runDir until it exits or serves; a daemon that serves is
// stopped, and served is true.
func daemonOutcome(t *testing.T, bin string, end *netnstest.End, runDir string) (out string, served bool) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", end.Namespace, bin, "daemon", "-d", end.Ifname, "--run-dir", runDir)
	buf := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case <-exited:
			return buf.String(), false
		case <-deadline:
			cmd.Process.Kill()
			<-exited
			t.Fatalf("the daemon neither served nor exited in 30 s:\n%s", buf.String())
		case <-time.After(20 * time.Millisecond):
			if strings.Contains(buf.String(), "msg=serving") {
				cmd.Process.Signal(syscall.SIGTERM)
				<-exited
				return buf.String(), true
			}
		}
	}
}

// TestDaemonRefusesRunDirs: the daemon serves from no run directory
// another user owns or may write, nor from one below a directory another
// user may write, unless that one is sticky as /tmp is; the error says
// what to do.
func TestDaemonRefusesRunDirs(t *testing.T) {
	netnstest.Integration(t)
	bin := systest.Softnic(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	refused := func(t *testing.T, runDir, want string) {
		t.Helper()
		out, served := daemonOutcome(t, bin, &pair.A, runDir)
		require.False(t, served, "the daemon served from %s:\n%s", runDir, out)
		assert.Contains(t, out, "softnic daemon: "+want)
	}

	t.Run("owned by another user", func(t *testing.T) {
		dir := systest.RootDir(t)
		require.NoError(t, os.Chown(dir, 65534, 65534))
		refused(t, dir, "run directory "+dir+" is owned by uid 65534: use a directory only root can write (chown root, chmod 755)")
	})
	t.Run("writable by others", func(t *testing.T) {
		dir := systest.RootDir(t)
		require.NoError(t, os.Chmod(dir, 0o777))
		refused(t, dir, "run directory "+dir+" is writable by its group or others (mode 0777): use a directory only root can write")
	})
	t.Run("below a directory others may write", func(t *testing.T) {
		parent := systest.RootDir(t)
		require.NoError(t, os.Chmod(parent, 0o777))
		dir := filepath.Join(parent, "run")
		refused(t, dir, "run directory "+dir+": "+parent+" above it is writable by its group or others (mode 0777) and not sticky")
		assert.NoDirExists(t, dir, "made below the directory refused")
	})
	t.Run("below a sticky directory", func(t *testing.T) {
		parent := systest.RootDir(t)
		require.NoError(t, os.Chmod(parent, os.ModeSticky|0o777))
		dir := filepath.Join(parent, "run")
		out, served := daemonOutcome(t, bin, &pair.A, dir)
		require.True(t, served, "the daemon did not serve from %s:\n%s", dir, out)
		fi, err := os.Stat(dir)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	})
}

// TestDaemonFollowsNoLinks: links planted (as root, who alone may write
// the run directory) at the lock file's name, the IRQ state file's, in
// place of a directory of the libibverbs tree and at the temporary name
// of one of its files are not followed: their targets stay as they were,
// and the daemon serves.
func TestDaemonFollowsNoLinks(t *testing.T) {
	netnstest.Integration(t)
	bin := systest.Softnic(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	name := "softnic_" + pair.A.Ifname
	elsewhere := systest.RootDir(t)
	target := filepath.Join(elsewhere, "target")
	targetDir := filepath.Join(elsewhere, "dir")
	require.NoError(t, os.Mkdir(targetDir, 0o755))
	verbs := filepath.Join("sysfs", "class", "infiniband_verbs")
	for _, c := range []struct {
		what, link string
		to         string
	}{
		{"lock file", name + ".lock", target},
		{"IRQ state file", name + ".irqs", target},
		{"tree directory", verbs, targetDir},
		{"tree file's temporary", filepath.Join(verbs, "abi_version.new"), target},
	} {
		t.Run(c.what, func(t *testing.T) {
			require.NoError(t, os.WriteFile(target, []byte("theirs\n"), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(targetDir, "abi_version"), []byte("theirs\n"), 0o644))
			runDir := systest.RootDir(t)
			link := filepath.Join(runDir, c.link)
			require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
			require.NoError(t, os.Symlink(c.to, link))
			d := systest.StartDaemon(t, bin, &pair.A, runDir)
			out := d.Log
			for _, f := range []string{target, filepath.Join(targetDir, "abi_version")} {
				b, err := os.ReadFile(f)
				require.NoError(t, err)
				assert.Equal(t, "theirs\n", string(b), "%s written through the link at %s", f, c.link)
			}
			ents, err := os.ReadDir(targetDir)
			require.NoError(t, err)
			assert.Len(t, ents, 1, "files made through the link at %s", c.link)
			fi, err := os.Lstat(link)
			if err == nil {
				assert.Zero(t, fi.Mode()&os.ModeSymlink, "the link at %s is still there", c.link)
			}
			b, err := os.ReadFile(filepath.Join(runDir, verbs, "abi_version"))
			require.NoError(t, err, out.String())
			assert.Equal(t, "6\n", string(b))
			lock, err := os.ReadFile(filepath.Join(runDir, name+".lock"))
			require.NoError(t, err)
			assert.Equal(t, fmt.Sprintf("%d\n", d.Pid()), string(lock))
			require.NoError(t, d.Stop(), out.String())
			left, err := os.ReadDir(runDir)
			require.NoError(t, err)
			assert.Empty(t, left, "files left in the run directory")
		})
	}
}

// capMask reads a hexadecimal capability mask of /proc/PID/status.
func capMask(t *testing.T, status, field string) uint64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + field + `:\s+([0-9a-f]+)$`).FindStringSubmatch(status)
	require.NotNil(t, m, "no %s in\n%s", field, status)
	v, err := strconv.ParseUint(m[1], 16, 64)
	require.NoError(t, err)
	return v
}

// kernelAtLeast reports whether the running kernel's release is at least
// major.minor.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	var u unix.Utsname
	require.NoError(t, unix.Uname(&u))
	m := regexp.MustCompile(`^(\d+)\.(\d+)`).FindStringSubmatch(unix.ByteSliceToString(u.Release[:]))
	require.NotNil(t, m)
	ma, _ := strconv.Atoi(m[1])
	mi, _ := strconv.Atoi(m[2])
	return ma > major || ma == major && mi >= minor
}

// TestDaemonDropsPrivileges: once it serves, a root daemon holds only the
// capabilities its datapath needs (CAP_NET_ADMIN; CAP_BPF on kernels
// before 6.5; not CAP_SYS_PTRACE, as clients pass their own memory), in
// every set, with no_new_privs, and the descriptor limit raised; and it
// still serves: ordinary users' sessions, a connection through both
// daemons' connection managers to a peer not in the neighbour table,
// the XDP counters, and a clean SIGTERM. A cgo build does not start.
func TestDaemonDropsPrivileges(t *testing.T) {
	v := newServedVeth(t)
	for _, l := range v.logs {
		require.Eventually(t, func() bool { return strings.Contains(l.String(), `msg="privileges dropped"`) }, 10*time.Second,
			10*time.Millisecond, "no privileges line:\n%s", l.String())
	}
	pid := v.daemons[0].Pid()
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	require.NoError(t, err)
	require.Equal(t, "softnic\n", string(comm), "ip netns exec runs the daemon in its own process")

	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	status := string(b)
	eff, prm, bnd := capMask(t, status, "CapEff"), capMask(t, status, "CapPrm"), capMask(t, status, "CapBnd")
	assert.Equal(t, eff, prm, "CapPrm")
	assert.Equal(t, eff, bnd, "CapBnd")
	assert.Zero(t, capMask(t, status, "CapInh"), "CapInh")
	assert.Zero(t, capMask(t, status, "CapAmb"), "CapAmb")
	assert.Regexp(t, `(?m)^NoNewPrivs:\s+1$`, status)
	assert.NotZero(t, eff&(1<<unix.CAP_NET_ADMIN), "CAP_NET_ADMIN (neighbour resolution) dropped")
	allowed := uint64(1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_BPF)
	assert.Zero(t, eff&^allowed, "capabilities beyond %#x kept: %#x", allowed, eff)
	for _, c := range []struct {
		n    int
		name string
	}{
		{unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN"}, {unix.CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"},
		{unix.CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"}, {unix.CAP_FOWNER, "CAP_FOWNER"},
		{unix.CAP_SETUID, "CAP_SETUID"}, {unix.CAP_SETGID, "CAP_SETGID"}, {unix.CAP_SYS_RESOURCE, "CAP_SYS_RESOURCE"},
		{unix.CAP_SETPCAP, "CAP_SETPCAP"}, {unix.CAP_SYS_MODULE, "CAP_SYS_MODULE"}, {unix.CAP_NET_RAW, "CAP_NET_RAW"},
		{unix.CAP_IPC_LOCK, "CAP_IPC_LOCK"}, {unix.CAP_SYS_NICE, "CAP_SYS_NICE"}, {unix.CAP_CHOWN, "CAP_CHOWN"},
	} {
		assert.Zero(t, bnd&(1<<c.n), "%s in the bounding set", c.name)
	}
	assert.Zero(t, eff&(1<<unix.CAP_SYS_PTRACE), "CAP_SYS_PTRACE kept, though clients pass their own /proc/self/mem")
	if kernelAtLeast(t, 6, 5) {
		assert.Zero(t, eff&(1<<unix.CAP_BPF), "CAP_BPF kept on a kernel whose map commands check only the descriptor")
	}
	assert.Contains(t, v.logs[0].String(), `msg="privileges dropped" kept=cap_net_admin`)

	// The descriptor limit: the kernel's bound where the daemon may raise
	// the hard limit (CAP_SYS_RESOURCE, which its parents here have if
	// this test has it), else the hard limit.
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^Max open files\s+(\d+)\s+(\d+)\s+files`).FindStringSubmatch(string(b))
	require.NotNil(t, m, string(b))
	var mine syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &mine))
	want := strconv.FormatUint(mine.Max, 10)
	self, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	if capMask(t, string(self), "CapEff")&(1<<unix.CAP_SYS_RESOURCE) != 0 {
		nr, err := os.ReadFile("/proc/sys/fs/nr_open")
		require.NoError(t, err)
		want = strings.TrimSpace(string(nr))
	}
	assert.Equal(t, []string{want, want}, m[1:], "the daemon's descriptor limit (soft, hard)")
	assert.Contains(t, v.logs[0].String(), "open_files="+want)

	// Sessions of ordinary users, and a connection between peers the
	// daemons must resolve (RTM_NEWNEIGH, CAP_NET_ADMIN).
	_, out := startClient(t, filepath.Join(v.runDir, "softnic_"+v.p.A.Ifname+".sock"))
	require.Contains(t, out, "ready uid=65534")
	for _, e := range []*netnstest.End{&v.p.A, &v.p.B} {
		out, err := e.Command("ip", "neigh", "flush", "all").CombinedOutput()
		require.NoError(t, err, string(out))
	}
	addr := v.p.A.Addr4().String()
	srv := v.asNobody(&v.p.A, "rping", "-s", "-v", "-a", addr, "-C", "5")
	var sout strings.Builder
	srv.Stdout, srv.Stderr = &sout, &sout
	require.NoError(t, srv.Start())
	cout, cerr := rpingClientWhenListening(t, func() *exec.Cmd {
		return v.asNobody(&v.p.B, "rping", "-c", "-vV", "-a", addr, "-C", "5")
	})
	serr := srv.Wait()
	require.True(t, cerr == nil && serr == nil, "client %v:\n%s\nserver %v:\n%s\ndaemon:\n%s", cerr, cout, serr, sout.String(), v.logs[0].String())
	assert.Equal(t, 5, strings.Count(cout, "ping data: rdma-ping-"), cout)

	// The XDP program's counters (bpf() map lookups).
	stat, err := v.asNobody(&v.p.A, "stat").CombinedOutput()
	require.NoError(t, err, string(stat))
	steered := regexp.MustCompile(`xdp_steered (\d+)`).FindStringSubmatch(string(stat))
	require.NotNil(t, steered, string(stat))
	assert.NotEqual(t, "0", steered[1], "no frame steered by the XDP program, as the daemon reads it")

	// SIGTERM: XDP detached, the device's files and its device file gone.
	name := "softnic_" + v.p.A.Ifname
	cdev := systest.DeviceFile(v.runDir, name)
	_, err = os.Lstat(cdev)
	require.NoError(t, err, "no device file")
	require.NoError(t, v.daemons[0].Stop(), v.logs[0].String())
	link, err := v.p.A.Command("ip", "link", "show", "dev", v.p.A.Ifname).CombinedOutput()
	require.NoError(t, err, string(link))
	assert.NotContains(t, string(link), "xdp", "XDP program left after SIGTERM")
	for _, f := range []string{name + ".sock", name + ".lock", name + ".irqs", filepath.Join("sysfs", "class", "infiniband", name)} {
		_, err := os.Lstat(filepath.Join(v.runDir, f))
		assert.True(t, os.IsNotExist(err), "%s left: %v", f, err)
	}
	_, err = os.Lstat(cdev)
	assert.True(t, os.IsNotExist(err), "device file left: %v", err)

	t.Run("cgo build", func(t *testing.T) {
		cgoBin := systest.SoftnicCgo(t, t.TempDir(), "1")
		out, served := daemonOutcome(t, cgoBin, &v.p.A, systest.RootDir(t))
		require.False(t, served, "a cgo build served:\n%s", out)
		assert.Contains(t, out, "built with cgo")
		assert.Contains(t, out, "build it with CGO_ENABLED=0")
	})
}
