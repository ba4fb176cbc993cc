package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon"
	"github.com/softnic/softnic/daemon/metrics"
	"github.com/softnic/softnic/internal/securedir"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/xdplink"
	"github.com/softnic/softnic/tools/perftest"
	"github.com/softnic/softnic/verbs"
)

func init() {
	register("daemon", "run softnic as a standing adapter that local processes share", runDaemon)
}

// listFlag collects a repeated flag's values.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

type daemonOptions struct {
	// ifaces are the -d arguments, IFACE or IFACE:NAME (parseServeSpecs).
	ifaces   listFlag
	runDir   string
	group    string
	mode     string
	logLevel string
	// metrics is the address to serve Prometheus metrics on, "" for none;
	// metricsQPs how many QPs of a device get series of their own.
	metrics    string
	metricsQPs int
	// limits bound what each user can make the daemon hold.
	limits daemon.Limits
	// afterServe, if set, is called once every device is served, before
	// serveDevices waits: softnic daemon drops its privileges there
	// (privileges.go); the tests that serve in-process leave it nil.
	afterServe func() error
}

// openServed opens the device the daemon serves on an interface, with the
// file that lets the next daemon restore what this one moved; tests
// replace it.
// It waits for the interface to exist and be up first (saying so in
// log), and the device follows the interface's MTU and addresses
// (follow.go), calling gidsChanged after its GID table changed.
var openServed = func(ctx context.Context, ifname, irqState string, log *slog.Logger, gidsChanged func()) (*verbs.Device, func(), error) {
	// Frames for the largest IB MTU, whatever the MTU now: the port
	// follows the interface's MTU up to there without a restart.
	xcfg := xdplink.Config{IRQState: irqState, CarryMTU: roce.LinkMTUFor(verbs.MTU4096.Bytes())}
	xcfg.Socket.Mode = bindMode
	var dev perftest.Device
	var closeDev func()
	for {
		if err := waitForInterface(ctx, ifname, log); err != nil {
			return nil, nil, err
		}
		var err error
		dev, closeDev, err = openInterface(ifname, 0, xcfg)
		if errors.Is(err, xdplink.ErrLinkDown) {
			continue // set down again since: wait again
		}
		if err != nil {
			return nil, nil, err
		}
		break
	}
	logPriority(log, ifname, dev.Verbs.RoCE().Priority())
	link := dev.Verbs.RoCE().Link().(*xdplink.Link)
	unfollow := make(chan struct{})
	if err := followInterface(ifname, link.Program().Ifindex(), link, dev.Verbs, log, gidsChanged, unfollow); err != nil {
		closeDev()
		return nil, nil, err
	}
	return dev.Verbs, func() { close(unfollow); closeDev() }, nil
}

func runDaemon(args []string, stdout, stderr io.Writer) int {
	var o daemonOptions
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&o.ifaces, "d", "network interface `IFACE[:NAME]` to serve as device NAME (default softnic_IFACE; required; repeat for several)")
	fs.StringVar(&o.runDir, "run-dir", "/run/softnic", "directory of the control sockets (DEVICE.sock) and the daemon's state")
	fs.StringVar(&o.group, "group", "", "group owning the control sockets (default: root's; with --mode 0660, only its members may use the devices)")
	fs.StringVar(&o.mode, "mode", "0666", "permission bits of the control sockets (0666: every local user, as /dev/infiniband/uverbs* is)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.metrics, "metrics", "", "serve the devices' counters as Prometheus metrics at http://`ADDR`/metrics (host:port; default: none)")
	fs.IntVar(&o.metricsQPs, "metrics-qps", metrics.DefaultTopQPs, "with --metrics, how many QPs of a device (those that moved the most bytes) get series of their own (0: none); the others are summed")
	defineLimits(fs, &o.limits)
	congestion.define(fs, "")
	definePriority(fs)
	defineEngineCPUs(fs)
	defineBindMode(fs, "xdp-bind")
	capture.define(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softnic daemon -d IFACE[:NAME] [-d IFACE[:NAME] ...] [flags]")
		fmt.Fprintln(stderr, "\nServes each interface as an RDMA device to local processes until SIGTERM or SIGINT:")
		fmt.Fprintln(stderr, "device softnic_IFACE, or NAME (rxe0, mlx5_0 or softnic0 alike: the same name on every host")
		fmt.Fprintln(stderr, "lets programs that tell their peers a device name run between them; unique in the run")
		fmt.Fprintln(stderr, "directory; letters, digits, '_', '-' and '.', up to 54).")
		printFlags(stderr, fs)
	}
	if _, status, ok := parseArgs(fs, args, 2); !ok {
		return status
	}
	cfg, err := o.config(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "softnic daemon: %v\n", err)
		return 2
	}
	specs, _ := parseServeSpecs(o.ifaces) // checked by config
	for _, sp := range specs {
		// An interface that is not there yet is waited for (openServed);
		// a device's name given for its interface is a mistake.
		if err := checkDaemonInterfaceName(sp.iface); err != nil {
			fmt.Fprintf(stderr, "softnic daemon: %v\n", err)
			return 1
		}
	}
	// Before anything is opened: a binary that cannot drop its
	// privileges does not start.
	if err := checkAllThreadsSyscall(); err != nil {
		fmt.Fprintf(stderr, "softnic daemon: %v\n", err)
		return 1
	}
	nofile := raiseNoFile()
	allowSchedLimits()
	if cfg.Limits.Descriptors == 0 {
		cfg.Limits.Descriptors = daemon.DescriptorShare(nofile, len(specs))
	}
	cfg.Log.Info("per-user bounds", "descriptors", cfg.Limits.Descriptors, "open_files", nofile)
	o.afterServe = func() error { return dropPrivileges(cfg.Log, nofile) }
	// A log whose reader went (a closed terminal, a killed supervisor)
	// must not kill the daemon before it cleans up: writes fail instead.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serveDevices(ctx, o, cfg); err != nil {
		fmt.Fprintf(stderr, "softnic daemon: %v\n", err)
		return 1
	}
	return 0
}

