// Package securedir opens directories a privileged process may write in
// without being led elsewhere by another user, and makes and removes
// files there without following symbolic links.
//
// Open checks a directory's path component by component, each opened
// relative to the one before with O_NOFOLLOW (no path is resolved by the
// kernel in one go, so no link planted meanwhile is followed unchecked):
// every directory on the way must be owned by root or by the process's
// effective user, and not writable by its group or others unless it is
// sticky (as /tmp is: there nobody removes or renames another's entry);
// the directory itself must be owned by root or the effective user and
// writable by nobody else, sticky or not. A symbolic link on the way is
// followed only if root or the effective user owns it. Once checked,
// nobody but root and the effective user can change what the path names.
//
// A Dir's methods then work relative to its descriptor, and never follow
// a link at the name they are given: a link, or any entry of the wrong
// kind, found where a file or directory is to be made is a stale entry,
// unlinked and replaced.
package securedir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxLinks bounds the symbolic links Open follows, as the kernel's
// MAXSYMLINKS does (ELOOP after 40).
const maxLinks = 40

// Dir is an open directory whose path Open or MkdirAll checked.
type Dir struct {
	fd   int
	path string
	// parent and name are the directory's parent (an O_PATH descriptor,
	// -1 for /) and its name there, for RemoveIfEmpty.
	parent int
	name   string
}

// UnsafeError is Open's refusal of a path another user could redirect;
// its text says what is wrong and what to do.
type UnsafeError struct{ msg string }

func (e *UnsafeError) Error() string { return e.msg }

// who is the set of users a safe directory may be written by.
func who(euid int) string {
	if euid == 0 {
		return "root"
	}
	return fmt.Sprintf("root or uid %d", euid)
}

// checkDir checks a directory on the way (final false) or the directory
// itself (final true) with the stat of the object held open.
func checkDir(what, target, dir string, st *unix.Stat_t, final bool, euid int) error {
	owner := int(st.Uid)
	writable := st.Mode&0o022 != 0
	sticky := st.Mode&unix.S_ISVTX != 0
	mode := st.Mode & 0o7777
	switch {
	case final && owner != 0 && owner != euid:
		return &UnsafeError{fmt.Sprintf("%s %s is owned by uid %d: use a directory only %s can write (chown root, chmod 755)",
			what, target, owner, who(euid))}
	case final && writable:
		return &UnsafeError{fmt.Sprintf("%s %s is writable by its group or others (mode %04o): use a directory only %s can write (chown root, chmod 755)",
			what, target, mode, who(euid))}
	case !final && owner != 0 && owner != euid:
		return &UnsafeError{fmt.Sprintf("%s %s: %s above it is owned by uid %d, who could replace what is below: "+
			"use a directory whose every parent only %s can write (chown root %s, chmod 755)", what, target, dir, owner, who(euid), dir)}
	case !final && writable && !sticky:
		return &UnsafeError{fmt.Sprintf("%s %s: %s above it is writable by its group or others (mode %04o) and not sticky, "+
			"so another user could replace what is below: use a directory whose every parent only %s can write "+
			"(chmod go-w %s, or chmod +t %s as /tmp is)", what, target, dir, mode, who(euid), dir, dir)}
	}
	return nil
}

