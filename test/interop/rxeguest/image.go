package rxeguest

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

//go:embed init.sh
var initScript []byte

//go:embed txwatch.sh
var txWatchScript []byte

// kernelMetaPackage pulls the current Debian kernel; Build resolves it to
// the versioned linux-image package it depends on.
const kernelMetaPackage = "linux-image-amd64"

// imagePackages are the Debian packages the guest is made of (besides the
// kernel): tools and every library they need, so that no host file ends up
// in the guest.
var imagePackages = []string{
	"busybox-static",
	"rdma-core", "ibverbs-utils", "ibverbs-providers", "perftest", "rdmacm-utils",
	"libibverbs1", "librdmacm1", "libibumad3", "libnl-3-200", "libnl-route-3-200",
	"iproute2", // ip, tc (netem) and rdma
	"libc6", "libpci3", "libbpf1", "libelf1", "libmnl0", "libbsd0", "libmd0",
	"libcap2", "libxtables12", "zlib1g", "libzstd1", "libudev1",
	"libgcc-s1", // glibc dlopens libgcc_s for thread exit and cancellation
	// The middleware (issue #33): UCX's ucx_perftest and ucx_info, and
	// libfabric's fi_pingpong and fi_info, with what they link.
	"ucx-utils", "libucx0", "libnuma1", "libgomp1", "libstdc++6",
	"libfabric-bin", "libfabric1", "libpsm2-2", "libpsm-infinipath1", "libatomic1", "libuuid1",
}

// pluginGlobs are libraries that programs load at run time from a fixed
// directory (UCX's transports, from its compiled-in module directory),
// copied where they lie, with what they link.
var pluginGlobs = []string{"usr/lib/x86_64-linux-gnu/ucx/lib*.so.0"}

// alternativeLibs are libraries whose soname Debian gives them through
// update-alternatives, a link that a postinst makes and dpkg-deb -x does
// not: soname -> a glob of the library's file in the unpacked packages.
var alternativeLibs = map[string]string{
	"libpsm_infinipath.so.1": "usr/lib/libpsm1/libpsm_infinipath.so.1.*",
}

// dlopenedLibs are loaded at run time without a DT_NEEDED entry.
var dlopenedLibs = []string{"libgcc_s.so.1"}

// imageModules are loaded at boot, with their dependencies first.
var imageModules = []string{
	"virtio_pci", "virtio_net", "virtio_rng",
	"crc32_generic", // rxe computes the ICRC with the crypto API's "crc32"
	"rdma_rxe", "rdma_ucm", "ib_umad",
	"sch_netem", "sch_prio", "cls_u32",
}

// renamedModules are imageModules' names in later kernels, used where a
// kernel has no module of the first name (crc32_generic became
// crc32-cryptoapi in 6.15).
var renamedModules = map[string]string{"crc32_generic": "crc32_cryptoapi"}

// toolPattern selects the executables copied from usr/bin of the packages.
var toolPattern = regexp.MustCompile(`^(ibv_.*|ib_.*|rping|ucmatose|udaddy|udpong|mckey|rdma|rdma_client|rdma_server|rstream|riostream|rcopy|cmtime|ucx_info|ucx_perftest|fi_info|fi_pingpong)$`)

// extraTools are copied from elsewhere in the packages (relative paths).
var extraTools = []string{"bin/ip", "sbin/tc"}

// imageFormat changes whenever the layout Build produces changes, so that
// stale cached images are not reused.
const imageFormat = "rxeguest-2"

// Image is a bootable guest: a kernel and an uncompressed initramfs.
type Image struct {
	Dir           string
	Kernel        string // path of vmlinuz
	Initramfs     string // path of the cpio archive
	KernelVersion string
	Packages      []string // "name=version" of every package used
}

type manifest struct {
	KernelVersion string
	Packages      []string
}

