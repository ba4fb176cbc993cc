package rxeguest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Config describes one guest boot.
type Config struct {
	// Name is the guest's hostname and appears in errors.
	Name string
	// Script is run by /bin/sh in the guest (in /tmp) once rxe0 is up. Its
	// stdout and stderr become Result.Output, its exit status Result.ExitStatus.
	Script string
	// NetNS and Tap name a tap device (see Network) the guest's eth0 is
	// connected to. Without Tap the guest has no network and no rxe0.
	NetNS, Tap string
	// MAC of eth0; derived from Addr when nil.
	MAC net.HardwareAddr
	// Addr is eth0's address, e.g. 10.77.0.11/24. Required with Tap.
	Addr netip.Prefix
	// MTU of eth0; 1500 when zero.
	MTU int
	// Netem, when set, is passed to `tc qdisc add ... netem` on eth0, e.g.
	// "loss 2%" or "delay 2ms reorder 25% 50%", for every frame but the
	// CM's MADs (RoCEv2 to QP 1).
	Netem string
	// ScriptTimeout, when set, makes the guest stop the script after this
	// long, list its processes and what they wait on in Output, and report
	// ExitStatus 124. Use it below the context's deadline to learn why a
	// script hangs.
	ScriptTimeout time.Duration
	// MemoryMiB is the guest's RAM; 512 when zero.
	MemoryMiB int
	// Files are extra files placed into the guest (absolute paths).
	Files map[string][]byte
	// Programs are like Files but executable, e.g. a static binary at
	// /usr/bin/softnic (on the script's PATH).
	Programs map[string][]byte
	// CPUs is the number of vCPUs; 1 when zero.
	CPUs int
	// KernelArgs are added to the guest kernel's command line (e.g.
	// tsc=reliable, which keeps TCG guests of several vCPUs on the TSC).
	KernelArgs string
	// WatchTX makes the guest report, within seconds, frames it handed to
	// eth0 that the device does not take (see Guest.NICStalled). It
	// costs the guest a tc and a sysfs read a second, so benchmarks leave
	// it off.
	WatchTX bool
	// Queues is the number of queue pairs of eth0 (virtio-net multiqueue);
	// 1 when zero. More than one needs a tap made with
	// NetworkConfig.Queues at least as large. The guest's driver uses one
	// pair per vCPU and leaves the others free, which native XDP wants for
	// XDP_TX (one pair per CPU beyond those in use).
	Queues int
	// AccessPlatform offers eth0 VIRTIO_F_ACCESS_PLATFORM (qemu's
	// iommu_platform=on), so that virtio-net maps its buffers through the
	// DMA API: its AF_XDP zero-copy needs a DMA device (virtqueue_dma_dev)
	// and refuses to bind (EINVAL) without one.
	AccessPlatform bool
}

// Result is what a finished guest reported.
type Result struct {
	// Output is the script's stdout and stderr.
	Output string
	// ExitStatus is the script's exit status; 255 if guest setup failed.
	ExitStatus int
	// Console is the serial console: kernel messages and the init log.
	Console string
	// Duration is the wall time from starting qemu to its exit.
	Duration time.Duration
}

// SetupFailedStatus is Result.ExitStatus when the guest could not bring up
// its modules, eth0 or rxe0 before running the script.
const SetupFailedStatus = 255

const exitMarker = "@@RXEGUEST-EXIT "

// Guest is a running qemu process.
type Guest struct {
	cfg     Config
	cmd     *exec.Cmd
	dir     string
	start   time.Time
	done    chan struct{}
	waitErr error
	qemuErr bytes.Buffer
}

// Boot runs a guest to completion: see Start and Wait.
func Boot(ctx context.Context, img *Image, cfg Config) (*Result, error) {
	g, err := Start(ctx, img, cfg)
	if err != nil {
		return nil, err
	}
	return g.Wait()
}

