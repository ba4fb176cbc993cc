package rxeguest

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"
)

// cpioWriter writes the "newc" cpio format the kernel unpacks as an
// initramfs. Several archives may be concatenated; later entries win.
type cpioWriter struct {
	w   *bufio.Writer
	ino uint32
	n   int64 // bytes written, for padding
	err error
}

func newCPIOWriter(w io.Writer) *cpioWriter {
	return &cpioWriter{w: bufio.NewWriter(w), ino: 1}
}

// cpio mode bits (the same as stat's S_IF* values).
const (
	cpioModeDir     = 0o040000
	cpioModeFile    = 0o100000
	cpioModeSymlink = 0o120000
	cpioModeChar    = 0o020000
)

func (c *cpioWriter) write(p []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if rem := c.n % 4; rem != 0 {
		c.write(make([]byte, 4-rem))
	}
}

func (c *cpioWriter) entry(name string, mode uint32, data []byte, rdevMajor, rdevMinor uint32) {
	name = strings.TrimPrefix(name, "/")
	nlink := uint32(1)
	if mode&0o170000 == cpioModeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.ino++
	c.write([]byte(hdr))
	c.write([]byte(name))
	c.write([]byte{0})
	c.pad()
	c.write(data)
	c.pad()
}

// Dir adds a directory.
func (c *cpioWriter) Dir(name string, perm fs.FileMode) {
	c.entry(name, cpioModeDir|uint32(perm.Perm()), nil, 0, 0)
}

// File adds a regular file.
func (c *cpioWriter) File(name string, perm fs.FileMode, data []byte) {
	c.entry(name, cpioModeFile|uint32(perm.Perm()), data, 0, 0)
}

// Symlink adds a symbolic link name pointing at target.
func (c *cpioWriter) Symlink(name, target string) {
	c.entry(name, cpioModeSymlink|0o777, []byte(target), 0, 0)
}

// CharDev adds a character device node.
func (c *cpioWriter) CharDev(name string, perm fs.FileMode, major, minor uint32) {
	c.entry(name, cpioModeChar|uint32(perm.Perm()), nil, major, minor)
}

// Close writes the trailer and flushes.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, nil, 0, 0)
	if c.err == nil {
		c.err = c.w.Flush()
	}
	if c.err != nil {
		return fmt.Errorf("write cpio archive: %w", c.err)
	}
	return nil
}

// tree collects an initramfs's contents so that parent directories are
// created implicitly and entries are written in a stable order.
type tree struct {
	dirs  map[string]bool
	files map[string]treeFile
}

type treeFile struct {
	mode   uint32 // cpioMode* | permission bits
	data   []byte
	target string // symlink target
	major  uint32
	minor  uint32
}

func newTree() *tree {
	return &tree{dirs: map[string]bool{}, files: map[string]treeFile{}}
}

func (t *tree) addParents(name string) {
	for dir := parentDir(name); dir != ""; dir = parentDir(dir) {
		t.dirs[dir] = true
	}
}

func parentDir(name string) string {
	i := strings.LastIndexByte(name, '/')
	if i <= 0 {
		return ""
	}
	return name[:i]
}

func cleanName(name string) string {
	return strings.Trim(name, "/")
}

func (t *tree) Dir(name string) {
	name = cleanName(name)
	t.addParents(name)
	t.dirs[name] = true
}

func (t *tree) File(name string, perm fs.FileMode, data []byte) {
	name = cleanName(name)
	t.addParents(name)
	t.files[name] = treeFile{mode: cpioModeFile | uint32(perm.Perm()), data: data}
}

func (t *tree) Symlink(name, target string) {
	name = cleanName(name)
	t.addParents(name)
	t.files[name] = treeFile{mode: cpioModeSymlink | 0o777, target: target}
}

func (t *tree) CharDev(name string, perm fs.FileMode, major, minor uint32) {
	name = cleanName(name)
	t.addParents(name)
	t.files[name] = treeFile{mode: cpioModeChar | uint32(perm.Perm()), major: major, minor: minor}
}

// Write writes the tree as one newc archive: directories first (parents
// before children), then everything else, each group sorted by name.
func (t *tree) Write(w io.Writer) error {
	c := newCPIOWriter(w)
	dirs := make([]string, 0, len(t.dirs))
	for d := range t.dirs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs) // a parent sorts before its children
	for _, d := range dirs {
		c.Dir(d, 0o755)
	}
	names := make([]string, 0, len(t.files))
	for n := range t.files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := t.files[n]
		switch f.mode & 0o170000 {
		case cpioModeSymlink:
			c.Symlink(n, f.target)
		case cpioModeChar:
			c.entry(n, f.mode, nil, f.major, f.minor)
		default:
			c.entry(n, f.mode, f.data, 0, 0)
		}
	}
	return c.Close()
}
