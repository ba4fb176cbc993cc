package system

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// viewWorld is a daemon on each end of a veth pair, and softnic with its
// provider where user nobody may run them. The ends' daemons share a run
// directory, or have one each.
type viewWorld struct {
	bin     string
	a, b    *netnstest.End
	runDirs map[*netnstest.End]string
	names   map[*netnstest.End]string
	daemons []*systest.Daemon
	logs    []*syncbuf.Buffer
}

// newViewWorld starts a daemon on each end: `-d IFACE` where the end's
// name is "", else `-d IFACE:NAME`; in one run directory if shared.
func newViewWorld(t *testing.T, nameA, nameB string, shared bool) *viewWorld {
	netnstest.RequireCommands(t, "apt-get install ibverbs-utils perftest libibverbs-dev librdmacm-dev gcc make",
		append([]string{"cc", "make", "setpriv"}, stockTools...)...)
	sw := systest.NewWorld(t, systest.Config{Provider: true, Names: [2]string{nameA, nameB}, OwnRunDirs: !shared})
	w := &viewWorld{bin: sw.Bin, a: &sw.Pair.A, b: &sw.Pair.B,
		runDirs: map[*netnstest.End]string{}, names: map[*netnstest.End]string{}}
	for _, d := range []*systest.Daemon{sw.A, sw.B} {
		w.runDirs[d.End], w.names[d.End] = d.RunDir, d.Name
		w.daemons = append(w.daemons, d)
		w.logs = append(w.logs, d.Log)
	}
	return w
}

// stop ends the daemons with SIGTERM and checks that they left nothing in
// their run directories.
func (w *viewWorld) stop(t *testing.T) {
	for _, d := range w.daemons {
		require.NoError(t, d.Signal(syscall.SIGTERM))
		require.NoError(t, d.Wait())
	}
	for _, dir := range w.runDirs {
		left, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Empty(t, left, "files left in the run directory %s", dir)
	}
}

// nobody runs softnic ARGS as user nobody, with no capability, in end's
// namespace, with the end's run directory.
func (w *viewWorld) nobody(ctx context.Context, end *netnstest.End, args ...string) *exec.Cmd {
	return w.nobodyRuns(ctx, end, append([]string{w.bin}, args...)...)
}

