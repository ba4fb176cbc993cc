package netnstest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Config describes the pair to build. Zero fields take the defaults.
type Config struct {
	MTU    int            // link MTU of both veth ends; default 1500
	Queues int            // RX and TX queues of each veth end; default 1
	AddrsA []netip.Prefix // default 10.47.0.1/24 and fd47::1/64
	AddrsB []netip.Prefix // default 10.47.0.2/24 and fd47::2/64
	// Bridged puts a third namespace, Pair.Middle, between the ends: each
	// end's veth leads there, to a bridge that joins them. Frames between
	// the ends then pass the kernel's forwarding path in Middle, where a
	// test may filter or drop them (nftables' bridge family), whatever
	// sent them: AF_XDP frames bypass the ends' own qdiscs and netfilter.
	Bridged bool
}

// End is one side of the pair: a named network namespace holding one veth end.
type End struct {
	Namespace string         // name under /var/run/netns, usable with `ip netns exec`
	Handle    netns.NsHandle // open handle on the namespace
	Ifname    string         // veth name inside the namespace
	Ifindex   int            // veth ifindex inside the namespace
	MAC       net.HardwareAddr
	Addrs     []netip.Prefix
}

// Pair is two namespaces joined by a veth pair.
type Pair struct {
	A, B End
	// Middle is the namespace between A and B with Config.Bridged ("" without).
	Middle string
	MTU    int
	closed bool
}

var pairSeq atomic.Uint32

// Namespaces are named namePrefix<pid>-<n>a/b, so those of a process that
// died before cleaning up (SIGKILL, a test timeout) can be recognised and
// removed by the next New.
const namePrefix = "snt"

// sweepStale deletes namespaces left by netnstest processes that no longer run.
func sweepStale() {
	entries, err := os.ReadDir("/var/run/netns")
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), namePrefix)
		if !ok {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid == os.Getpid() {
			continue
		}
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			netns.DeleteNamed(e.Name())
		}
	}
}

// Integration marks a test that needs the real kernel: network namespaces,
// veth pairs, XDP programs or AF_XDP sockets. It skips the test with -short
// (make test-short runs unit tests only); without root, which creating
// those requires, it skips it saying so, or fails it under CI (see Need).
func Integration(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("integration test (namespaces, veth, XDP): needs a run without -short")
	}
	if os.Geteuid() != 0 {
		Need(tb, "needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_BPF) to create network namespaces, veth pairs and XDP programs; run the tests as root")
	}
}

// RequireCommands checks that every command in names is on PATH; for a
// missing one it calls Need with install, what installs it.
func RequireCommands(tb testing.TB, install string, names ...string) {
	tb.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			Need(tb, fmt.Sprintf("needs %s: run %s", name, install))
		}
	}
}

// Need ends a test that cannot run here for want of what missing says:
// it skips it, or, when the CI environment variable is set, fails it,
// because CI runs as root with every tool installed (.ci/run) and an
// integration or interop test it skipped would pass unseen.
func Need(tb testing.TB, missing string) {
	tb.Helper()
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s (CI must run every integration and interop test)", missing)
		return
	}
	tb.Skip(missing)
}

// NewT builds a pair like New, fails the test on error, and registers
// Close with t.Cleanup.
func NewT(tb testing.TB, cfg Config) *Pair {
	tb.Helper()
	p, err := New(cfg)
	if err != nil {
		tb.Fatalf("netnstest: %v", err)
	}
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Errorf("netnstest cleanup: %v", err)
		}
	})
	return p
}

