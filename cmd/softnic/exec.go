package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/softnic/softnic/daemon/client"
)

func init() {
	register("exec", "run an unmodified libibverbs program on softnic devices", runExec)
	register("env", "print the environment that lets libibverbs programs use softnic devices", runEnv)
}

// providerLib is the C provider's file name (provider/, `make provider`).
const providerLib = "libsoftnic-rdmav34.so"

// providerPlaces are where the provider is looked for, after
// $SOFTNIC_PROVIDER: next to the softnic binary (make build puts both in
// bin/), in ../lib/softnic beside it, and in the usual library places.
func providerPlaces() []string {
	var dirs []string
	if self, err := os.Executable(); err == nil {
		dir := filepath.Dir(self)
		dirs = append(dirs, dir, filepath.Join(dir, "..", "lib", "softnic"))
	}
	return append(dirs, "/usr/local/lib/softnic", "/usr/lib/softnic")
}

// findProvider returns the provider library's absolute path.
func findProvider(flagPath string) (string, error) {
	candidates := []string{flagPath, os.Getenv("SOFTNIC_PROVIDER")}
	for _, d := range providerPlaces() {
		candidates = append(candidates, filepath.Join(d, providerLib))
	}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return filepath.Abs(c)
		}
		if c == flagPath {
			return "", fmt.Errorf("--provider %s: no such file", c)
		}
	}
	return "", fmt.Errorf("%s not found (build it with make; looked in $SOFTNIC_PROVIDER and %s)",
		providerLib, strings.Join(providerPlaces(), ", "))
}

// ibvEnv is the environment that points libibverbs at softnic: the
// published tree (SYSFS_PATH), the provider (RDMAV_DRIVERS takes its path
// without the -rdmav34.so suffix), the provider again in LD_PRELOAD for its
// completion channels, the run directory for the provider's sockets, and
// the provider's directory first in LD_LIBRARY_PATH for softnic's
// librdmacm.so.1 (provider/rdmacm.h), built beside it. LD_LIBRARY_PATH,
// not LD_PRELOAD, because it replaces the library only in the programs
// that link it, found by its soname as the system's would be; preloaded,
// it would load into every program a `softnic env` shell starts.
func ibvEnv(sysfs, runDir, provider string) []string {
	preload := provider
	if old := os.Getenv("LD_PRELOAD"); old != "" {
		preload += ":" + old
	}
	libPath := filepath.Dir(provider)
	if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
		libPath += ":" + old
	}
	return []string{
		"SYSFS_PATH=" + sysfs,
		"RDMAV_DRIVERS=" + strings.TrimSuffix(provider, "-rdmav34.so"),
		"LD_PRELOAD=" + preload,
		"LD_LIBRARY_PATH=" + libPath,
		"SOFTNIC_RUN_DIR=" + runDir,
	}
}

type execOptions struct {
	runDir, provider, device string
	// sysfs is --sysfs: how the program's /sys/class is made (execview.go).
	sysfs string
}

func (o *execOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.runDir, "run-dir", client.RunDir(), "the daemons' run directory `DIR` (default $SOFTNIC_RUN_DIR, else /run/softnic)")
	fs.StringVar(&o.provider, "provider", "", "the provider library `PATH` (default: $SOFTNIC_PROVIDER, else "+providerLib+" next to softnic)")
}

func runEnv(args []string, stdout, stderr io.Writer) int {
	var o execOptions
	fs := flag.NewFlagSet("env", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.flags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softnic env [--run-dir DIR] [--provider PATH]")
		fmt.Fprintln(stderr, "\nPrints shell export lines that let libibverbs programs use the devices the daemons")
		fmt.Fprintln(stderr, "of the run directory serve in this network namespace:  eval \"$(softnic env)\"\n\nflags:")
		printFlags(stderr, fs)
	}
	if pos, status, ok := parseArgs(fs, args, 2); !ok || len(pos) != 0 {
		if ok {
			fs.Usage()
			status = 2
		}
		return status
	}
	fail := failer(stderr, "env")
	provider, err := findProvider(o.provider)
	if err != nil {
		return fail("%v", err)
	}
	runDir, _ := filepath.Abs(o.runDir)
	view, err := namespaceView(runDir)
	if err != nil {
		return fail("%v", err)
	}
	if _, err := os.Stat(view); err != nil {
		devs, _ := servedDevices(runDir)
		fmt.Fprintf(stderr, "softnic env: %s\n", servedHere(runDir, devs))
	}
	for _, kv := range ibvEnv(view, runDir, provider) {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(stdout, "export %s='%s'\n", k, strings.ReplaceAll(v, "'", `'\''`))
	}
	return 0
}

