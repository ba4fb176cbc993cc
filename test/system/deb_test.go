package system

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/systest"
)

// TestDebPackage builds the .deb with make deb, installs it on this host
// with dpkg -i, runs the installed softnic version, a daemon from the
// installed unit and flags file, and ibv_devinfo through the installed
// softnic exec; then dpkg --purge, after which every directory the package
// touched (the parents of its files, and dpkg's info directory) lists
// exactly what it did before the install.
func TestDebPackage(t *testing.T) {
	netnstest.Integration(t)
	netnstest.RequireCommands(t, "apt-get install dpkg-dev make gcc libibverbs-dev librdmacm-dev ibverbs-utils", "dpkg", "dpkg-deb", "make", "cc", "ibv_devinfo")
	if out, err := exec.Command("dpkg-query", "-W", "-f", "${Status}", "softnic").Output(); err == nil &&
		strings.Contains(string(out), "installed") {
		t.Fatalf("a softnic package is installed on this host already (%s): not the test's to remove", out)
	}
	deb := filepath.Join(systest.RootDir(t), "softnic.deb")
	root := systest.Root(t)
	makeRun(t, root, "deb", "DEB="+deb)
	dirs := debDirs(t, deb)
	before := listDirs(dirs)

	dpkg(t, "-i", deb)
	t.Cleanup(func() { exec.Command("dpkg", "--purge", "softnic").Run() }) // after a failure on the way
	out, err := exec.Command("/usr/bin/softnic", "version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Regexp(t, `^softnic \S+ \(commit \S+, go`, string(out))
	// The Makefile's commit, where git works in the tree (CI's checkout).
	if head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output(); err == nil {
		assert.Contains(t, string(out), "(commit "+strings.TrimSpace(string(head)), "the commit make deb built")
	}

	unit, err := readServiceUnit("/usr/lib/systemd/system/softnic.service")
	require.NoError(t, err)
	require.Equal(t, "/etc/default/softnic", unit.envFile)
	env, err := readEnvFile(unit.envFile)
	require.NoError(t, err)
	pair := netnstest.NewT(t, netnstest.Config{})
	systest.SettledGIDs(t, &pair.A, 1+len(pair.A.Addrs))
	runDir := systest.RootDir(t)
	stop := startUnitDaemon(t, "/", unit, env, &pair.A, runDir)
	dev := "softnic_" + pair.A.Ifname
	out, err = pair.A.Command("/usr/bin/softnic", "exec", "--run-dir", runDir, "-d", dev, "--", "ibv_devinfo", "-d", dev).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "hca_id:\t"+dev)
	assert.Contains(t, string(out), "PORT_ACTIVE")
	stop()

	dpkg(t, "--purge", "softnic")
	after := listDirs(dirs)
	for _, d := range dirs {
		assert.Equal(t, before[d], after[d], "%s after dpkg --purge", d)
	}
}

// dpkg runs dpkg with args; it must succeed.
func dpkg(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("dpkg", args...).CombinedOutput()
	require.NoError(t, err, "dpkg %v:\n%s", args, out)
}

// debDirs are the directories a package's files go into (the parent of
// every path in it, directories themselves included) and dpkg's info
// directory, which holds its list and maintainer scripts while installed.
func debDirs(t *testing.T, deb string) []string {
	t.Helper()
	out, err := exec.Command("dpkg-deb", "--fsys-tarfile", deb).Output()
	require.NoError(t, err)
	list := exec.Command("tar", "-t")
	list.Stdin = strings.NewReader(string(out))
	names, err := list.Output()
	require.NoError(t, err)
	dirs := []string{"/var/lib/dpkg/info"}
	for _, n := range strings.Fields(string(names)) {
		p := path.Clean("/" + n)
		if p != "/" && !slices.Contains(dirs, path.Dir(p)) {
			dirs = append(dirs, path.Dir(p))
		}
	}
	require.Greater(t, len(dirs), 5, "the package's paths: %s", names)
	return dirs
}

// listDirs maps each directory to its entries' names ("(absent)" for one
// that does not exist).
func listDirs(dirs []string) map[string]string {
	m := map[string]string{}
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			m[d] = "(absent)"
			continue
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		m[d] = strings.Join(names, "\n")
	}
	return m
}
