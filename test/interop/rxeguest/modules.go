package rxeguest

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// kernelModule is one loadable module of the unpacked kernel package.
type kernelModule struct {
	name string // canonical name: '-' replaced by '_'
	path string // absolute path of the .ko file (maybe compressed)
}

// canonicalModuleName folds the two spellings the kernel treats as equal.
func canonicalModuleName(name string) string {
	return strings.ReplaceAll(name, "-", "_")
}

// indexModules maps canonical module names to their .ko files under dir
// (a lib/modules/<version> tree), xz-compressed ones (.ko.xz, as Debian
// 13 ships them) too: moduleData gives them uncompressed, for the guest's
// busybox insmod.
func indexModules(dir string) (map[string]string, error) {
	index := make(map[string]string)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		base := d.Name()
		for _, ext := range []string{".ko", ".ko.xz"} {
			if name, ok := strings.CutSuffix(base, ext); ok {
				index[canonicalModuleName(name)] = path
			}
		}
		if strings.Contains(base, ".ko.") && !strings.HasSuffix(base, ".ko.xz") {
			return fmt.Errorf("compressed module %s: unsupported compression", path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index modules under %s: %w", dir, err)
	}
	return index, nil
}

// moduleData is the module file at path, uncompressed.
func moduleData(path string) ([]byte, error) {
	var out []byte
	var err error
	if strings.HasSuffix(path, ".ko.xz") {
		out, err = exec.Command("xz", "-dc", path).Output()
	} else {
		out, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read module %s: %w", path, err)
	}
	return out, nil
}

// moduleDepends reads the depends= entry of a module's .modinfo section,
// the same information depmod turns into modules.dep.
func moduleDepends(path string) ([]string, error) {
	data, err := moduleData(path)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("open module %s: %w", path, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("module %s has no .modinfo section", path)
	}
	info, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("read .modinfo of %s: %w", path, err)
	}
	return parseModinfoDepends(info), nil
}

// parseModinfoDepends extracts the module names listed in the NUL-separated
// key=value strings of a .modinfo section.
func parseModinfoDepends(modinfo []byte) []string {
	var deps []string
	for _, field := range bytes.Split(modinfo, []byte{0}) {
		value, ok := bytes.CutPrefix(field, []byte("depends="))
		if !ok {
			continue
		}
		for _, name := range strings.Split(string(value), ",") {
			if name != "" {
				deps = append(deps, canonicalModuleName(name))
			}
		}
	}
	return deps
}

// moduleLoadOrder returns the modules named in want and everything they
// depend on, each after all of its dependencies, without duplicates.
// depends is called for each module's path (moduleDepends in production).
func moduleLoadOrder(index map[string]string, want []string, depends func(path string) ([]string, error)) ([]kernelModule, error) {
	const (
		visiting = 1
		done     = 2
	)
	state := make(map[string]int)
	var order []kernelModule
	var visit func(name string, chain []string) error
	visit = func(name string, chain []string) error {
		name = canonicalModuleName(name)
		switch state[name] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("module dependency cycle: %s -> %s", strings.Join(chain, " -> "), name)
		}
		path, ok := index[name]
		if !ok {
			if len(chain) == 0 {
				return fmt.Errorf("module %s not found in the kernel package (built in?)", name)
			}
			return fmt.Errorf("module %s (needed by %s) not found in the kernel package", name, chain[len(chain)-1])
		}
		state[name] = visiting
		deps, err := depends(path)
		if err != nil {
			return err
		}
		for _, dep := range deps {
			if err := visit(dep, append(chain, name)); err != nil {
				return err
			}
		}
		state[name] = done
		order = append(order, kernelModule{name: name, path: path})
		return nil
	}
	for _, name := range want {
		if err := visit(name, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// builtinModules are the modules the kernel has built in (its
// modules.builtin list: Debian 13's has virtio_pci), which need no loading.
func builtinModules(modDir string) map[string]bool {
	data, _ := os.ReadFile(filepath.Join(modDir, "modules.builtin"))
	builtin := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if name, ok := strings.CutSuffix(filepath.Base(line), ".ko"); ok {
			builtin[canonicalModuleName(name)] = true
		}
	}
	return builtin
}