// config checks the options and turns them into the sessions' settings.
func (o *daemonOptions) config(stderr io.Writer) (daemon.Config, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return daemon.Config{}, fmt.Errorf("--log-level %q: %w", o.logLevel, err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if len(o.ifaces) == 0 {
		return daemon.Config{}, errors.New("no interface: name one with -d IFACE")
	}
	if _, err := parseServeSpecs(o.ifaces); err != nil {
		return daemon.Config{}, err
	}
	if o.metricsQPs < 0 {
		return daemon.Config{}, fmt.Errorf("--metrics-qps %d: not a number of QPs", o.metricsQPs)
	}
	if err := congestion.apply(&verbs.Config{}); err != nil {
		return daemon.Config{}, err
	}
	if err := capture.check(); err != nil {
		return daemon.Config{}, err
	}
	capture.several = len(o.ifaces) > 1
	mode, err := strconv.ParseUint(o.mode, 8, 32)
	if err != nil || mode > 0o777 || mode == 0 {
		return daemon.Config{}, fmt.Errorf("--mode %q: not permission bits such as 0660", o.mode)
	}
	cfg := daemon.Config{Mode: os.FileMode(mode), Group: -1, Log: log, Limits: o.limits}
	if o.group != "" {
		g, err := user.LookupGroup(o.group)
		if err != nil {
			return daemon.Config{}, fmt.Errorf("--group: %w", err)
		}
		cfg.Group, _ = strconv.Atoi(g.Gid)
	}
	return cfg, nil
}

// served is one interface the daemon serves, and what to undo at exit.
type served struct {
	name string
	// run is the run directory, checked (package securedir); the
	// device's files are made relative to it.
	run      *securedir.Dir
	lock     *os.File
	srv      *daemon.Server
	dev      *verbs.Device
	closeDev func()
	// ibv is the device's entry in the tree libibverbs programs read
	// (ibvtree.go); nil if it could not be written.
	ibv *ibvTree
}

// serveDevices serves every interface until ctx ends, then undoes
// everything in reverse.
func serveDevices(ctx context.Context, o daemonOptions, cfg daemon.Config) error {
	specs, err := parseServeSpecs(o.ifaces)
	if err != nil {
		return err
	}
	run, err := openRunDir(o.runDir)
	if err != nil {
		return err
	}
	run.Close() // each device opens it again, checked again
	var metricsLn net.Listener
	if o.metrics != "" {
		var err error
		if metricsLn, err = listenMetrics(o.metrics); err != nil {
			return err
		}
		defer metricsLn.Close() // when serving failed before the server took it
	}
	var all []*served
	defer func() {
		for i := len(all) - 1; i >= 0; i-- {
			all[i].stop()
		}
	}()
	for _, sp := range specs {
		s, err := serveDevice(ctx, o.runDir, sp, cfg)
		if err != nil && ctx.Err() != nil {
			cfg.Log.Info("stopping") // while it waited for an interface
			return nil
		}
		if err != nil {
			return err
		}
		all = append(all, s)
		cfg.Log.Info("serving", append([]any{"device", s.name, "interface", sp.iface, "socket", s.srv.Socket()},
			s.attachment()...)...)
	}
	if metricsLn != nil {
		defer serveMetrics(metricsLn, all, o.metricsQPs, cfg.Log).stop()
	}
	if o.afterServe != nil {
		if err := o.afterServe(); err != nil {
			return err
		}
	}
	<-ctx.Done()
	cfg.Log.Info("stopping")
	return nil
}

// openRunDir opens the run directory, made if missing, once checked: a
// directory another user could write, or one below such a directory,
// would let that user plant links where the daemon writes as root.
func openRunDir(runDir string) (*securedir.Dir, error) {
	run, err := securedir.Open("run directory", runDir, true)
	var unsafe *securedir.UnsafeError
	switch {
	case errors.As(err, &unsafe):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("run directory: %w (%s)", err, runDirHint)
	}
	return run, nil
}

// serveDevice takes the device's lock, cleans up after a killed
// predecessor, opens the interface and serves it. Its files are made in
// the checked run directory and follow no link: the lock and the tree
// relative to its descriptor, the IRQ state file (package xdplink) by
// a path whose every directory was checked and with O_NOFOLLOW, and the
// socket, which daemon.Serve unlinks and binds by such a path (neither
// follows a link at the name; its chown and chmod by path do, but only
// root or the daemon's own user can put one there).
func serveDevice(ctx context.Context, runDir string, sp serveSpec, cfg daemon.Config) (*served, error) {
	s := &served{name: sp.name}
	ifname := sp.iface
	var err error
	if s.run, err = openRunDir(runDir); err != nil {
		return nil, err
	}
	base := filepath.Join(s.run.Path(), s.name)
	if s.lock, err = takeLock(s.run, s.name+".lock"); err != nil {
		s.run.Close()
		return nil, err
	}
	// The libibverbs tree's GID files follow the table (publishIBV).
	gidsChanged := make(chan struct{}, 1)
	tellTree := func() {
		select {
		case gidsChanged <- struct{}{}:
		default: // one pending is enough: the tree reads the table then
		}
	}
	dev, closeDev, err := openServed(ctx, ifname, base+".irqs", cfg.Log, tellTree)
	if err != nil {
		s.unlock()
		return nil, explainOpen(ifname, err, true)
	}
	s.closeDev, s.dev = closeDev, dev
	// The tree before the socket: whoever waits for the socket (scripts,
	// the tests) may then start a libibverbs program at once.
	if s.ibv, err = publishIBV(s.run, runDir, s.name, ifname, dev, cfg.Log, gidsChanged); err != nil {
		cfg.Log.Warn("libibverbs programs cannot use the device", "device", s.name, "err", err)
	}
	cfg.Socket = base + ".sock"
	cfg.CMRoute, cfg.CMNeighbor = kernelRouting(ifname)
	if s.srv, err = daemon.Serve(dev, cfg); err != nil {
		if s.ibv != nil {
			s.ibv.remove()
		}
		s.closeDev()
		s.unlock()
		return nil, err
	}
	return s, nil
}

// attachment is the startup log's fields for how the device runs: XDP
// mode, AF_XDP bind mode, queues, engines, MTU, as the kernel granted them.
// A device on another link (the tests') has only its engines and MTU.
func (s *served) attachment() []any {
	rd := s.dev.RoCE()
	xl, ok := rd.Link().(*xdplink.Link)
	if !ok {
		return []any{"engines", rd.Engines(), "mtu", rd.Link().MTU()}
	}
	a := xl.Attachment()
	attrs := []any{"xdp", a.XDP, "bind", a.Bind, "queues", a.Queues, "engines", rd.Engines(),
		"mtu", a.MTU, "frame_chunks", a.Frags, "driver", a.Driver}
	if a.Note != "" {
		attrs = append(attrs, "bind_note", a.Note)
	}
	return attrs
}

func (s *served) stop() {
	if s.ibv != nil {
		s.ibv.remove()
	}
	s.srv.Close()
	s.closeDev()
	s.unlock()
}

// runDirHint is the way out of a run directory the daemon cannot write.
const runDirHint = "softnic daemon needs root: run it with sudo; --run-dir names another directory"

// takeLock locks the device's lock file name in run for this process,
// and writes its pid there. The lock dies with the process, so a killed
// daemon's file does not keep the next one out. A link at the name is
// unlinked, not followed.
func takeLock(run *securedir.Dir, name string) (*os.File, error) {
	f, err := run.OpenFile(name, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w (%s)", err, runDirHint)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid, _ := io.ReadAll(f)
		f.Close()
		return nil, fmt.Errorf("another softnic daemon serves this device (pid %s, lock %s): stop it first",
			strings.TrimSpace(string(pid)), f.Name())
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

func (s *served) unlock() {
	s.run.Remove(filepath.Base(s.lock.Name()))
	s.lock.Close()
	s.run.Close()
}
