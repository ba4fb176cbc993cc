package securedir

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// needRoot skips a test that gives files to another user.
func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it chowns directories to uid 65534")
	}
}

func mkdir(t *testing.T, p string, mode os.FileMode) string {
	require.NoError(t, os.Mkdir(p, mode))
	require.NoError(t, os.Chmod(p, mode)) // whatever the umask
	return p
}

func refused(t *testing.T, p, want string) {
	t.Helper()
	d, err := Open("run directory", p, true)
	if d != nil {
		d.Close()
	}
	var unsafe *UnsafeError
	require.True(t, errors.As(err, &unsafe), "%s accepted (err %v)", p, err)
	assert.Contains(t, err.Error(), want)
}

func accepted(t *testing.T, p string) *Dir {
	t.Helper()
	d, err := Open("run directory", p, true)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return d
}

func TestOpenChecksModes(t *testing.T) {
	base := t.TempDir()
	open := mkdir(t, filepath.Join(base, "open"), 0o777)
	refused(t, open, "run directory "+open+" is writable by its group or others (mode 0777): use a directory only")
	group := mkdir(t, filepath.Join(base, "group"), 0o775)
	refused(t, group, "is writable by its group or others (mode 0775)")
	// A sticky directory is no run directory, but may be above one.
	sticky := mkdir(t, filepath.Join(base, "sticky"), os.ModeSticky|0o777)
	refused(t, sticky, "(mode 1777)")
	d := accepted(t, filepath.Join(sticky, "run"))
	assert.Equal(t, filepath.Join(sticky, "run"), d.Path())
	refused(t, filepath.Join(open, "run"), "run directory "+filepath.Join(open, "run")+": "+open+
		" above it is writable by its group or others (mode 0777) and not sticky")

	// What create makes is 0755 whatever the umask.
	old := syscall.Umask(0o077)
	d = accepted(t, filepath.Join(base, "a", "b"))
	syscall.Umask(old)
	for _, p := range []string{filepath.Join(base, "a"), d.Path()} {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm(), p)
	}

	_, err := Open("run directory", filepath.Join(base, "missing"), false)
	assert.ErrorIs(t, err, os.ErrNotExist)
	file := filepath.Join(base, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = Open("run directory", file, true)
	assert.ErrorIs(t, err, syscall.ENOTDIR)
}

func TestOpenChecksOwners(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	theirs := mkdir(t, filepath.Join(base, "theirs"), 0o755)
	require.NoError(t, os.Chown(theirs, 65534, 65534))
	refused(t, theirs, "run directory "+theirs+" is owned by uid 65534: use a directory only root can write (chown root, chmod 755)")
	refused(t, filepath.Join(theirs, "run"), theirs+" above it is owned by uid 65534")
	// Their sticky directory is theirs all the same.
	require.NoError(t, os.Chmod(theirs, os.ModeSticky|0o777))
	refused(t, filepath.Join(theirs, "run"), theirs+" above it is owned by uid 65534")

	// A link is followed if root made it, not if another user did.
	real := mkdir(t, filepath.Join(base, "real"), 0o755)
	mine := filepath.Join(base, "mine")
	require.NoError(t, os.Symlink("real", mine))
	d := accepted(t, mine)
	assert.Equal(t, real, d.Path())
	sticky := mkdir(t, filepath.Join(base, "sticky"), os.ModeSticky|0o777)
	planted := filepath.Join(sticky, "run")
	require.NoError(t, os.Symlink(real, planted))
	require.NoError(t, os.Lchown(planted, 65534, 65534))
	refused(t, planted, planted+" is a symbolic link owned by uid 65534")
}

func TestDirFollowsNoLink(t *testing.T) {
	base := t.TempDir()
	d := accepted(t, filepath.Join(base, "run"))
	target := filepath.Join(base, "target")
	require.NoError(t, os.WriteFile(target, []byte("theirs"), 0o644))
	unchanged := func() {
		t.Helper()
		b, err := os.ReadFile(target)
		require.NoError(t, err)
		require.Equal(t, "theirs", string(b), "written through a link")
	}
	plant := func(name string) {
		t.Helper()
		require.NoError(t, os.Symlink(target, filepath.Join(d.Path(), name)))
	}

	plant("lock")
	f, err := d.OpenFile("lock", 0o644)
	require.NoError(t, err)
	f.WriteString("pid")
	f.Close()
	unchanged()
	fi, err := os.Lstat(filepath.Join(d.Path(), "lock"))
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular())

	plant("file")
	plant("file.new")
	require.NoError(t, d.WriteFile("file", []byte("ours"), 0o644))
	unchanged()
	b, err := os.ReadFile(filepath.Join(d.Path(), "file"))
	require.NoError(t, err)
	assert.Equal(t, "ours", string(b))

	// A link where a directory goes is replaced by one.
	other := mkdir(t, filepath.Join(base, "other"), 0o755)
	require.NoError(t, os.Symlink(other, filepath.Join(d.Path(), "tree")))
	sub, err := d.MkdirAll("tree/class")
	require.NoError(t, err)
	require.NoError(t, sub.WriteFile("abi_version", []byte("6\n"), 0o644))
	sub.Close()
	ents, err := os.ReadDir(other)
	require.NoError(t, err)
	assert.Empty(t, ents, "written through the link")
	b, err = os.ReadFile(filepath.Join(d.Path(), "tree", "class", "abi_version"))
	require.NoError(t, err)
	assert.Equal(t, "6\n", string(b))
	_, err = d.OpenDir("tree/class")
	require.NoError(t, err)

	// RemoveAll takes links away, not what they name.
	require.NoError(t, os.Symlink(other, filepath.Join(d.Path(), "tree", "class", "link")))
	require.NoError(t, os.WriteFile(filepath.Join(other, "keep"), nil, 0o644))
	require.NoError(t, d.RemoveAll("tree"))
	_, err = os.Lstat(filepath.Join(d.Path(), "tree"))
	assert.True(t, os.IsNotExist(err))
	require.FileExists(t, filepath.Join(other, "keep"))

	// OpenDir follows no link either.
	require.NoError(t, os.Symlink(other, filepath.Join(d.Path(), "dirlink")))
	_, err = d.OpenDir("dirlink")
	assert.ErrorIs(t, err, syscall.ENOTDIR, "a link is no directory")

	plant("cdev")
	require.NoError(t, d.Symlink("/dev/null", "cdev"))
	l, err := d.Readlink("cdev")
	require.NoError(t, err)
	assert.Equal(t, "/dev/null", l)
	unchanged()

	e, err := d.MkdirAll("empty")
	require.NoError(t, err)
	require.NoError(t, e.RemoveIfEmpty())
	e.Close()
	assert.NoDirExists(t, filepath.Join(d.Path(), "empty"))
}