// Start launches qemu (TCG) for cfg. Cancelling ctx kills the guest.
func Start(ctx context.Context, img *Image, cfg Config) (*Guest, error) {
	if cfg.Name == "" {
		cfg.Name = "rxeguest"
	}
	if cfg.Tap != "" && !cfg.Addr.IsValid() {
		return nil, fmt.Errorf("guest %s: a tap needs an address", cfg.Name)
	}
	if cfg.MAC == nil && cfg.Addr.IsValid() {
		cfg.MAC = MACFor(cfg.Addr.Addr())
	}
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 512
	}
	cfg.CPUs, cfg.Queues = max(cfg.CPUs, 1), max(cfg.Queues, 1)
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, fmt.Errorf("guest %s: %w (apt-get install qemu-system-x86)", cfg.Name, err)
	}
	dir, err := os.MkdirTemp("", "rxeguest-"+cfg.Name+"-")
	if err != nil {
		return nil, fmt.Errorf("guest %s: %w", cfg.Name, err)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := writeInitrd(img, cfg, initrd); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("guest %s: %w", cfg.Name, err)
	}
	args := []string{
		"-accel", "tcg", "-machine", "pc", "-cpu", "max", "-smp", strconv.Itoa(cfg.CPUs),
		"-m", strconv.Itoa(cfg.MemoryMiB),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", img.Kernel, "-initrd", initrd,
		"-append", strings.TrimSpace("console=ttyS0 panic=-1 loglevel=4 mitigations=off " + cfg.KernelArgs),
		"-serial", "file:" + filepath.Join(dir, "console.log"),
		"-serial", "file:" + filepath.Join(dir, "output.log"),
		"-device", "virtio-rng-pci",
	}
	if cfg.Tap != "" {
		args = append(args, netArgs(cfg)...)
	}
	var cmd *exec.Cmd
	if cfg.NetNS != "" {
		// The tap lives in the namespace; qemu must open it from there.
		cmd = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", cfg.NetNS, qemu}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, qemu, args...)
	}
	g := &Guest{cfg: cfg, cmd: cmd, dir: dir, done: make(chan struct{})}
	cmd.Stdout = io.Discard
	cmd.Stderr = &g.qemuErr
	cmd.WaitDelay = 5 * time.Second
	// A guest must not outlive a killed test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	g.start = time.Now()
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("guest %s: start qemu: %w", cfg.Name, err)
	}
	go func() {
		g.waitErr = cmd.Wait()
		close(g.done)
	}()
	return g, nil
}

// ConsoleContains reports whether the guest's console shows s yet (a
// script marks its progress there by writing to /dev/kmsg).
func (g *Guest) ConsoleContains(s string) bool {
	console, _ := os.ReadFile(filepath.Join(g.dir, "console.log"))
	return strings.Contains(string(console), s)
}

// Wait waits for the guest to power off and returns what it reported. An
// error means the guest did not finish its script (qemu failed, the kernel
// panicked, or the context ended); the Result then still holds the logs.
func (g *Guest) Wait() (*Result, error) {
	<-g.done
	defer os.RemoveAll(g.dir)
	res := &Result{Duration: time.Since(g.start)}
	console, _ := os.ReadFile(filepath.Join(g.dir, "console.log"))
	output, _ := os.ReadFile(filepath.Join(g.dir, "output.log"))
	res.Console = strings.ReplaceAll(string(console), "\r\n", "\n")
	out := strings.ReplaceAll(string(output), "\r\n", "\n")
	i := strings.LastIndex(out, exitMarker)
	if i < 0 {
		res.Output = out
		return res, fmt.Errorf("guest %s did not finish its script (qemu: %v %s); console tail:\n%s",
			g.cfg.Name, g.waitErr, strings.TrimSpace(g.qemuErr.String()), tail(res.Console, 2000))
	}
	status, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(out[i+len(exitMarker):], "\n", 2)[0]))
	if err != nil {
		return res, fmt.Errorf("guest %s: bad exit marker: %w", g.cfg.Name, err)
	}
	res.Output = strings.TrimSuffix(out[:i], "\n")
	res.ExitStatus = status
	if g.waitErr != nil {
		var exitErr *exec.ExitError
		if !errors.As(g.waitErr, &exitErr) {
			return res, fmt.Errorf("guest %s: qemu: %w", g.cfg.Name, g.waitErr)
		}
	}
	return res, nil
}