// nobodyRuns is nobody for any program.
func (w *viewWorld) nobodyRuns(ctx context.Context, end *netnstest.End, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", end.Namespace}, systest.AsUser(systest.Nobody, argv...)...)...)
	cmd.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+w.runDirs[end])
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// root runs softnic ARGS as root in end's namespace, with the end's run
// directory.
func (w *viewWorld) root(ctx context.Context, end *netnstest.End, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", end.Namespace, w.bin}, args...)...)
	cmd.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+w.runDirs[end])
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// outputs runs cmd and returns its standard output and error apart.
func outputs(t *testing.T, cmd *exec.Cmd) (string, string, error) {
	t.Helper()
	var out, errOut syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// viewScript prints what a program finds in /sys/class about device dev
// on interface iface, and who it is.
func viewScript(dev, iface string) string {
	d := "/sys/class/infiniband/" + dev
	return strings.Join([]string{
		"echo type1=$(cat " + d + "/ports/1/gid_attrs/types/1)",
		"echo ndev1=$(cat " + d + "/ports/1/gid_attrs/ndevs/1)",
		// The table's last entry is empty, read as the kernel's are.
		"echo gid15=$(cat " + d + "/ports/1/gids/15)",
		"echo type15=$(cat " + d + "/ports/1/gid_attrs/types/15 2>&1 >/dev/null | sed 's/.*: //')",
		"echo net=$(ls " + d + "/device/net/)",
		"echo ifindex=$(cat " + d + "/device/net/" + iface + "/ifindex)",
		"echo guid=$(cat " + d + "/node_guid)",
		"echo ib=$(ls /sys/class/infiniband)",
		"echo verbs=$(ls /sys/class/infiniband_verbs)",
		"echo abi=$(cat /sys/class/infiniband_verbs/abi_version)",
		"echo classnet=$(ls /sys/class/net)",
		"echo uid=$(id -u) gid=$(id -g)",
		"echo map=$(awk '{print $1, $2, $3}' /proc/self/uid_map)",
		"grep -E '^Cap(Eff|Amb)' /proc/self/status | tr -s '\\t' ' '",
		"touch /sys/class/x 2>/dev/null && echo writable || echo read-only",
	}, "; ")
}

// TestExecSysClassView: a program softnic exec starts, as user nobody (in
// a user namespace) and as root (a mount namespace only), finds softnic's
// device in /sys/class/infiniband, as UCX, NCCL and rdma-core's tests read
// it, the rest of /sys/class as it was, its own uid and capabilities, and
// the view leaves the caller's /sys/class as it was; stock programs run
// through it as nobody.
func TestExecSysClassView(t *testing.T) {
	w := newViewWorld(t, "", "", true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dev, iface := w.names[w.a], w.a.Ifname
	ifindex, err := w.a.Command("cat", "/sys/class/net/"+iface+"/ifindex").Output()
	require.NoError(t, err)
	rootCaps, err := w.a.Command("sh", "-c", "grep CapEff /proc/self/status | tr -s '\\t' ' '").Output()
	require.NoError(t, err)
	for _, who := range []struct {
		name string
		run  func(context.Context, *netnstest.End, ...string) *exec.Cmd
		uid  string
		caps string
		umap string
	}{
		{"nobody", w.nobody, "65534", "CapEff: 0000000000000000", "map=65534 65534 1"},
		{"root", w.root, "0", strings.TrimSpace(string(rootCaps)), "map=0 0 4294967295"},
	} {
		t.Run(who.name, func(t *testing.T) {
			out, errOut, err := outputs(t, who.run(ctx, w.a, "exec", "--", "sh", "-c", viewScript(dev, iface)))
			require.NoError(t, err, "%s%s", out, errOut)
			assert.Empty(t, errOut, "softnic exec said something")
			for _, want := range []string{
				"type1=RoCE v2\n", "ndev1=" + iface + "\n", "net=" + iface + "\n",
				"gid15=0000:0000:0000:0000:0000:0000:0000:0000\n", "type15=Invalid argument\n",
				"ifindex=" + strings.TrimSpace(string(ifindex)) + "\n",
				"ib=" + dev + "\n", "abi=6\n", "uid=" + who.uid + " gid=" + who.uid + "\n",
				who.umap + "\n", who.caps + "\n", "CapAmb: 0000000000000000\n", "read-only\n",
			} {
				assert.Contains(t, out, want)
			}
			// The rest of /sys/class: the namespace's interfaces.
			assert.Regexp(t, `(?m)^classnet=.*\blo\b.*\b`+iface+`\b`, out)
			assert.Contains(t, out, "verbs=abi_version "+filepath.Base(systest.DeviceFile(w.runDirs[w.a], dev))+"\n", "only this namespace's device")
		})
	}
	// The caller's /sys/class is untouched.
	out, err := w.a.Command("sh", "-c", "ls /sys/class; findmnt -n /sys/class || true").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.NotContains(t, string(out), "infiniband")
	assert.NotContains(t, string(out), "tmpfs")

	for _, who := range []struct {
		name string
		run  func(context.Context, *netnstest.End, ...string) *exec.Cmd
	}{{"nobody", w.nobody}, {"root", w.root}} {
		t.Run("stock programs as "+who.name, func(t *testing.T) {
			w.stockThroughView(t, ctx, who.run)
		})
	}
	w.stop(t)
}

// stockThroughView runs ib_write_bw, rping and ucx_info (if installed)
// through softnic exec with run (as nobody or as root), between the ends.
func (w *viewWorld) stockThroughView(t *testing.T, ctx context.Context, run func(context.Context, *netnstest.End, ...string) *exec.Cmd) {
	execArgs := func(argv []string) []string { return append([]string{"exec", "--"}, argv...) }
	// pair runs server on A, waits for ready, then client on B.
	pair := func(server, client []string, ready func() bool) (string, string) {
		t.Helper()
		srv := run(ctx, w.a, execArgs(server)...)
		var sout syncbuf.Buffer
		srv.Stdout, srv.Stderr = &sout, &sout
		require.NoError(t, srv.Start())
		if !assert.Eventually(t, ready, 30*time.Second, 20*time.Millisecond) {
			srv.Process.Kill()
			srv.Wait()
			t.Fatalf("%v never listened:\n%s", server, sout.String())
		}
		cout, cerr := run(ctx, w.b, execArgs(client)...).CombinedOutput()
		serr := srv.Wait()
		require.True(t, serr == nil && cerr == nil, "server %v:\n%s\nclient %v:\n%s", serr, sout.String(), cerr, cout)
		for _, out := range []string{sout.String(), string(cout)} {
			assert.NotContains(t, out, "no private /sys/class")
		}
		return sout.String(), string(cout)
	}
	args := []string{"ib_write_bw", "-x", "1", "-n", "500"}
	sout, cout := pair(args, append(args, w.a.Addr4().String()), func() bool { return listens(t, w.a, 18515) })
	for _, out := range []string{sout, cout} {
		require.Greater(t, perftestLast(t, out, 65536), 0.0, "ib_write_bw: no figure:\n%s", out)
	}
	if _, err := exec.LookPath("rping"); err == nil {
		a4 := w.a.Addr4().String()
		sout, cout = pair([]string{"rping", "-s", "-a", a4, "-C", "10", "-v"}, []string{"rping", "-c", "-a", a4, "-C", "10", "-v"},
			func() bool { return w.listening(t, ctx, w.a) })
		assert.Contains(t, sout, "ping data: rdma-ping-9:", "rping server")
		assert.Contains(t, cout, "ping data: rdma-ping-9:", "rping client")
	} else {
		t.Log("rping not installed (apt-get install rdmacm-utils): not run")
	}
	if _, err := exec.LookPath("ucx_info"); err == nil {
		out, err := run(ctx, w.a, "exec", "--", "ucx_info", "-d").CombinedOutput()
		require.NoError(t, err, string(out))
		assert.Contains(t, string(out), "Device: "+w.names[w.a]+":1")
		assert.Contains(t, string(out), "Transport: rc_verbs")
		assert.NotContains(t, string(out), "no private /sys/class")
	} else {
		t.Log("ucx_info not installed (apt-get install ucx-utils): not run")
	}
}

// listens reports whether a TCP socket listens on port in end's namespace.
func listens(t *testing.T, end *netnstest.End, port int) bool {
	out, _ := end.Command("ss", "-Hltn", fmt.Sprintf("sport = :%d", port)).Output()
	return strings.TrimSpace(string(out)) != ""
}

// listening reports whether an rdma_cm ID listens on end's device
// (softnic stat res cm_id).
func (w *viewWorld) listening(t *testing.T, ctx context.Context, end *netnstest.End) bool {
	out, err := w.root(ctx, end, "stat", "res", "cm_id", "-d", w.names[end]).Output()
	return err == nil && strings.Contains(string(out), "state LISTEN")
}

// netnsIno returns the inode of end's network namespace.
func netnsIno(t *testing.T, end *netnstest.End) string {
	out, err := end.Command("stat", "-L", "-c", "%i", "/proc/self/ns/net").Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

// TestExecShowsThisNamespaceOnly: with the daemons of two namespaces in
// one run directory, softnic exec and softnic env show a program the
// device of its own namespace only, -d does not reach the other's, a
// namespace no daemon serves gets none, and an rdma_cm listener lands on
// its own namespace's device (it was seen on the other's).
func TestExecShowsThisNamespaceOnly(t *testing.T) {
	w := newViewWorld(t, "", "", true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runDir := w.runDirs[w.a]
	for _, c := range []struct{ here, there *netnstest.End }{{w.a, w.b}, {w.b, w.a}} {
		out, errOut, err := outputs(t, w.nobody(ctx, c.here, "exec", "--", "ibv_devices"))
		require.NoError(t, err, "%s%s", out, errOut)
		assert.Contains(t, out, w.names[c.here])
		assert.NotContains(t, out, w.names[c.there], "another namespace's device shown")

		out, errOut, err = outputs(t, w.nobody(ctx, c.here, "env"))
		require.NoError(t, err, "%s%s", out, errOut)
		assert.Empty(t, errOut)
		assert.Contains(t, out, "export SYSFS_PATH='"+filepath.Join(runDir, "netns", netnsIno(t, c.here))+"'\n")
		out, errOut, err = outputs(t, w.nobodyRuns(ctx, c.here, "sh", "-c", `eval "$("$0" env)" && ibv_devices`, w.bin))
		require.NoError(t, err, "%s%s", out, errOut)
		assert.Contains(t, out, w.names[c.here])
		assert.NotContains(t, out, w.names[c.there], "another namespace's device shown")

		_, errOut, err = outputs(t, w.nobody(ctx, c.here, "exec", "-d", w.names[c.there], "--", "true"))
		require.Error(t, err)
		assert.Contains(t, errOut, "device "+w.names[c.there]+" serves "+c.there.Ifname+" in another network namespace")
	}
	// The test's own namespace has no daemon.
	out, err := exec.CommandContext(ctx, w.bin, "exec", "--run-dir", runDir, "--", "true").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "no daemon serves this network namespace (run directory "+runDir+"; its devices serve other network namespaces: ")
	assert.Contains(t, string(out), "start one: sudo softnic daemon -d IFACE --run-dir "+runDir)
	out, err = exec.CommandContext(ctx, w.bin, "env", "--run-dir", runDir).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "softnic env: no daemon serves this network namespace (run directory "+runDir)

	// A listener in B, where softnic_veth0 (A's) sorts first: on B's
	// device.
	srv := w.nobody(ctx, w.b, "exec", "--", "rping", "-s", "-a", w.b.Addr4().String(), "-C", "3", "-v")
	var sout syncbuf.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	require.NoError(t, srv.Start())
	if !assert.Eventually(t, func() bool { return w.listening(t, ctx, w.b) }, 30*time.Second, 20*time.Millisecond) {
		srv.Process.Kill()
		srv.Wait()
		t.Fatalf("rping -s never listened on %s:\n%s", w.names[w.b], sout.String())
	}
	ids, err := w.root(ctx, w.a, "stat", "res", "cm_id", "-d", w.names[w.a]).CombinedOutput()
	require.NoError(t, err, string(ids))
	assert.Empty(t, strings.TrimSpace(string(ids)), "IDs on A's device")
	cout, cerr := w.nobody(ctx, w.a, "exec", "--", "rping", "-c", "-a", w.b.Addr4().String(), "-C", "3", "-v").CombinedOutput()
	serr := srv.Wait()
	require.True(t, serr == nil && cerr == nil, "server %v:\n%s\nclient %v:\n%s", serr, sout.String(), cerr, cout)
	w.stop(t)
}

// TestNamedDevices: softnic daemon -d IFACE:NAME names the device NAME,
// the same on both hosts (two run directories), which libibverbs
// programs (through the provider), perftest's -d and UCX list, and which
// every softnic command that takes a device takes, as it takes the
// interface's name; a name is one daemon's in a run directory; the tree
// says which interface it serves.
func TestNamedDevices(t *testing.T) {
	const name = "softnic0"
	w := newViewWorld(t, name, name, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ra := w.runDirs[w.a]
	dev := filepath.Join(ra, "sysfs", "class", "infiniband", name)
	target, err := os.Readlink(filepath.Join(dev, "device", "net", w.a.Ifname))
	require.NoError(t, err)
	assert.Equal(t, "/sys/class/net/"+w.a.Ifname, target)
	modalias, err := os.ReadFile(filepath.Join(dev, "device", "modalias"))
	require.NoError(t, err)
	assert.Equal(t, "softnic\n", string(modalias))
	assert.FileExists(t, filepath.Join(ra, name+".sock"))
	view, err := os.Readlink(filepath.Join(ra, "netns", netnsIno(t, w.a), "class", "infiniband", name))
	require.NoError(t, err)
	assert.Equal(t, "../../../../sysfs/class/infiniband/"+name, view)

	// One daemon per name in a run directory; names are checked.
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", w.b.Namespace, w.bin, "daemon", "-d", w.b.Ifname+":"+name,
		"--run-dir", ra).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "another softnic daemon serves this device")
	out, err = exec.CommandContext(ctx, w.bin, "daemon", "-d", "veth9:bad/name", "--run-dir", ra).CombinedOutput()
	require.Error(t, err)
	assert.Equal(t, 2, err.(*exec.ExitError).ExitCode())
	assert.Contains(t, string(out), `device name "bad/name": '/' is not a letter`)

	// The default name of a device served under another is told the
	// name it has, by every command that takes a device; a GID index
	// that holds none, the ones that do.
	wrong := "softnic_" + w.a.Ifname
	for _, args := range [][]string{{"perf", "write_bw", "-d", wrong}, {"pingpong", "-d", wrong}, {"devinfo", "-d", wrong},
		{"stat", "-d", wrong}, {"stat", "res", "-d", wrong}, {"exec", "-d", wrong, "--", "true"}} {
		_, errOut, err := outputs(t, w.nobody(ctx, w.a, args...))
		require.Error(t, err, "%v", args)
		assert.Contains(t, errOut, "no device "+wrong+": interface "+w.a.Ifname+" is served as device "+name+
			"; give -d "+name+" or -d "+w.a.Ifname, "%v", args)
	}
	_, errOut, err := outputs(t, w.nobody(ctx, w.a, "perf", "write_bw", "-d", name, "-x", "5"))
	require.Error(t, err)
	assert.Contains(t, errOut, "GID index 5: "+name+" has no GID there; valid GID indexes: 0 (fe80::")
	assert.Contains(t, errOut, "1 (::ffff:"+w.a.Addr4().String()+", IPv4 "+w.a.Addr4().String()+")")

	for _, end := range []*netnstest.End{w.a, w.b} {
		for _, arg := range []string{name, end.Ifname} {
			// Through the provider, which takes the device by its
			// modalias: ibv_devinfo lists the name.
			out, errOut, err := outputs(t, w.nobody(ctx, end, "exec", "-d", arg, "--", "ibv_devinfo", "-d", name))
			require.NoError(t, err, "%s%s", out, errOut)
			assert.Contains(t, out, "hca_id:\t"+name+"\n")
			out, errOut, err = outputs(t, w.nobody(ctx, end, "devinfo", "-d", arg))
			require.NoError(t, err, "%s%s", out, errOut)
			assert.Contains(t, out, "hca_id:\t"+name+"\n")
			out, errOut, err = outputs(t, w.nobody(ctx, end, "stat", "-d", arg))
			require.NoError(t, err, "%s%s", out, errOut)
			assert.Contains(t, out, "link "+name+"/1 ")
			out, errOut, err = outputs(t, w.nobody(ctx, end, "stat", "res", "-d", arg))
			require.NoError(t, err, "%s%s", out, errOut)
			assert.Contains(t, out, "0: "+name+": ")
		}
	}

	// Between the hosts, by the name: perftest, and softnic's own tools
	// (as nobody, so through the daemons).
	runPair := func(server, client []string, ready func() bool) (string, string) {
		t.Helper()
		srv := w.nobody(ctx, w.a, server...)
		var sout syncbuf.Buffer
		srv.Stdout, srv.Stderr = &sout, &sout
		require.NoError(t, srv.Start())
		if !assert.Eventually(t, ready, 30*time.Second, 20*time.Millisecond) {
			srv.Process.Kill()
			srv.Wait()
			t.Fatalf("%v never listened:\n%s", server, sout.String())
		}
		cout, cerr := w.nobody(ctx, w.b, client...).CombinedOutput()
		serr := srv.Wait()
		require.True(t, serr == nil && cerr == nil, "server %v:\n%s\nclient %v:\n%s", serr, sout.String(), cerr, cout)
		return sout.String(), string(cout)
	}
	a4 := w.a.Addr4().String()
	tcp := func() bool { return listens(t, w.a, 18515) }
	bw := []string{"exec", "--", "ib_write_bw", "-d", name, "-x", "1", "-n", "200"}
	sout, cout := runPair(bw, append(bw, a4), tcp)
	for _, out := range []string{sout, cout} {
		require.Greater(t, perftestLast(t, out, 65536), 0.0, "ib_write_bw: no figure:\n%s", out)
	}
	perf := []string{"perf", "write_bw", "-d", name, "-n", "200"}
	_, cout = runPair(perf, append(perf, "--connect-wait=20s", a4), tcp)
	assert.Regexp(t, `(?m)^ 65536      200 `, cout)
	pp := []string{"pingpong", "-d", name, "-n", "10"}
	sout, cout = runPair(pp, append(pp, "--connect-wait=20s", a4), tcp)
	for _, out := range []string{sout, cout} {
		assert.Contains(t, out, "bytes in ", "pingpong")
	}
	if _, err := exec.LookPath("ucx_info"); err == nil {
		out, err := w.nobody(ctx, w.a, "exec", "--", "ucx_info", "-d").CombinedOutput()
		require.NoError(t, err, string(out))
		assert.Contains(t, string(out), "Device: "+name+":1")
	} else {
		t.Log("ucx_info not installed (apt-get install ucx-utils): not run")
	}
	w.stop(t)
}

// TestExecWithoutUserNamespaces: where no user namespace can be made
// (user.max_user_namespaces=0, in a user namespace of the test's own, so
// that nothing else on the host sees the limit), softnic exec says so on
// one line and runs the program with SYSFS_PATH only; --sysfs mount
// fails instead.
func TestExecWithoutUserNamespaces(t *testing.T) {
	w := newViewWorld(t, "", "", true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// limited runs softnic ARGS as nobody in A's network namespace and in
	// a user namespace mapping uids and gids 0 to 65535 to themselves,
	// whose root first sets the limit there.
	outputs := func(t *testing.T, args ...string) (string, string, error) {
		script := `echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --reuid=65534 --regid=65534 --clear-groups "$@"`
		cmd := exec.CommandContext(ctx, "sh", append([]string{"-c", script, "sh", w.bin}, args...)...)
		cmd.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+w.runDirs[w.a])
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},
			GidMappingsEnableSetgroups: true}
		var out, errOut syncbuf.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		// Forked from a thread in A's network namespace.
		require.NoError(t, w.a.Do(cmd.Start))
		err := cmd.Wait()
		return out.String(), errOut.String(), err
	}
	probe := "ls /sys/class/infiniband 2>&1; ibv_devices"
	out, errOut, err := outputs(t, "exec", "--", "sh", "-c", probe)
	require.NoError(t, err, "%s%s", out, errOut)
	assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line:\n%s", errOut)
	assert.Regexp(t, `^softnic exec: no private /sys/class for the program \(user namespaces are off here: `+
		`user.max_user_namespaces is reached .*\): it finds softnic's devices through SYSFS_PATH only`, errOut)
	assert.Contains(t, out, "cannot access '/sys/class/infiniband'")
	assert.Contains(t, out, w.names[w.a], "ibv_devices lists the device")

	_, errOut, err = outputs(t, "exec", "--sysfs", "mount", "--", "true")
	require.Error(t, err)
	assert.Contains(t, errOut, "softnic exec: no private /sys/class")
	out, errOut, err = outputs(t, "exec", "--sysfs", "env", "--", "sh", "-c", probe)
	require.NoError(t, err, "%s%s", out, errOut)
	assert.Empty(t, errOut)
	w.stop(t)
}