// split returns the components of a slash-separated path.
func split(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// Open opens the directory at path (relative to the working directory if
// not absolute) after checking it and every directory above it, as the
// package's doc says; with create it makes the missing ones, mode 0755.
// what names the directory in errors ("run directory"). A refusal is an
// *UnsafeError.
func Open(what, p string, create bool) (*Dir, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, err
	}
	euid := os.Geteuid()
	rootFD, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: "/", Err: err}
	}
	// stack holds the descriptors of the directories walked so far, /
	// first; names their names.
	stack := []int{rootFD}
	var names []string
	closeAll := func() {
		for _, fd := range stack {
			unix.Close(fd)
		}
	}
	cur := func() string { return "/" + strings.Join(names, "/") }
	var st unix.Stat_t
	if err := unix.Fstat(rootFD, &st); err != nil {
		closeAll()
		return nil, &os.PathError{Op: "stat", Path: "/", Err: err}
	}
	pending := split(abs)
	if err := checkDir(what, abs, "/", &st, len(pending) == 0, euid); err != nil {
		closeAll()
		return nil, err
	}
	links := 0
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		if c == ".." {
			if len(stack) > 1 {
				unix.Close(stack[len(stack)-1])
				stack, names = stack[:len(stack)-1], names[:len(names)-1]
			}
			continue
		}
		parent := stack[len(stack)-1]
		here := path.Join(cur(), c)
		fd, err := unix.Openat(parent, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		created := false
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(parent, c, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				created = err == nil
				fd, err = unix.Openat(parent, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			} else {
				closeAll()
				return nil, &os.PathError{Op: "mkdir", Path: here, Err: err}
			}
		}
		if err != nil {
			closeAll()
			return nil, &os.PathError{Op: "open", Path: here, Err: err}
		}
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			closeAll()
			return nil, &os.PathError{Op: "stat", Path: here, Err: err}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := readlinkFD(fd)
			unix.Close(fd)
			if err != nil {
				closeAll()
				return nil, &os.PathError{Op: "readlink", Path: here, Err: err}
			}
			if owner := int(st.Uid); owner != 0 && owner != euid {
				closeAll()
				return nil, &UnsafeError{fmt.Sprintf("%s %s: %s is a symbolic link owned by uid %d: use a path whose links only %s made",
					what, abs, here, owner, who(euid))}
			}
			if links++; links > maxLinks {
				closeAll()
				return nil, &os.PathError{Op: "open", Path: abs, Err: unix.ELOOP}
			}
			if strings.HasPrefix(target, "/") {
				for _, fd := range stack[1:] {
					unix.Close(fd)
				}
				stack, names = stack[:1], nil
			}
			pending = append(split(target), pending...)
			continue
		case unix.S_IFDIR:
		default:
			unix.Close(fd)
			closeAll()
			return nil, &os.PathError{Op: "open", Path: here, Err: unix.ENOTDIR}
		}
		final := len(pending) == 0
		if err := checkDir(what, abs, here, &st, final, euid); err != nil {
			unix.Close(fd)
			closeAll()
			return nil, err
		}
		if created || final {
			// The directory itself is held open for reading, and a new
			// one gets its mode whatever the umask.
			rfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err == nil && created {
				err = unix.Fchmod(rfd, 0o755)
			}
			if err != nil {
				unix.Close(fd)
				closeAll()
				return nil, &os.PathError{Op: "open", Path: here, Err: err}
			}
			if final {
				unix.Close(fd)
				fd = rfd
			} else {
				unix.Close(rfd)
			}
		}
		stack, names = append(stack, fd), append(names, c)
	}
	d := &Dir{fd: stack[len(stack)-1], path: cur(), parent: -1}
	if len(stack) == 1 {
		// The directory is /: reopen it for reading.
		fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		closeAll()
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: "/", Err: err}
		}
		d.fd = fd
		return d, nil
	}
	d.parent, d.name = stack[len(stack)-2], names[len(names)-1]
	for _, fd := range stack[:len(stack)-2] {
		unix.Close(fd)
	}
	return d, nil
}

// readlinkFD reads the target of the symbolic link fd (opened O_PATH|O_NOFOLLOW).
func readlinkFD(fd int) (string, error) {
	return readlinkAt(fd, "")
}

func readlinkAt(dirfd int, name string) (string, error) {
	for n := 256; ; n *= 2 {
		buf := make([]byte, n)
		got, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if got < n {
			return string(buf[:got]), nil
		}
	}
}

// Path is the directory's path, with the links Open followed resolved.
func (d *Dir) Path() string { return d.path }

