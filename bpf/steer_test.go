package bpf

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

func attachT(t *testing.T, e *netnstest.End) *Program {
	t.Helper()
	var p *Program
	require.NoError(t, e.Do(func() (err error) { p, err = Attach(e.Ifname, ModeAuto); return err }))
	t.Cleanup(func() { p.Close() })
	return p
}

func sendUDP(t *testing.T, from *netnstest.End, to netip.Addr, port uint16, n int) {
	t.Helper()
	// Unconnected, so ICMP port-unreachable replies do not fail later writes.
	var c net.PacketConn
	require.NoError(t, from.Do(func() (err error) {
		c, err = net.ListenPacket("udp", ":0")
		return err
	}))
	defer c.Close()
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(to, port))
	for i := 0; i < n; i++ {
		_, err := c.WriteTo([]byte("not really RoCE"), dst)
		require.NoError(t, err)
	}
}

func waitStats(t *testing.T, p *Program, ok func(Stats) bool) Stats {
	t.Helper()
	var s Stats
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var err error
		s, err = p.Stats()
		require.NoError(t, err)
		if ok(s) {
			return s
		}
	}
	require.FailNowf(t, "timeout", "counters never reached the expected values: %+v", s)
	return s
}

func TestSteeringDecisions(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{MTU: 9000})
	p := attachT(t, &pair.A)
	require.NoError(t, p.AddAddr(pair.A.Addr4()))
	require.NoError(t, p.AddAddr(pair.A.Addr6()))
	// Ordinary traffic reaches the kernel with the program attached.
	require.NoError(t, pair.B.Ping(pair.A.Addr4(), 2*time.Second))
	require.NoError(t, netnstest.TCPEcho(&pair.A, &pair.B, pair.A.Addr6(), make([]byte, 50000), 5*time.Second))
	waitStats(t, p, func(s Stats) bool { return s.PassNotRoCE > 0 })

	// RoCEv2 for softnic's addresses, but no socket bound on the queue.
	sendUDP(t, &pair.B, pair.A.Addr4(), 4791, 3)
	sendUDP(t, &pair.B, pair.A.Addr6(), 4791, 2)
	waitStats(t, p, func(s Stats) bool { return s.PassNoSocket == 5 })

	// After removal the address is not softnic's any more.
	require.NoError(t, p.RemoveAddr(pair.A.Addr4()))
	sendUDP(t, &pair.B, pair.A.Addr4(), 4791, 4)
	s := waitStats(t, p, func(s Stats) bool { return s.PassNotLocal == 4 })
	assert.Zero(t, s.Steered, "frames steered without a socket")
	assert.ErrorIs(t, p.AddAddr(netip.Addr{}), ErrUnsupportedAddr, "AddAddr(zero)")
	assert.ErrorIs(t, p.SetSocket(MaxQueues, 3), ErrTooManyQueues, "SetSocket(MaxQueues)")

	require.NoError(t, p.Close())
	assertNoXDP(t, &pair.A)
}

func assertNoXDP(t *testing.T, e *netnstest.End) {
	t.Helper()
	l, err := e.Link()
	require.NoError(t, err)
	if x := l.Attrs().Xdp; x != nil {
		assert.False(t, x.Attached, "XDP program %d still attached to %s", x.ProgId, e.Ifname)
	}
}

func TestAttachErrors(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})

	err := pair.A.Do(func() error { _, err := Attach("nosuchif0", ModeAuto); return err })
	assert.ErrorIs(t, err, ErrNoInterface, "missing interface")

	// A second softnic program on the same interface.
	first := attachT(t, &pair.A)
	err = pair.A.Do(func() error { _, err := Attach(pair.A.Ifname, ModeAuto); return err })
	assert.ErrorIs(t, err, ErrXDPBusy, "second attach")
	first.Close()
	assertNoXDP(t, &pair.A)

	// Someone else's program attached the old way (netlink, no bpf_link):
	// softnic must refuse and leave it in place.
	other, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 2, asm.DWord), asm.Return()},
		License:      "GPL",
	})
	require.NoError(t, err)
	defer other.Close()
	require.NoError(t, pair.B.Do(func() error {
		l, err := netlink.LinkByName(pair.B.Ifname)
		if err != nil {
			return err
		}
		return netlink.LinkSetXdpFd(l, other.FD())
	}))
	err = pair.B.Do(func() error { _, err := Attach(pair.B.Ifname, ModeAuto); return err })
	assert.ErrorIs(t, err, ErrXDPBusy, "attach over a foreign program")
	t.Logf("error shown to the user: %v", err)
	l, err := pair.B.Link()
	require.NoError(t, err)
	info, _ := other.Info()
	id, _ := info.ID()
	if x := l.Attrs().Xdp; assert.NotNil(t, x, "foreign XDP program was removed") {
		assert.True(t, x.Attached, "foreign XDP program was disturbed: %+v", x)
		assert.Equal(t, uint32(id), x.ProgId, "foreign XDP program was disturbed: %+v", x)
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
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	buf := make([]byte, 8)
	if n, _ := out.Read(buf); string(buf[:n]) != "attached" {
		cmd.Process.Kill()
		cmd.Wait()
		require.FailNowf(t, "child did not attach", "it wrote %q", buf[:n])
	}
	l, _ := pair.A.Link()
	x := l.Attrs().Xdp
	require.True(t, x != nil && x.Attached, "child reported attached but no XDP program is on the link")
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
	require.ErrorIs(t, err, ErrPermission, "attach without capabilities")
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
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, ModeGeneric, p.Mode(), "want the generic fallback")
	require.Error(t, p.NativeError(), "want the generic fallback's reason")
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
	require.Error(t, err, "native attach accepted on a veth with more peer TX queues than RX queues")
}
