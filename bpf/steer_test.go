package bpf

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

func attachT(t *testing.T, e *netnstest.End) *Program {
	t.Helper()
	var p *Program
	if err := e.Do(func() (err error) { p, err = Attach(e.Ifname, ModeAuto); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func sendUDP(t *testing.T, from *netnstest.End, to netip.Addr, port uint16, n int) {
	t.Helper()
	// Unconnected, so ICMP port-unreachable replies do not fail later writes.
	var c net.PacketConn
	if err := from.Do(func() (err error) {
		c, err = net.ListenPacket("udp", ":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(to, port))
	for i := 0; i < n; i++ {
		if _, err := c.WriteTo([]byte("not really RoCE"), dst); err != nil {
			t.Fatal(err)
		}
	}
}

func waitStats(t *testing.T, p *Program, ok func(Stats) bool) Stats {
	t.Helper()
	var s Stats
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var err error
		if s, err = p.Stats(); err != nil {
			t.Fatal(err)
		}
		if ok(s) {
			return s
		}
	}
	t.Fatalf("counters never reached the expected values: %+v", s)
	return s
}

func TestSteeringDecisions(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{MTU: 9000})
	p := attachT(t, &pair.A)
	if err := p.AddAddr(pair.A.Addr4()); err != nil {
		t.Fatal(err)
	}
	if err := p.AddAddr(pair.A.Addr6()); err != nil {
		t.Fatal(err)
	}
	// Ordinary traffic reaches the kernel with the program attached.
	if err := pair.B.Ping(pair.A.Addr4(), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := netnstest.TCPEcho(&pair.A, &pair.B, pair.A.Addr6(), make([]byte, 50000), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	waitStats(t, p, func(s Stats) bool { return s.PassNotRoCE > 0 })

	// RoCEv2 for softnic's addresses, but no socket bound on the queue.
	sendUDP(t, &pair.B, pair.A.Addr4(), 4791, 3)
	sendUDP(t, &pair.B, pair.A.Addr6(), 4791, 2)
	waitStats(t, p, func(s Stats) bool { return s.PassNoSocket == 5 })

	// After removal the address is not softnic's any more.
	if err := p.RemoveAddr(pair.A.Addr4()); err != nil {
		t.Fatal(err)
	}
	sendUDP(t, &pair.B, pair.A.Addr4(), 4791, 4)
	s := waitStats(t, p, func(s Stats) bool { return s.PassNotLocal == 4 })
	if s.Steered != 0 {
		t.Errorf("steered %d frames without a socket", s.Steered)
	}
	if err := p.AddAddr(netip.Addr{}); !errors.Is(err, ErrUnsupportedAddr) {
		t.Errorf("AddAddr(zero) = %v, want ErrUnsupportedAddr", err)
	}
	if err := p.SetSocket(MaxQueues, 3); !errors.Is(err, ErrTooManyQueues) {
		t.Errorf("SetSocket(MaxQueues) = %v, want ErrTooManyQueues", err)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	assertNoXDP(t, &pair.A)
}

func assertNoXDP(t *testing.T, e *netnstest.End) {
	t.Helper()
	l, err := e.Link()
	if err != nil {
		t.Fatal(err)
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		t.Errorf("XDP program %d still attached to %s", x.ProgId, e.Ifname)
	}
}

func TestAttachErrors(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})

	err := pair.A.Do(func() error { _, err := Attach("nosuchif0", ModeAuto); return err })
	if !errors.Is(err, ErrNoInterface) {
		t.Errorf("missing interface: got %v, want ErrNoInterface", err)
	}

	// A second softnic program on the same interface.
	first := attachT(t, &pair.A)
	err = pair.A.Do(func() error { _, err := Attach(pair.A.Ifname, ModeAuto); return err })
	if !errors.Is(err, ErrXDPBusy) {
		t.Errorf("second attach: got %v, want ErrXDPBusy", err)
	}
	first.Close()
	assertNoXDP(t, &pair.A)

	// Someone else's program attached the old way (netlink, no bpf_link):
	// softnic must refuse and leave it in place.
	other, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 2, asm.DWord), asm.Return()},
		License:      "GPL",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := pair.B.Do(func() error {
		l, err := netlink.LinkByName(pair.B.Ifname)
		if err != nil {
			return err
		}
		return netlink.LinkSetXdpFd(l, other.FD())
	}); err != nil {
		t.Fatal(err)
	}
	err = pair.B.Do(func() error { _, err := Attach(pair.B.Ifname, ModeAuto); return err })
	if !errors.Is(err, ErrXDPBusy) {
		t.Errorf("attach over a foreign program: got %v, want ErrXDPBusy", err)
	}
	t.Logf("error shown to the user: %v", err)
	l, err := pair.B.Link()
	if err != nil {
		t.Fatal(err)
	}
	info, _ := other.Info()
	id, _ := info.ID()
	if x := l.Attrs().Xdp; x == nil || !x.Attached || x.ProgId != uint32(id) {
		t.Errorf("foreign XDP program was disturbed: %+v", l.Attrs().Xdp)
	}
}

// A killed process must not leave the program attached: the bpf_link dies
// with its last file descriptor.
func TestKilledProcessLeavesNoProgram(t *testing.T) {
	if ns := os.Getenv("SOFTNIC_BPF_CHILD_NS"); ns != "" {
		childAttachAndHang(ns)
		return
	}
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledProcessLeavesNoProgram$")
	cmd.Env = append(os.Environ(), "SOFTNIC_BPF_CHILD_NS="+pair.A.Namespace)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, _ := out.Read(buf); string(buf[:n]) != "attached" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child did not attach: %q", buf[:n])
	}
	l, _ := pair.A.Link()
	if x := l.Attrs().Xdp; x == nil || !x.Attached {
		t.Fatal("child reported attached but no XDP program is on the link")
	}
	cmd.Process.Kill()
	cmd.Wait()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		l, _ = pair.A.Link()
		if x := l.Attrs().Xdp; x == nil || !x.Attached || time.Now().After(deadline) {
			break
		}
	}
	assertNoXDP(t, &pair.A)
}

func childAttachAndHang(ns string) {
	e := netnstest.End{Namespace: ns, Ifname: "veth0"}
	h, err := netns.GetFromName(ns)
	if err != nil {
		os.Stdout.WriteString("error: " + err.Error())
		os.Exit(1)
	}
	e.Handle = h
	if err := e.Do(func() error { _, err := Attach(e.Ifname, ModeAuto); return err }); err != nil {
		os.Stdout.WriteString("error: " + err.Error())
		os.Exit(1)
	}
	os.Stdout.WriteString("attached")
	select {}
}

func TestAttachWithoutPrivileges(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	err := pair.A.Do(func() error {
		return netnstest.WithoutCapabilities(nil, func() error {
			p, err := Attach(pair.A.Ifname, ModeAuto)
			if err == nil {
				p.Close()
			}
			return err
		})
	})
	if !errors.Is(err, ErrPermission) {
		t.Fatalf("attach without capabilities: %v, want ErrPermission", err)
	}
	t.Logf("error shown: %v", err)
	assertNoXDP(t, &pair.A)
}

// When the driver refuses the program in native mode (here: veth needs at
// least as many RX queues as its peer has TX queues), ModeAuto falls back
// to generic XDP and says why native mode was refused.
func TestAutoFallsBackToGeneric(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	var p *Program
	err := pair.A.Do(func() error {
		err := netlink.LinkAdd(&netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: "vq0", NumRxQueues: 1, NumTxQueues: 1},
			PeerName:  "vq1", PeerNumTxQueues: 4, PeerNumRxQueues: 1,
		})
		if err != nil {
			return err
		}
		for _, n := range []string{"vq0", "vq1"} {
			l, err := netlink.LinkByName(n)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
		}
		p, err = Attach("vq0", ModeAuto)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Mode() != ModeGeneric || p.NativeError() == nil {
		t.Fatalf("mode %v, native error %v: want the generic fallback", p.Mode(), p.NativeError())
	}
	t.Logf("native refused: %v", p.NativeError())
	// Native-only attachment must report the refusal instead.
	err = pair.A.Do(func() error {
		p.Close()
		q, err := Attach("vq0", ModeNative)
		if err == nil {
			q.Close()
		}
		return err
	})
	if err == nil {
		t.Fatal("native attach accepted on a veth with more peer TX queues than RX queues")
	}
}