// recipeKey names the cache entry: it covers everything that shapes the image.
func recipeKey(r Release) string {
	h := sha256.New()
	fmt.Fprintln(h, imageFormat, kernelMetaPackage, r.Suite)
	if r.KernelSuite != "" {
		fmt.Fprintln(h, "kernel from", r.KernelSuite)
	}
	fmt.Fprintln(h, strings.Join(r.packages(), ","))
	fmt.Fprintln(h, strings.Join(imageModules, ","))
	fmt.Fprintln(h, toolPattern.String(), strings.Join(extraTools, ","), strings.Join(dlopenedLibs, ","))
	fmt.Fprintln(h, strings.Join(pluginGlobs, ","), alternativeLibs)
	h.Write(initScript)
	h.Write(txWatchScript)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// DefaultCacheDir is where images are cached unless told otherwise:
// $SOFTNIC_INTEROP_CACHE, else $XDG_CACHE_HOME/softnic-interop, else
// ~/.cache/softnic-interop.
func DefaultCacheDir() string {
	if d := os.Getenv("SOFTNIC_INTEROP_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "softnic-interop")
	}
	return filepath.Join(os.TempDir(), "softnic-interop")
}

// Build returns the guest image cached under cacheDir, building it from
// Debian packages of the host's release (apt-get download, dpkg -x) if it
// is not there yet.
func Build(ctx context.Context, cacheDir string) (*Image, error) {
	return BuildRelease(ctx, cacheDir, Release{})
}

// BuildRelease is Build for release r's packages.
func BuildRelease(ctx context.Context, cacheDir string, r Release) (*Image, error) {
	dir := filepath.Join(cacheDir, "image-"+recipeKey(r))
	if img, err := loadImage(dir); err == nil {
		return img, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("create cache dir: %w", err)
	}
	removeStaleBuilds(cacheDir)
	work, err := os.MkdirTemp(cacheDir, "build-")
	if err != nil {
		return nil, fmt.Errorf("create build dir: %w", err)
	}
	defer os.RemoveAll(work)
	out := filepath.Join(work, "out")
	a, err := r.apt(ctx, cacheDir)
	if err != nil {
		return nil, err
	}
	if err := buildImage(ctx, a, r.packages(), work, out); err != nil {
		return nil, err
	}
	if err := os.Rename(out, dir); err != nil {
		// Another build may have won the race; use its result.
		if img, lerr := loadImage(dir); lerr == nil {
			return img, nil
		}
		return nil, fmt.Errorf("install image into cache: %w", err)
	}
	return loadImage(dir)
}

// removeStaleBuilds deletes build directories that a killed Build left
// behind; an hour is far longer than any build takes.
func removeStaleBuilds(cacheDir string) {
	dirs, _ := filepath.Glob(filepath.Join(cacheDir, "build-*"))
	for _, d := range dirs {
		if st, err := os.Stat(d); err == nil && time.Since(st.ModTime()) > time.Hour {
			os.RemoveAll(d)
		}
	}
}

func loadImage(dir string) (*Image, error) {
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, err
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("parse manifest in %s: %w", dir, err)
	}
	img := &Image{
		Dir:           dir,
		Kernel:        filepath.Join(dir, "vmlinuz"),
		Initramfs:     filepath.Join(dir, "initramfs.cpio"),
		KernelVersion: m.KernelVersion,
		Packages:      m.Packages,
	}
	for _, p := range []string{img.Kernel, img.Initramfs} {
		if _, err := os.Stat(p); err != nil {
			return nil, err
		}
	}
	return img, nil
}

func run(ctx context.Context, dir string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// resolveKernelPackage finds the versioned linux-image package the
// metapackage depends on.
func resolveKernelPackage(ctx context.Context, a *apt) (string, error) {
	out, err := a.run(ctx, "", "apt-cache", "depends", a.kernel)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(out), "\n") {
		dep, ok := strings.CutPrefix(strings.TrimSpace(line), "Depends: ")
		if ok && strings.HasPrefix(dep, "linux-image-") {
			return dep, nil
		}
	}
	return "", fmt.Errorf("apt-cache depends %s: no linux-image dependency in %q", a.kernel, out)
}