// New creates two namespaces joined by a veth pair, configured as cfg says
// and with both ends (and loopback) up. On error everything created so far
// is removed again. The caller must call Close.
func New(cfg Config) (p *Pair, err error) {
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	if cfg.AddrsA == nil {
		cfg.AddrsA = []netip.Prefix{netip.MustParsePrefix("10.47.0.1/24"), netip.MustParsePrefix("fd47::1/64")}
	}
	if cfg.AddrsB == nil {
		cfg.AddrsB = []netip.Prefix{netip.MustParsePrefix("10.47.0.2/24"), netip.MustParsePrefix("fd47::2/64")}
	}
	sweepStale()
	base := fmt.Sprintf("%s%d-%d", namePrefix, os.Getpid(), pairSeq.Add(1))
	p = &Pair{MTU: cfg.MTU}
	p.A = End{Namespace: base + "a", Ifname: "veth0", Addrs: cfg.AddrsA, Handle: netns.None()}
	p.B = End{Namespace: base + "b", Ifname: "veth1", Addrs: cfg.AddrsB, Handle: netns.None()}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Close())
			p = nil
		}
	}()
	if p.A.Handle, err = newNamed(p.A.Namespace); err != nil {
		return p, err
	}
	if p.B.Handle, err = newNamed(p.B.Namespace); err != nil {
		return p, err
	}
	ha, err := netlink.NewHandleAt(p.A.Handle)
	if err != nil {
		return p, fmt.Errorf("netlink handle in %s: %w", p.A.Namespace, err)
	}
	defer ha.Close()
	hb, err := netlink.NewHandleAt(p.B.Handle)
	if err != nil {
		return p, fmt.Errorf("netlink handle in %s: %w", p.B.Namespace, err)
	}
	defer hb.Close()
	if cfg.Bridged {
		p.Middle = base + "m"
		if err := bridge(p, cfg, ha, hb); err != nil {
			return p, err
		}
	} else if err := ha.LinkAdd(newVeth(cfg, p.A.Ifname, p.B.Ifname, p.B.Handle)); err != nil {
		return p, fmt.Errorf("create veth pair %s/%s: %w", p.A.Ifname, p.B.Ifname, err)
	}
	sides := []struct {
		e *End
		h *netlink.Handle
	}{{&p.A, ha}, {&p.B, hb}}
	for _, side := range sides {
		// No duplicate address detection on the link-local address either:
		// while it is tentative, IPv6 neighbour discovery stalls for ~2s.
		if err := side.e.Do(func() error {
			return os.WriteFile("/proc/sys/net/ipv6/conf/"+side.e.Ifname+"/accept_dad", []byte("0"), 0)
		}); err != nil {
			return p, fmt.Errorf("disable DAD on %s in %s: %w", side.e.Ifname, side.e.Namespace, err)
		}
		if err := linkUp(side.h, side.e); err != nil {
			return p, fmt.Errorf("configure %s in %s: %w", side.e.Ifname, side.e.Namespace, err)
		}
	}
	for _, side := range sides {
		if err := addAddrs(side.h, side.e); err != nil {
			return p, fmt.Errorf("configure %s in %s: %w", side.e.Ifname, side.e.Namespace, err)
		}
	}
	return p, nil
}

func linkUp(h *netlink.Handle, e *End) error {
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	l, err := h.LinkByName(e.Ifname)
	if err != nil {
		return err
	}
	e.Ifindex = l.Attrs().Index
	e.MAC = l.Attrs().HardwareAddr
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("link up: %w", err)
	}
	return nil
}

// addAddrs waits for carrier and then adds the addresses: IPv6 installs the
// prefix routes of addresses added on a running link at once, instead of
// after an address-configuration delay that makes the first packets vanish.
func addAddrs(h *netlink.Handle, e *End) error {
	var l netlink.Link
	for deadline := time.Now().Add(5 * time.Second); ; {
		var err error
		if l, err = h.LinkByName(e.Ifname); err != nil {
			return err
		}
		if l.Attrs().OperState == netlink.OperUp {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no carrier after 5s (state %v)", l.Attrs().OperState)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, a := range e.Addrs {
		na := &netlink.Addr{IPNet: &net.IPNet{
			IP:   a.Addr().AsSlice(),
			Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen()),
		}}
		if a.Addr().Is6() {
			na.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(l, na); err != nil {
			return fmt.Errorf("add address %v: %w", a, err)
		}
	}
	// The kernel adds the link-local address shortly after carrier; wait
	// for it so every test sees the same, complete address list.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		addrs, err := h.AddrList(l, unix.AF_INET6)
		if err != nil {
			return fmt.Errorf("list addresses: %w", err)
		}
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("no IPv6 link-local address after 5s")
		}
	}
}

// newNamed creates a named namespace without leaving the calling thread in it.
func newNamed(name string) (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return netns.None(), fmt.Errorf("current namespace: %w", err)
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		return netns.None(), fmt.Errorf("create namespace %s: %w", name, err)
	}
	if err := netns.Set(orig); err != nil {
		// The thread is stuck in the new namespace; keep it locked so the
		// runtime discards it instead of reusing it.
		runtime.LockOSThread()
		h.Close()
		return netns.None(), fmt.Errorf("return from namespace %s: %w", name, err)
	}
	return h, nil
}

