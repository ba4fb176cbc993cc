package main

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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := buildSoftnic(t, ctx)
	pair := netnstest.NewT(t, netnstest.Config{})
	refused := func(t *testing.T, runDir, want string) {
		t.Helper()
		out, served := daemonOutcome(t, bin, &pair.A, runDir)
		require.False(t, served, "the daemon served from %s:\n%s", runDir, out)
		assert.Contains(t, out, "softnic daemon: "+want)
	}

	t.Run("owned by another user", func(t *testing.T) {
		dir := worldDir(t)
		require.NoError(t, os.Chown(dir, 65534, 65534))
		refused(t, dir, "run directory "+dir+" is owned by uid 65534: use a directory only root can write (chown root, chmod 755)")
	})
	t.Run("writable by others", func(t *testing.T) {
		dir := worldDir(t)
		require.NoError(t, os.Chmod(dir, 0o777))
		refused(t, dir, "run directory "+dir+" is writable by its group or others (mode 0777): use a directory only root can write")
	})
	t.Run("below a directory others may write", func(t *testing.T) {
		parent := worldDir(t)
		require.NoError(t, os.Chmod(parent, 0o777))
		dir := filepath.Join(parent, "run")
		refused(t, dir, "run directory "+dir+": "+parent+" above it is writable by its group or others (mode 0777) and not sticky")
		assert.NoDirExists(t, dir, "made below the directory refused")
	})
	t.Run("below a sticky directory", func(t *testing.T) {
		parent := worldDir(t)
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := buildSoftnic(t, ctx)
	pair := netnstest.NewT(t, netnstest.Config{})
	name := "softnic_" + pair.A.Ifname
	elsewhere := worldDir(t)
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
			runDir := worldDir(t)
			link := filepath.Join(runDir, c.link)
			require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
			require.NoError(t, os.Symlink(c.to, link))
			d, out := startDaemon(t, bin, &pair.A, runDir)
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
			assert.Equal(t, fmt.Sprintf("%d\n", d.Process.Pid), string(lock))
			stopDaemon(d)
			require.True(t, d.ProcessState.Success(), out.String())
			left, err := os.ReadDir(runDir)
			require.NoError(t, err)
			assert.Empty(t, left, "files left in the run directory")
		})
	}
}