// Close closes the directory's descriptors.
func (d *Dir) Close() error {
	if d.parent >= 0 {
		unix.Close(d.parent)
	}
	return unix.Close(d.fd)
}

// checkName refuses a name that is not one component.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return fmt.Errorf("securedir: %q is not a file name", name)
	}
	return nil
}

func (d *Dir) pathErr(op, name string, err error) error {
	return &os.PathError{Op: op, Path: path.Join(d.path, name), Err: err}
}

// lstat stats name without following it; ok is false when there is none.
func (d *Dir) lstat(name string) (st unix.Stat_t, ok bool, err error) {
	err = unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return st, false, nil
	}
	return st, err == nil, err
}

// clearStale unlinks name unless it is absent or of kind (unix.S_IFREG,
// unix.S_IFDIR...); a directory in the way is not removed (an error).
func (d *Dir) clearStale(name string, kind uint32) error {
	st, ok, err := d.lstat(name)
	if err != nil {
		return d.pathErr("lstat", name, err)
	}
	if !ok || st.Mode&unix.S_IFMT == kind {
		return nil
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return d.pathErr("replace", name, unix.EISDIR)
	}
	if err := unix.Unlinkat(d.fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return d.pathErr("unlink", name, err)
	}
	return nil
}

// sub opens the directory name in d without following a link.
func (d *Dir) sub(name string) (*Dir, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, d.pathErr("open", name, err)
	}
	parent, err := unix.Dup(d.fd)
	if err != nil {
		unix.Close(fd)
		return nil, d.pathErr("dup", ".", err)
	}
	unix.CloseOnExec(parent)
	return &Dir{fd: fd, path: path.Join(d.path, name), parent: parent, name: name}, nil
}

// checkOwn checks a directory below a checked one as Open checks the
// directory itself.
func (d *Dir) checkOwn(s *Dir) error {
	var st unix.Stat_t
	if err := unix.Fstat(s.fd, &st); err != nil {
		return d.pathErr("stat", s.name, err)
	}
	return checkDir("directory", s.path, s.path, &st, true, os.Geteuid())
}

// walk opens the directories of the slash-separated path rel below d,
// making the missing ones (mode 0755) and replacing stale entries in
// their way with create, and following no link either way.
func (d *Dir) walk(rel string, create bool) (*Dir, error) {
	comps := split(rel)
	for _, c := range comps {
		if c == ".." {
			return nil, fmt.Errorf("securedir: %q leaves the directory", rel)
		}
	}
	cur := d
	for _, c := range comps {
		if create {
			if err := cur.clearStale(c, unix.S_IFDIR); err != nil {
				return nil, closeErr(cur, d, err)
			}
			err := unix.Mkdirat(cur.fd, c, 0o755)
			made := err == nil
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return nil, closeErr(cur, d, cur.pathErr("mkdir", c, err))
			}
			next, err := cur.sub(c)
			if err == nil && made {
				if err = unix.Fchmod(next.fd, 0o755); err != nil {
					next.Close()
					err = next.pathErr("chmod", ".", err)
				}
			}
			if err != nil {
				return nil, closeErr(cur, d, err)
			}
			if cur != d {
				cur.Close()
			}
			cur = next
		} else {
			next, err := cur.sub(c)
			if err != nil {
				return nil, closeErr(cur, d, err)
			}
			if cur != d {
				cur.Close()
			}
			cur = next
		}
		if err := d.checkOwn(cur); err != nil {
			cur.Close()
			return nil, err
		}
	}
	if cur == d {
		// rel is d itself: a Dir of its own.
		return d.sub(".")
	}
	return cur, nil
}

func closeErr(cur, d *Dir, err error) error {
	if cur != d {
		cur.Close()
	}
	return err
}

// MkdirAll opens the directory rel (slash-separated, below d), making it
// and the directories above it, mode 0755, where missing. A link or file
// in the way is unlinked, not followed.
func (d *Dir) MkdirAll(rel string) (*Dir, error) { return d.walk(rel, true) }

