package system

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// installedFiles are what `make install PREFIX=/usr/local` puts, relative
// to DESTDIR.
var installedFiles = []string{
	"usr/local/bin/softnic",
	"usr/local/lib/softnic/libsoftnic-rdmav34.so",
	"usr/local/lib/softnic/librdmacm.so.1",
	"usr/local/lib/systemd/system/softnic.service",
	"usr/local/share/man/man1/softnic.1.gz",
	"usr/local/share/bash-completion/completions/softnic",
	"etc/default/softnic",
}

// TestMakeInstall installs into a DESTDIR, starts a daemon on each end of
// a veth pair from the installed unit's ExecStart line (its
// EnvironmentFile's SOFTNIC_ARGS, edited as an administrator would: this
// pair's interface instead of eth0, and a run directory of the test's
// own), runs Debian's ib_write_bw between them through the installed
// softnic exec (which finds the installed provider as ../lib/softnic), and
// checks that make uninstall takes every file away again.
func TestMakeInstall(t *testing.T) {
	netnstest.Integration(t)
	netnstest.RequireCommands(t, "apt-get install make gcc libibverbs-dev librdmacm-dev perftest", "make", "cc", "ib_write_bw", "setpriv")
	dest := systest.RootDir(t)
	root := systest.Root(t)
	makeRun(t, root, "build") // make && sudo make install, as USAGE.md says
	makeRun(t, root, "install", "DESTDIR="+dest, "PREFIX=/usr/local")
	for _, f := range installedFiles {
		require.FileExists(t, filepath.Join(dest, f))
	}
	unit, err := readServiceUnit(filepath.Join(dest, "usr/local/lib/systemd/system/softnic.service"))
	require.NoError(t, err)
	require.NotEmpty(t, unit.envFile, "the unit names no EnvironmentFile")
	env, err := readEnvFile(filepath.Join(dest, unit.envFile))
	require.NoError(t, err)
	require.Contains(t, env["SOFTNIC_ARGS"], "-d eth0", "the shipped flags file's example")

	pair := netnstest.NewT(t, netnstest.Config{})
	systest.SettledGIDs(t, &pair.A, 1+len(pair.A.Addrs))
	systest.SettledGIDs(t, &pair.B, 1+len(pair.B.Addrs))
	runDir := systest.RootDir(t)
	var stops []func()
	for _, end := range []*netnstest.End{&pair.A, &pair.B} {
		stops = append(stops, startUnitDaemon(t, dest, unit, env, end, runDir))
	}
	w := &providerWorld{bin: filepath.Join(dest, "usr/local/bin/softnic"), runDir: runDir, a: &pair.A, b: &pair.B}
	args := []string{"ib_write_bw", "-x", "1", "-n", "500"}
	sout, cout := w.pair(t, 18515, args, args)
	for _, out := range []string{sout, cout} {
		require.Greater(t, perftestLast(t, out, 65536), 0.0, "no figure:\n%s", out)
	}

	for _, stop := range stops {
		stop()
	}
	makeRun(t, root, "uninstall", "DESTDIR="+dest, "PREFIX=/usr/local")
	var left []string
	require.NoError(t, filepath.Walk(dest, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			left = append(left, path)
		}
		return err
	}))
	assert.Empty(t, left, "files make uninstall left")
	assert.NoDirExists(t, filepath.Join(dest, "usr/local/lib/softnic"))
}

// makeRun runs make TARGET in the source tree; it must succeed.
func makeRun(t *testing.T, root string, args ...string) string {
	t.Helper()
	// The go command the test runs with: PATH may lack one.
	gocmd := "GO=" + filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command("make", append([]string{"-s", "-C", root, gocmd}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "make %v:\n%s", args, out)
	return string(out)
}

// startUnitDaemon runs the unit's ExecStart command (its binary under
// dest) in end's namespace with the environment file's variables, whose
// SOFTNIC_ARGS serve end's interface instead of eth0 and use runDir
// (a later --run-dir wins over the unit's /run/softnic). It returns once
// the daemon serves, with stop, which ends it with SIGTERM (the test's end
// does if it has not) and fails the test if it did not exit cleanly.
func startUnitDaemon(t *testing.T, dest string, unit serviceUnit, env map[string]string, end *netnstest.End, runDir string) (stop func()) {
	t.Helper()
	mine := map[string]string{}
	for k, v := range env {
		mine[k] = v
	}
	mine["SOFTNIC_ARGS"] = strings.Replace(env["SOFTNIC_ARGS"], "eth0", end.Ifname, 1) + " --run-dir " + runDir
	argv, err := execArgv(unit.execStart, mine)
	require.NoError(t, err)
	argv[0] = filepath.Join(dest, argv[0])
	var log syncbuf.Buffer
	cmd := exec.Command("ip", append([]string{"netns", "exec", end.Namespace}, argv...)...)
	cmd.Stdout, cmd.Stderr = &log, &log
	require.NoError(t, cmd.Start(), "%v", argv)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var exitErr error
	stopped := false
	halt := func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGTERM) // the unit's KillSignal
		select {
		case exitErr = <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			exitErr = <-done
		}
	}
	t.Cleanup(func() {
		halt()
		if t.Failed() {
			t.Logf("daemon %v (exit %v) said:\n%s", argv, exitErr, systest.Tail(log.String(), 40))
		}
	})
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(log.String(), "serving"); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("daemon %v exited: %v\n%s", argv, err, log.String())
		default:
		}
		require.False(t, time.Now().After(deadline), "daemon %v did not serve within 20 s:\n%s", argv, log.String())
	}
	return func() {
		halt()
		require.NoError(t, exitErr, "daemon %v on SIGTERM:\n%s", argv, log.String())
	}
}