func runExec(args []string, stdout, stderr io.Writer) int {
	var o execOptions
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.flags(fs)
	fs.StringVar(&o.device, "d", "", "show the program only `DEVICE`, its name or its interface's (default: every device serving this network namespace)")
	fs.StringVar(&o.sysfs, "sysfs", sysfsAuto, "how the program sees the devices, `MODE`: auto (a private mount namespace whose /sys/class shows them, else SYSFS_PATH only, said on stderr), mount (the namespace or fail), env (SYSFS_PATH only); default auto")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softnic exec [-d DEVICE] [--run-dir DIR] [--provider PATH] -- PROGRAM [ARGS...]")
		fmt.Fprintln(stderr, "\nRuns an unmodified libibverbs program (ibv_devinfo, ibv_rc_pingpong, ib_write_bw, ...)")
		fmt.Fprintln(stderr, "on the devices softnic daemons serve in this network namespace, as any user, and exits")
		fmt.Fprintln(stderr, "with its status.\n\nflags:")
		printFlags(stderr, fs)
	}
	if err := fs.Parse(args); err != nil {
		return helpStatus(err, 2)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	if o.sysfs != sysfsAuto && o.sysfs != sysfsMount && o.sysfs != sysfsEnv {
		fmt.Fprintf(stderr, "softnic exec: --sysfs %q: auto, mount or env\n", o.sysfs)
		return 2
	}
	fail := failer(stderr, "exec")
	provider, err := findProvider(o.provider)
	if err != nil {
		return fail("%v", err)
	}
	runDir, _ := filepath.Abs(o.runDir)
	devs, err := servedDevices(runDir)
	if errors.Is(err, errNoTree) || errors.Is(err, os.ErrNotExist) {
		devs, err = nil, nil // no daemon: said below
	}
	if err != nil {
		return fail("%s: %v", runDir, err)
	}
	var sysfs string
	shown := devs
	if o.device != "" {
		d, err := resolveDevice(devs, o.device, false)
		if errors.Is(err, errNotServed) {
			return fail("%v", notServedError(runDir, o.device, devs, true))
		}
		if err != nil {
			return fail("%v", err)
		}
		if sysfs, err = deviceView(runDir, d); err != nil {
			return fail("%v", err)
		}
		defer os.RemoveAll(sysfs)
		shown = []servedDevice{d}
	} else {
		if !slices.ContainsFunc(devs, func(d servedDevice) bool { return d.here }) {
			return fail("%s", servedHere(runDir, devs))
		}
		if sysfs, err = namespaceView(runDir); err != nil {
			return fail("%v", err)
		}
		shown = slices.DeleteFunc(slices.Clone(devs), func(d servedDevice) bool { return !d.here })
	}
	argv := fs.Args()
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fail("%v", err)
	}
	env := append(os.Environ(), ibvEnv(sysfs, runDir, provider)...)
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	if o.sysfs != sysfsEnv {
		status, ran, err := runInView(path, argv, env, viewLinks(runDir, shown), o.sysfs == sysfsMount, sig, stdout, stderr)
		switch {
		case ran:
			return status
		case err != nil && o.sysfs == sysfsMount:
			return fail("%v", err)
		case err != nil:
			fmt.Fprintf(stderr, "softnic exec: %v\n", err)
		}
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	// If softnic is killed, the program goes too, rather than run on
	// without its parent (and the -d view it reads).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return runChild(cmd, env, sig, stdout, stderr, fail)
}

// runChild runs cmd with env, passing it the signals sig receives, and
// returns its exit status (128 + the signal that killed it).
func runChild(cmd *exec.Cmd, env []string, sig chan os.Signal, stdout, stderr io.Writer, fail func(string, ...any) int) int {
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, os.Stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		return fail("%v", err)
	}
	return waitChild(cmd, sig, fail)
}

// waitChild waits for a started cmd, passing it the signals sig receives,
// and returns its exit status (128 + the signal that killed it).
func waitChild(cmd *exec.Cmd, sig chan os.Signal, fail func(string, ...any) int) int {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sig:
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return exit.ExitCode()
	}
	if err != nil {
		return fail("%v", err)
	}
	return 0
}

// namespaceView is the tree of the devices whose daemons serve this
// network namespace (ibvtree.go's view, RUNDIR/netns/INODE).
func namespaceView(runDir string) (string, error) {
	ns, err := netnsInode()
	if err != nil {
		return "", err
	}
	return filepath.Join(runDir, viewDir(ns)), nil
}

// deviceView makes a private tree that shows only device d: links to its
// entries in the run directory's tree, in a temporary directory the
// caller removes.
func deviceView(runDir string, d servedDevice) (string, error) {
	device, cdev := d.name, d.cdev
	view, err := os.MkdirTemp("", "softnic-exec-")
	if err != nil {
		return "", err
	}
	real := filepath.Join(runDir, sysfsDir, "class")
	links := []string{filepath.Join("infiniband_verbs", "abi_version"), filepath.Join("infiniband_verbs", cdev),
		filepath.Join("infiniband", device)}
	for _, rel := range links {
		dst := filepath.Join(view, "class", rel)
		if err = os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
			err = os.Symlink(filepath.Join(real, rel), dst)
		}
		if err != nil {
			os.RemoveAll(view)
			return "", err
		}
	}
	os.Chmod(view, 0o755)
	return view, nil
}
