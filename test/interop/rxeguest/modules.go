package rxeguest

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// kernelModule is one loadable module of the unpacked kernel package.
type kernelModule struct {
	name string // canonical name: '-' replaced by '_'
	path string // absolute path of the .ko file
}

// canonicalModuleName folds the two spellings the kernel treats as equal.
func canonicalModuleName(name string) string {
	return strings.ReplaceAll(name, "-", "_")
}

// indexModules maps canonical module names to their .ko files under dir
// (a lib/modules/<version> tree). Compressed modules are refused because the
// guest loads modules with busybox insmod.
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
		switch {
		case strings.HasSuffix(base, ".ko"):
			index[canonicalModuleName(strings.TrimSuffix(base, ".ko"))] = path
		case strings.Contains(base, ".ko."):
			return fmt.Errorf("compressed module %s: unsupported, the guest uses busybox insmod", path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index modules under %s: %w", dir, err)
	}
	return index, nil
}

// moduleDepends reads the depends= entry of a module's .modinfo section,
// the same information depmod turns into modules.dep.
func moduleDepends(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open module %s: %w", path, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("module %s has no .modinfo section", path)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("read .modinfo of %s: %w", path, err)
	}
	return parseModinfoDepends(data), nil
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