// kernelParts are the packages of the kernel linux-image-V: itself and,
// where the kernel comes split (trixie-backports' 7.3: the image in
// linux-binary-V, the modules in linux-modules-V, modules.builtin in
// linux-base-V), those parts.
func kernelParts(ctx context.Context, a *apt, kernelPkg string) []string {
	parts := []string{kernelPkg}
	v := strings.TrimPrefix(kernelPkg, "linux-image-")
	for _, p := range []string{"linux-binary-" + v, "linux-modules-" + v, "linux-base-" + v} {
		if _, err := a.run(ctx, "", "apt-cache", "show", "--no-all-versions", p); err == nil {
			parts = append(parts, p)
		}
	}
	return parts
}

// downloadPackages fetches the .deb files into dir, running apt-get update
// once if the package lists are missing.
func downloadPackages(ctx context.Context, a *apt, packages []string, dir string) ([]string, error) {
	kernelPkg, err := resolveKernelPackage(ctx, a)
	if err != nil {
		_, uerr := a.run(ctx, "", "apt-get", "update")
		if uerr != nil {
			return nil, fmt.Errorf("%w (and apt-get update failed: %v)", err, uerr)
		}
		if kernelPkg, err = resolveKernelPackage(ctx, a); err != nil {
			return nil, err
		}
	}
	pkgs := append(kernelParts(ctx, a, kernelPkg), packages...)
	// The sandbox user _apt cannot write into a root-owned temp dir.
	args := append([]string{"-o", "APT::Sandbox::User=root", "download"}, pkgs...)
	if _, err := a.run(ctx, dir, "apt-get", args...); err != nil {
		return nil, fmt.Errorf("download guest packages: %w", err)
	}
	debs, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	if err != nil || len(debs) < len(pkgs) {
		return nil, fmt.Errorf("apt-get download left %d .deb files for %d packages", len(debs), len(pkgs))
	}
	sort.Strings(debs)
	return debs, nil
}

func buildImage(ctx context.Context, a *apt, packages []string, work, out string) error {
	debDir := filepath.Join(work, "debs")
	root := filepath.Join(work, "root")
	for _, d := range []string{debDir, root, out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	debs, err := downloadPackages(ctx, a, packages, debDir)
	if err != nil {
		return err
	}
	var versions []string
	for _, deb := range debs {
		if _, err := run(ctx, "", "dpkg-deb", "-x", deb, root); err != nil {
			return fmt.Errorf("unpack %s: %w", filepath.Base(deb), err)
		}
		nv, err := run(ctx, "", "dpkg-deb", "-W", "--showformat=${Package}=${Version}", deb)
		if err != nil {
			return err
		}
		versions = append(versions, string(nv))
	}

	kvers, err := filepath.Glob(filepath.Join(root, merged(root, "lib/modules"), "*"))
	if err != nil || len(kvers) != 1 {
		return fmt.Errorf("expected one kernel under lib/modules, found %v", kvers)
	}
	kver := filepath.Base(kvers[0])
	tr := newTree()
	if err := addModules(tr, kvers[0]); err != nil {
		return err
	}
	if err := addUserland(tr, root); err != nil {
		return err
	}
	tr.File("init", 0o755, initScript)
	tr.File("bin/txwatch", 0o755, txWatchScript)
	if err := writeTreeFile(tr, filepath.Join(out, "initramfs.cpio")); err != nil {
		return err
	}
	vmlinuz := filepath.Join(root, "boot", "vmlinuz-"+kver)
	if _, err := os.Stat(vmlinuz); err != nil {
		vmlinuz = filepath.Join(kvers[0], "vmlinuz") // split packages keep it with the modules
	}
	if err := copyFile(vmlinuz, filepath.Join(out, "vmlinuz")); err != nil {
		return err
	}
	m, err := json.MarshalIndent(manifest{KernelVersion: kver, Packages: versions}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "manifest.json"), m, 0o644)
}