// NICStalled returns the guest's first report, so far, that eth0 stopped
// transmitting, or "" if there is none: the kernel's TX watchdog ("NETDEV
// WATCHDOG ... transmit queue 0 timed out"), or, with Config.WatchTX, the
// guest's own watcher (txStalledMarker), which speaks within seconds where
// the watchdog waits until the ring is full, minutes later under little
// traffic. Such a stall lies between the guest's virtio-net driver and
// qemu's device (qemu stops taking frames from the ring while its main
// loop sleeps): nothing a peer on the bridge sends can cause it, and the
// guest cannot reach the network until it ends. TCG guests under heavy
// traffic have shown it, rarely. A script may also report that the peer's
// kernel stopped answering ping (unreachableMarker), which no RoCE peer
// can cause either.
func (g *Guest) NICStalled() string {
	console, _ := os.ReadFile(filepath.Join(g.dir, "console.log"))
	for _, line := range strings.Split(string(console), "\n") {
		if strings.Contains(line, "NETDEV WATCHDOG") || strings.Contains(line, txStalledMarker) ||
			strings.Contains(line, unreachableMarker) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// txStalledMarker begins the watcher's report (init.sh).
const txStalledMarker = "rxeguest: eth0 transmit stalled"

// unreachableMarker begins a script's report that the guest cannot reach
// its peer on the bridge (the interop harness's netOK).
const unreachableMarker = "rxeguest: eth0 cannot reach"

// netArgs are qemu's options for eth0: a virtio-net device on cfg.Tap,
// with cfg.Queues queue pairs.
func netArgs(cfg Config) []string {
	netdev := "tap,id=n0,ifname=" + cfg.Tap + ",script=no,downscript=no"
	device := "virtio-net-pci,netdev=n0,mac=" + cfg.MAC.String()
	if cfg.Queues > 1 {
		// An MSI-X vector per queue (RX and TX of each pair), one for the
		// control queue and one for configuration changes.
		netdev += ",queues=" + strconv.Itoa(cfg.Queues)
		device += fmt.Sprintf(",mq=on,vectors=%d", 2*cfg.Queues+2)
	}
	if cfg.AccessPlatform {
		// Only a modern (virtio 1.0) device may offer it.
		device += ",disable-legacy=on,iommu_platform=on"
	}
	return []string{"-netdev", netdev, "-device", device}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// MACFor derives a locally administered MAC from an IPv4 address, so each
// guest address has a stable, distinct MAC.
func MACFor(addr netip.Addr) net.HardwareAddr {
	a := addr.As16()
	return net.HardwareAddr{0x52, 0x54, a[12], a[13], a[14], a[15]}
}

// writeInitrd writes the image's initramfs followed by a second archive
// holding this boot's script and settings; the kernel unpacks both.
func writeInitrd(img *Image, cfg Config, path string) error {
	base, err := os.ReadFile(img.Initramfs)
	if err != nil {
		return fmt.Errorf("read initramfs: %w", err)
	}
	var env strings.Builder
	fmt.Fprintf(&env, "GUEST_NAME=%s\n", shellQuote(cfg.Name))
	if cfg.Tap != "" {
		fmt.Fprintf(&env, "GUEST_ADDR=%s\n", shellQuote(cfg.Addr.String()))
		if cfg.MTU != 0 {
			fmt.Fprintf(&env, "GUEST_MTU=%d\n", cfg.MTU)
		}
		fmt.Fprintf(&env, "GUEST_NETEM=%s\n", shellQuote(cfg.Netem))
	}
	if cfg.WatchTX {
		env.WriteString("GUEST_WATCH_TX=1\n")
	}
	if cfg.ScriptTimeout > 0 {
		fmt.Fprintf(&env, "GUEST_TIMEOUT=%d\n", int(cfg.ScriptTimeout.Seconds()+0.5))
	}
	tr := newTree()
	tr.File("etc/guest.env", 0o644, []byte(env.String()))
	tr.File("script.sh", 0o755, []byte(cfg.Script))
	for name, data := range cfg.Files {
		tr.File(name, 0o644, data)
	}
	for name, data := range cfg.Programs {
		tr.File(name, 0o755, data)
	}
	var extra bytes.Buffer
	if err := tr.Write(&extra); err != nil {
		return err
	}
	if err := os.WriteFile(path, append(base, extra.Bytes()...), 0o644); err != nil {
		return fmt.Errorf("write initrd: %w", err)
	}
	return nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// HostCommands are the host's commands that Build, NewNetwork and Boot
// run: test/interop/install-deps.sh installs those apt does not bring.
var HostCommands = []string{"qemu-system-x86_64", "apt-get", "apt-cache", "dpkg-deb", "ip", "tcpdump", "xz"}