// newVeth describes a veth pair of cfg's MTU and queues: name in the
// handle's namespace, peer in peerNS.
func newVeth(cfg Config, name, peer string, peerNS netns.NsHandle) *netlink.Veth {
	return &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{
			Name: name, MTU: cfg.MTU,
			NumTxQueues: cfg.Queues, NumRxQueues: cfg.Queues,
		},
		PeerName:        peer,
		PeerNamespace:   netlink.NsFd(peerNS),
		PeerMTU:         uint32(cfg.MTU),
		PeerNumTxQueues: uint32(cfg.Queues),
		PeerNumRxQueues: uint32(cfg.Queues),
	}
}

// bridge creates p.Middle, a veth from each end to it, and a bridge there
// (br0, no STP: its ports forward at once) joining the two.
func bridge(p *Pair, cfg Config, ha, hb *netlink.Handle) error {
	mh, err := newNamed(p.Middle)
	if err != nil {
		return err
	}
	defer mh.Close()
	hm, err := netlink.NewHandleAt(mh)
	if err != nil {
		return fmt.Errorf("netlink handle in %s: %w", p.Middle, err)
	}
	defer hm.Close()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0", MTU: cfg.MTU}}
	if err := hm.LinkAdd(br); err != nil {
		return fmt.Errorf("create bridge in %s: %w", p.Middle, err)
	}
	for i, end := range []struct {
		e *End
		h *netlink.Handle
	}{{&p.A, ha}, {&p.B, hb}} {
		port := fmt.Sprintf("port%d", i)
		if err := end.h.LinkAdd(newVeth(cfg, end.e.Ifname, port, mh)); err != nil {
			return fmt.Errorf("create veth %s/%s: %w", end.e.Ifname, port, err)
		}
		l, err := hm.LinkByName(port)
		if err == nil {
			err = hm.LinkSetMaster(l, br)
		}
		if err == nil {
			err = hm.LinkSetUp(l)
		}
		if err != nil {
			return fmt.Errorf("bridge port %s in %s: %w", port, p.Middle, err)
		}
	}
	if err := hm.LinkSetUp(br); err != nil {
		return fmt.Errorf("bridge up in %s: %w", p.Middle, err)
	}
	return nil
}

// Close deletes both namespaces (which destroys the veth pair with them).
// It is safe to call more than once.
func (p *Pair) Close() error {
	if p == nil || p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	names := []string{p.A.Namespace, p.B.Namespace}
	if p.Middle != "" {
		names = append(names, p.Middle)
	}
	for _, e := range []*End{&p.A, &p.B} {
		if e.Handle.IsOpen() {
			e.Handle.Close()
		}
	}
	for _, name := range names {
		if err := netns.DeleteNamed(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("delete namespace %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Do runs fn on an OS thread switched into the end's namespace, and switches
// back afterwards. Sockets and netlink handles created in fn belong to the
// namespace for their whole life, whichever goroutine uses them later.
// fn must not start goroutines that expect to run in the namespace.
func (e *End) Do(fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(e.Handle); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter namespace %s: %w", e.Namespace, err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: the runtime then terminates it
			// when this goroutine exits instead of reusing it.
			return
		}
		runtime.UnlockOSThread()
	}()
	return fn()
}

// Command returns a command that runs name with args inside the end's
// namespace (through `ip netns exec`).
func (e *End) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", e.Namespace, name}, args...)...)
}

// Addr4 returns the end's first IPv4 address, or the zero Addr.
func (e *End) Addr4() netip.Addr {
	for _, a := range e.Addrs {
		if a.Addr().Is4() {
			return a.Addr()
		}
	}
	return netip.Addr{}
}

// Addr6 returns the end's first IPv6 address, or the zero Addr.
func (e *End) Addr6() netip.Addr {
	for _, a := range e.Addrs {
		if a.Addr().Is6() && !a.Addr().Is4In6() {
			return a.Addr()
		}
	}
	return netip.Addr{}
}

// Link returns the netlink view of the end's veth, read fresh from its namespace.
func (e *End) Link() (netlink.Link, error) {
	h, err := netlink.NewHandleAt(e.Handle)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in %s: %w", e.Namespace, err)
	}
	defer h.Close()
	return h.LinkByName(e.Ifname)
}