// addModules copies the needed modules, flattened, with an order file the
// init script loads them by.
func addModules(tr *tree, modDir string) error {
	index, err := indexModules(modDir)
	if err != nil {
		return err
	}
	builtin := builtinModules(modDir)
	var want []string
	for _, m := range imageModules {
		if _, ok := index[canonicalModuleName(m)]; !ok && renamedModules[m] != "" {
			m = renamedModules[m]
		}
		if !builtin[canonicalModuleName(m)] {
			want = append(want, m)
		}
	}
	order, err := moduleLoadOrder(index, want, moduleDepends)
	if err != nil {
		return err
	}
	var names []string
	for _, m := range order {
		data, err := moduleData(m.path)
		if err != nil {
			return err
		}
		tr.File("lib/modules/rxeguest/"+m.name+".ko", 0o644, data)
		names = append(names, m.name)
	}
	tr.File("lib/modules/rxeguest/order", 0o644, []byte(strings.Join(names, "\n")+"\n"))
	return nil
}

// addUserland copies busybox, the tools, the rxe verbs provider and the
// shared libraries all of them need, and the files a shell expects.
func addUserland(tr *tree, root string) error {
	busybox, err := os.ReadFile(filepath.Join(root, merged(root, "bin/busybox")))
	if err != nil {
		return fmt.Errorf("busybox-static: %w", err)
	}
	tr.File("bin/busybox", 0o755, busybox)
	tr.Symlink("bin/sh", "busybox")

	elfs, err := addTools(tr, root)
	if err != nil {
		return err
	}
	provider, err := addProvider(tr, root)
	if err != nil {
		return err
	}
	plugins, err := addPlugins(tr, root)
	if err != nil {
		return err
	}
	if err := addLibraries(tr, root, append(append(elfs, provider), plugins...)); err != nil {
		return err
	}
	// iproute2's tc reads netem distribution tables from here.
	if tables, _ := filepath.Glob(filepath.Join(root, "usr/lib/x86_64-linux-gnu/tc/*.dist")); len(tables) > 0 {
		for _, t := range tables {
			data, err := os.ReadFile(t)
			if err != nil {
				return fmt.Errorf("read netem table: %w", err)
			}
			tr.File("usr/lib/x86_64-linux-gnu/tc/"+filepath.Base(t), 0o644, data)
		}
	}

	for _, d := range []string{"proc", "sys", "dev", "tmp", "run", "root", "etc", "usr/sbin", "sbin"} {
		tr.Dir(d)
	}
	tr.CharDev("dev/console", 0o600, 5, 1)
	tr.CharDev("dev/null", 0o666, 1, 3)
	tr.File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"))
	tr.File("etc/group", 0o644, []byte("root:x:0:\n"))
	tr.File("etc/hosts", 0o644, []byte("127.0.0.1 localhost\n"))
	return nil
}

// merged is rel (a path under / of the packages) where the packages put
// it: there, or under usr/ (Debian 13's packages install into the merged
// /usr only).
func merged(root, rel string) string {
	if _, err := os.Lstat(filepath.Join(root, rel)); err != nil {
		if _, uerr := os.Lstat(filepath.Join(root, "usr", rel)); uerr == nil {
			return filepath.Join("usr", rel)
		}
	}
	return rel
}

// addTools copies the tools toolPattern and extraTools name and returns
// their paths under root.
func addTools(tr *tree, root string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, "usr/bin"))
	if err != nil {
		return nil, fmt.Errorf("read usr/bin of the packages: %w", err)
	}
	var tools []string
	for _, e := range entries {
		p := filepath.Join(root, "usr/bin", e.Name())
		if toolPattern.MatchString(e.Name()) && isELF(p) {
			tools = append(tools, p)
		}
	}
	for _, t := range extraTools {
		tools = append(tools, filepath.Join(root, merged(root, t)))
	}
	for _, p := range tools {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read tool: %w", err)
		}
		tr.File("usr/bin/"+filepath.Base(p), 0o755, data)
	}
	return tools, nil
}