// OpenDir opens the directory rel below d, following no link.
func (d *Dir) OpenDir(rel string) (*Dir, error) { return d.walk(rel, false) }

// WriteFile replaces name with a file of data and mode perm: written as
// name.new (a stale entry of that name unlinked first, the new one made
// with O_EXCL) and renamed over name, so that a reader sees the old file or
// the new one, and a link at either name is replaced, never written
// through.
func (d *Dir) WriteFile(name string, data []byte, perm os.FileMode) error {
	if err := checkName(name); err != nil {
		return err
	}
	tmp := name + ".new"
	if err := d.clearStale(tmp, 0); err != nil {
		return err
	}
	fd, err := unix.Openat(d.fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return d.pathErr("create", tmp, err)
	}
	f := os.NewFile(uintptr(fd), path.Join(d.path, tmp))
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm.Perm())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if err = unix.Renameat(d.fd, tmp, d.fd, name); err != nil {
			err = d.pathErr("rename", tmp, err)
		}
	}
	if err != nil {
		unix.Unlinkat(d.fd, tmp, 0)
	}
	return err
}

// OpenFile opens the regular file name for reading and writing, made with
// mode perm if missing. A link or other entry at the name is unlinked
// first, not followed or opened.
func (d *Dir) OpenFile(name string, perm os.FileMode) (*os.File, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := d.clearStale(name, unix.S_IFREG); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(d.fd, name, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return nil, d.pathErr("open", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		if err == nil {
			err = unix.EINVAL
		}
		return nil, d.pathErr("open", name, err)
	}
	return os.NewFile(uintptr(fd), path.Join(d.path, name)), nil
}

// Symlink makes name a symbolic link to target; a stale link or file of
// that name is unlinked first.
func (d *Dir) Symlink(target, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := d.clearStale(name, 0); err != nil {
		return err
	}
	if err := unix.Symlinkat(target, d.fd, name); err != nil {
		return d.pathErr("symlink", name, err)
	}
	return nil
}

// Readlink returns the target of the link name.
func (d *Dir) Readlink(name string) (string, error) {
	t, err := readlinkAt(d.fd, name)
	if err != nil {
		return "", d.pathErr("readlink", name, err)
	}
	return t, nil
}

// Remove unlinks name, which is not a directory; it is not followed.
func (d *Dir) Remove(name string) error {
	if err := unix.Unlinkat(d.fd, name, 0); err != nil {
		return d.pathErr("remove", name, err)
	}
	return nil
}

// RemoveDir removes the empty directory name.
func (d *Dir) RemoveDir(name string) error {
	if err := unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR); err != nil {
		return d.pathErr("remove", name, err)
	}
	return nil
}

// RemoveIfEmpty removes the directory itself if it is empty (an error
// otherwise, or for /).
func (d *Dir) RemoveIfEmpty() error {
	if d.parent < 0 {
		return &os.PathError{Op: "remove", Path: d.path, Err: unix.EBUSY}
	}
	if err := unix.Unlinkat(d.parent, d.name, unix.AT_REMOVEDIR); err != nil {
		return &os.PathError{Op: "remove", Path: d.path, Err: err}
	}
	return nil
}

// RemoveAll removes name and, if it is a directory, everything below it,
// following no link; a missing name is no error.
func (d *Dir) RemoveAll(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	err := unix.Unlinkat(d.fd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return d.pathErr("remove", name, err)
	}
	s, err := d.sub(name)
	if err != nil {
		return err
	}
	ents, err := s.Names()
	for _, e := range ents {
		if rerr := s.RemoveAll(e); err == nil {
			err = rerr
		}
	}
	s.Close()
	if err != nil {
		return err
	}
	return d.RemoveDir(name)
}

// Names lists the directory's entries.
func (d *Dir) Names() ([]string, error) {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, d.pathErr("open", ".", err)
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err == io.EOF {
		err = nil
	}
	return names, err
}