// TestExecPrivileges: a caller with ambient capabilities keeps them and
// gets no view (a user namespace would take them), said on one line,
// unless --sysfs mount asks for the view; in the view, a set-user-ID
// root program does not become root.
func TestExecPrivileges(t *testing.T) {
	w := newViewWorld(t, "", "", true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	probe := "ls /sys/class/infiniband 2>&1; grep -E '^Cap(Eff|Amb)' /proc/self/status | tr -s '\\t' ' '"
	withCaps := func(args ...string) *exec.Cmd {
		return w.nobodyRuns(ctx, w.a, append([]string{"--inh-caps=+ipc_lock", "--ambient-caps=+ipc_lock", w.bin}, args...)...)
	}
	out, errOut, err := outputs(t, withCaps("exec", "--", "sh", "-c", probe))
	require.NoError(t, err, "%s%s", out, errOut)
	assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line:\n%s", errOut)
	assert.Contains(t, errOut, "softnic exec: no private /sys/class for the program (the program keeps its capabilities cap_ipc_lock")
	assert.Contains(t, out, "No such file or directory")
	assert.Contains(t, out, "CapAmb: 0000000000004000")

	out, errOut, err = outputs(t, withCaps("exec", "--sysfs", "mount", "--", "sh", "-c", probe))
	require.NoError(t, err, "%s%s", out, errOut)
	assert.Empty(t, errOut)
	assert.Contains(t, out, w.names[w.a]+"\n")
	assert.Contains(t, out, "CapEff: 0000000000000000")
	assert.Contains(t, out, "CapAmb: 0000000000000000")

	out, errOut, err = outputs(t, withCaps("exec", "--sysfs", "env", "--", "sh", "-c", probe))
	require.NoError(t, err, "%s%s", out, errOut)
	assert.Empty(t, errOut)
	assert.Contains(t, out, "CapAmb: 0000000000004000")

	// A set-user-ID root copy of id(1).
	idPath, err := exec.LookPath("id")
	require.NoError(t, err)
	self, err := os.ReadFile(idPath)
	require.NoError(t, err)
	suid := filepath.Join(systest.RootDir(t), "id")
	require.NoError(t, os.WriteFile(suid, self, 0o755))
	require.NoError(t, syscall.Chmod(suid, 0o4755))
	out, errOut, err = outputs(t, w.nobody(ctx, w.a, "exec", "--sysfs", "env", "--", suid))
	require.NoError(t, err, "%s%s", out, errOut)
	assert.Contains(t, out, "euid=0(root)", "the set-user-ID bit, outside a user namespace")
	out, errOut, err = outputs(t, w.nobody(ctx, w.a, "exec", "--", suid))
	require.NoError(t, err, "%s%s", out, errOut)
	assert.Empty(t, errOut)
	assert.NotContains(t, out, "euid=", "a set-user-ID root program became root in the view")
	assert.Contains(t, out, "uid=65534")
	w.stop(t)
}