// addProvider copies the rxe verbs provider and its driver file and
// returns the provider's path under root.
func addProvider(tr *tree, root string) (string, error) {
	// libibverbs finds providers through /etc/libibverbs.d/*.driver and
	// dlopens lib<name>-rdmav<N>.so from its compiled-in directory.
	const providerDir = "usr/lib/x86_64-linux-gnu/libibverbs"
	drv, err := os.ReadFile(filepath.Join(root, "etc/libibverbs.d/rxe.driver"))
	if err != nil {
		return "", fmt.Errorf("ibverbs-providers: %w", err)
	}
	tr.File("etc/libibverbs.d/rxe.driver", 0o644, drv)
	providers, _ := filepath.Glob(filepath.Join(root, providerDir, "librxe-rdmav*.so"))
	if len(providers) != 1 {
		return "", fmt.Errorf("expected one rxe provider in %s, found %v", providerDir, providers)
	}
	data, err := os.ReadFile(providers[0])
	if err != nil {
		return "", fmt.Errorf("read rxe provider: %w", err)
	}
	tr.File(providerDir+"/"+filepath.Base(providers[0]), 0o755, data)
	return providers[0], nil
}

// addPlugins copies the libraries pluginGlobs name to their places and
// returns their paths under root.
func addPlugins(tr *tree, root string) ([]string, error) {
	var plugins []string
	for _, g := range pluginGlobs {
		if _, err := os.Stat(filepath.Join(root, filepath.Dir(g))); err != nil {
			continue // its package is not in this release's image
		}
		ps, err := filepath.Glob(filepath.Join(root, g))
		if err != nil || len(ps) == 0 {
			return nil, fmt.Errorf("no plugin %s in the packages", g)
		}
		for _, p := range ps {
			data, err := os.ReadFile(p) // follows the soname symlink
			if err != nil {
				return nil, fmt.Errorf("read plugin: %w", err)
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return nil, err
			}
			tr.File(rel, 0o755, data)
			plugins = append(plugins, p)
		}
	}
	return plugins, nil
}

// isPlugin reports whether path, under root, is one of pluginGlobs'.
func isPlugin(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return false
	}
	for _, g := range pluginGlobs {
		if ok, _ := filepath.Match(g, rel); ok {
			return true
		}
	}
	return false
}

// addLibraries copies the libraries that are dlopened and the shared
// libraries elfs and those need, and links the dynamic loader.
func addLibraries(tr *tree, root string, elfs []string) error {
	for _, soname := range dlopenedLibs {
		p, err := findLib(root, soname)
		if err != nil {
			return fmt.Errorf("%s: %w", soname, err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read library: %w", err)
		}
		elfs = append(elfs, p)
		tr.File("lib/x86_64-linux-gnu/"+soname, 0o755, data)
	}
	libs, err := sharedLibClosure(root, elfs)
	if err != nil {
		return fmt.Errorf("collect shared libraries: %w", err)
	}
	for soname, p := range libs {
		if isPlugin(root, p) {
			continue // addPlugins put it in its place
		}
		data, err := os.ReadFile(p) // follows the soname symlink
		if err != nil {
			return fmt.Errorf("read library: %w", err)
		}
		tr.File("lib/x86_64-linux-gnu/"+soname, 0o755, data)
	}
	if _, ok := libs["ld-linux-x86-64.so.2"]; !ok {
		return errors.New("dynamic loader ld-linux-x86-64.so.2 not found among the libraries")
	}
	tr.Symlink("lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
	return nil
}

func writeTreeFile(tr *tree, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := tr.Write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if err := os.WriteFile(dst, data, fs.FileMode(0o644)); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	return nil
}
