package rxeguest

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// libDirs are where Debian's amd64 packages put shared libraries, relative
// to the unpacked root; the guest's dynamic loader searches the same places.
// Last, UCX's module directory: its modules link each other there
// (RUNPATH), and addPlugins copies them in place.
var libDirs = []string{"lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "lib", "usr/lib", "usr/lib/x86_64-linux-gnu/ucx"}

// isELF reports whether path is an ELF file (tools packages also ship scripts).
func isELF(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// sharedLibClosure returns, for the given ELF files, every shared library
// they need directly or indirectly, as soname -> path inside root. Only the
// unpacked packages are searched, so the guest never runs host libraries.
func sharedLibClosure(root string, elfPaths []string) (map[string]string, error) {
	found := make(map[string]string)
	queue := append([]string(nil), elfPaths...)
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		needed, err := elfNeeded(path)
		if err != nil {
			return nil, err
		}
		for _, soname := range needed {
			if _, ok := found[soname]; ok {
				continue
			}
			libPath, err := findLib(root, soname)
			if err != nil {
				return nil, fmt.Errorf("%s needs %s: %w", path, soname, err)
			}
			found[soname] = libPath
			queue = append(queue, libPath)
		}
	}
	return found, nil
}

func elfNeeded(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open ELF %s: %w", path, err)
	}
	defer f.Close()
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("read DT_NEEDED of %s: %w", path, err)
	}
	sort.Strings(needed)
	return needed, nil
}

var errLibNotFound = errors.New("not in any unpacked package (add its Debian package to the image recipe)")

func findLib(root, soname string) (string, error) {
	for _, dir := range libDirs {
		p := filepath.Join(root, dir, soname)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if g, ok := alternativeLibs[soname]; ok {
		if ps, _ := filepath.Glob(filepath.Join(root, g)); len(ps) == 1 {
			return ps[0], nil
		}
	}
	return "", errLibNotFound
}
