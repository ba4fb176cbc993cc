package xdplink

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/softnic/softnic/bpf"
	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/xdp"
	"github.com/vishvananda/netlink"
)

func TestNetdevAndNeighbors(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{MTU: 9000})
	err := pair.A.Do(func() error {
		nd, err := LookupNetdev(pair.A.Ifname)
		if err != nil {
			return err
		}
		if nd.MTU != 9000 || !bytes.Equal(nd.MAC[:], pair.A.MAC) || nd.Index != pair.A.Ifindex || !nd.Up || nd.ActiveMTU() != 4096 {
			t.Errorf("netdev %+v, want MTU 9000, MAC %v, index %d", nd, pair.A.MAC, pair.A.Ifindex)
		}
		// Link-local first, then IPv4, then global IPv6.
		if len(nd.GIDs) != 3 || nd.GIDs[0] != roce.DefaultGID(nd.MAC) {
			t.Fatalf("GIDs %v, want the link-local address first and 3 in all", nd.GIDs)
		}
		want := []netip.Addr{nd.GIDs[0], pair.A.Addr4(), pair.A.Addr6()}
		if fmt.Sprint(nd.GIDs) != fmt.Sprint(want) {
			t.Errorf("GIDs %v, want %v", nd.GIDs, want)
		}

		for _, dst := range []netip.Addr{pair.B.Addr4(), pair.B.Addr6()} {
			mac, err := ResolveNeighbor(pair.A.Ifindex, dst, 3*time.Second)
			if err != nil {
				t.Errorf("resolve %v: %v", dst, err)
			} else if !bytes.Equal(mac[:], pair.B.MAC) {
				t.Errorf("resolve %v = %x, want %v", dst, mac, pair.B.MAC)
			}
		}
		start := time.Now()
		_, err = ResolveNeighbor(pair.A.Ifindex, netip.MustParseAddr("10.47.0.99"), 300*time.Millisecond)
		if !errors.Is(err, ErrNeighborUnresolved) || time.Since(start) > 2*time.Second {
			t.Errorf("absent neighbour: %v after %v", err, time.Since(start))
		}
		_, err = ResolveNeighbor(pair.A.Ifindex, netip.MustParseAddr("192.0.2.1"), 300*time.Millisecond)
		if !errors.Is(err, ErrNoRoute) {
			t.Errorf("unroutable address: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func openLinkT(t *testing.T, e *netnstest.End) *Link {
	t.Helper()
	var l *Link
	err := e.Do(func() (err error) {
		var addrs []netip.Addr
		for _, p := range e.Addrs {
			addrs = append(addrs, p.Addr())
		}
		l, err = Open(e.Ifname, Config{Addrs: addrs})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// sendIB sends one RoCEv2 frame carrying ib through l.
func sendIB(t *testing.T, l roce.Link, e *roce.Encap, ib []byte) {
	t.Helper()
	var buf []byte
	for deadline := time.Now().Add(2 * time.Second); buf == nil; {
		if buf = l.TxFrame(); buf == nil {
			if time.Now().After(deadline) {
				t.Fatal("no TX buffer for 2s")
			}
			l.Flush()
			l.Wait(time.Millisecond)
		}
	}
	if len(buf) < l.MTU()+22 {
		t.Fatalf("TxFrame gave %d bytes, want at least %d", len(buf), l.MTU()+22)
	}
	copy(buf[e.HeaderLen():], ib)
	n, err := e.Finish(buf, len(ib))
	if err != nil {
		t.Fatal(err)
	}
	l.Send(buf[:n])
}

func TestXDPLinkFrames(t *testing.T) {
	netnstest.Integration(t)
	for _, tc := range []struct {
		mtu, ibMTU int
	}{{1500, 1024}, {9000, 4096}} {
		t.Run(fmt.Sprintf("mtu%d-ib%d", tc.mtu, tc.ibMTU), func(t *testing.T) {
			pair := netnstest.NewT(t, netnstest.Config{MTU: tc.mtu})
			a, b := openLinkT(t, &pair.A), openLinkT(t, &pair.B)
			if a.MTU() != tc.mtu {
				t.Fatalf("link MTU %d, want %d", a.MTU(), tc.mtu)
			}
			for _, v6 := range []bool{false, true} {
				e := roce.Encap{SrcMAC: a.HardwareAddr(), DstMAC: b.HardwareAddr(), Src: pair.A.Addr4(), Dst: pair.B.Addr4(), HopLimit: 64, SrcPort: roce.SourcePort(17)}
				if v6 {
					e.Src, e.Dst = pair.A.Addr6(), pair.B.Addr6()
				}
				const n = 300
				sent := make([][]byte, 0, n)
				got := 0
				var f roce.Frame
				// receiveUpTo takes frames until want have arrived; sending in
				// batches of 32 keeps the veth's 256-frame queue from overflowing
				// on a loaded machine.
				receiveUpTo := func(want int) {
					for deadline := time.Now().Add(5 * time.Second); got < want && time.Now().Before(deadline); {
						b.Receive(func(frame []byte) {
							if err := roce.ParseFrame(frame, &f); err != nil {
								t.Errorf("frame %d: %v", got, err)
							} else if f.Dst != e.Dst || !bytes.Equal(f.IB, sent[got]) {
								t.Errorf("frame %d differs (dst %v, %d IB bytes)", got, f.Dst, len(f.IB))
							}
							got++
						}, 64)
						if got < want {
							b.Wait(10 * time.Millisecond)
						}
					}
					if got != want {
						st, _ := b.Stats()
						t.Fatalf("received %d of %d frames; stats %+v", got, want, st)
					}
				}
				for i := 0; i < n; i++ {
					// BTH (SEND ONLY, QP 17, PSN i) and a payload of the IB MTU.
					ib := make([]byte, ibtransport.BTHLen+tc.ibMTU)
					bth := ibtransport.BTH(ib)
					bth.SetOpcode(ibtransport.OpRCSendOnly)
					bth.SetPKey(0xffff)
					bth.SetDestQPN(17)
					bth.SetPSN(ibtransport.PSN(i))
					for j := ibtransport.BTHLen; j < len(ib); j++ {
						ib[j] = byte(i + j)
					}
					sent = append(sent, ib)
					sendIB(t, a, &e, ib)
					if i%32 == 31 || i == n-1 {
						if err := a.Flush(); err != nil {
							t.Fatal(err)
						}
						receiveUpTo(i + 1)
					}
				}
			}
			// Ordinary traffic still flows while both links are open.
			if err := pair.A.Ping(pair.B.Addr4(), 2*time.Second); err != nil {
				t.Error(err)
			}
			if err := netnstest.TCPEcho(&pair.B, &pair.A, pair.B.Addr6(), make([]byte, 100000), 5*time.Second); err != nil {
				t.Error(err)
			}
			st, err := b.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.RxOversized+st.RxBadDesc != 0 || st.Sockets[0].RxDropped != 0 || st.Program.Steered != 600 {
				t.Errorf("receiver stats %+v", st)
			}
		})
	}
}

func TestXDPLinkWakeAndClose(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	l := openLinkT(t, &pair.A)
	done := make(chan error, 1)
	go func() { done <- l.Wait(-1) }()
	time.Sleep(20 * time.Millisecond)
	l.Wake()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Wake did not interrupt Wait")
	}
	start := time.Now()
	if err := l.Wait(30 * time.Millisecond); err != nil || time.Since(start) < 25*time.Millisecond {
		t.Fatalf("timed Wait: %v after %v", err, time.Since(start))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Wait(0); !errors.Is(err, roce.ErrLinkClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	// The interface is as it was: no XDP program left.
	nl, err := pair.A.Link()
	if err != nil {
		t.Fatal(err)
	}
	if x := nl.Attrs().Xdp; x != nil && x.Attached {
		t.Fatalf("XDP program %d left on the interface", x.ProgId)
	}
}

func TestOpenXDPLinkErrors(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	err := pair.A.Do(func() error { _, err := Open("nosuch0", Config{}); return err })
	if !errors.Is(err, bpf.ErrNoInterface) {
		t.Errorf("missing interface: %v", err)
	}
	first := openLinkT(t, &pair.A)
	_ = first
	err = pair.A.Do(func() error { _, err := Open(pair.A.Ifname, Config{}); return err })
	if !errors.Is(err, bpf.ErrXDPBusy) {
		t.Errorf("second link on one interface: %v", err)
	}
	// A UMEM that cannot be had fails after the program was attached: the
	// program must be gone again.
	umem := netnstest.NewT(t, netnstest.Config{})
	err = umem.A.Do(func() error {
		_, err := Open(umem.A.Ifname, Config{Socket: xdp.Config{NumFrames: 1 << 26}})
		return err
	})
	if !errors.Is(err, xdp.ErrUMEM) {
		t.Errorf("huge UMEM: %v", err)
	}
	if nl, _ := umem.A.Link(); nl.Attrs().Xdp != nil && nl.Attrs().Xdp.Attached {
		t.Error("XDP program left on the interface after the UMEM failed")
	}
	// An interface that is down is refused before anything is attached.
	down := netnstest.NewT(t, netnstest.Config{})
	err = down.A.Do(func() error {
		nl, err := netlink.LinkByName(down.A.Ifname)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetDown(nl); err != nil {
			return err
		}
		_, err = Open(down.A.Ifname, Config{})
		return err
	})
	if !errors.Is(err, ErrLinkDown) {
		t.Errorf("interface down: %v", err)
	}
	if nl, _ := down.A.Link(); nl.Attrs().Xdp != nil && nl.Attrs().Xdp.Attached {
		t.Error("XDP program left on the interface that was down")
	}
	// The first link still works after the refused second one.
	if nl, _ := pair.A.Link(); nl.Attrs().Xdp == nil || !nl.Attrs().Xdp.Attached {
		t.Error("the refused second link detached the first one's program")
	}
}

// The link's per-frame path (TxFrame, Send, Flush, Receive) allocates nothing.
func TestXDPLinkHotPathAllocs(t *testing.T) {
	netnstest.Integration(t)
	for _, mtu := range []int{1500, 9000} {
		pair := netnstest.NewT(t, netnstest.Config{MTU: mtu})
		a, b := openLinkT(t, &pair.A), openLinkT(t, &pair.B)
		e := roce.Encap{SrcMAC: a.HardwareAddr(), DstMAC: b.HardwareAddr(), Src: pair.A.Addr4(), Dst: pair.B.Addr4(), HopLimit: 64, SrcPort: roce.SourcePort(1)}
		ib := make([]byte, ibtransport.BTHLen+mtu-100)
		ibtransport.BTH(ib).SetOpcode(ibtransport.OpRCSendOnly)
		received := 0
		onFrame := func(frame []byte) { received++ }
		step := func() {
			if buf := a.TxFrame(); buf != nil {
				copy(buf[e.HeaderLen():], ib)
				n, _ := e.Finish(buf, len(ib))
				a.Send(buf[:n])
			}
			a.Flush()
			b.Receive(onFrame, 64)
		}
		for range 100 {
			step() // warm up
		}
		if allocs := testing.AllocsPerRun(2000, step); allocs != 0 {
			t.Errorf("MTU %d: %v allocations per frame", mtu, allocs)
		}
		if received == 0 {
			t.Errorf("MTU %d: nothing received", mtu)
		}
	}
}

// Opening and closing links leaks no file descriptors (sockets, eventfds,
// BPF objects), once closed links are garbage.
func TestXDPLinkNoFDLeak(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	count := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	cycle := func() {
		var l *Link
		if err := pair.A.Do(func() (err error) {
			l, err = Open(pair.A.Ifname, Config{Addrs: []netip.Addr{pair.A.Addr4()}, Socket: xdp.Config{NumFrames: 64}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		l.Wake()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cycle()
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	before := count()
	for range 20 {
		cycle()
	}
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if after := count(); after > before+2 {
		t.Errorf("%d file descriptors before 20 open/close cycles, %d after", before, after)
	}
}

// Split divides the sockets of a 4-queue veth: link i of 2 receives what
// arrives on queues i and i+2, and each of the peer's 4 links sends on its
// own queue, which on veth is the queue the frame arrives on.
func TestXDPLinkSplit(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{Queues: 4})
	a, b := openLinkT(t, &pair.A), openLinkT(t, &pair.B)
	if a.NumQueues() != 4 || b.NumQueues() != 4 {
		t.Fatalf("%d and %d queues, want 4", a.NumQueues(), b.NumQueues())
	}
	if _, err := a.Split(5); !errors.Is(err, roce.ErrSplit) {
		t.Fatalf("Split(5) of 4 queues: %v", err)
	}
	as, err := a.Split(2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Split(2); !errors.Is(err, roce.ErrSplit) {
		t.Fatalf("a second Split: %v", err)
	}
	bs, err := b.Split(4)
	if err != nil {
		t.Fatal(err)
	}
	e := roce.Encap{SrcMAC: b.HardwareAddr(), DstMAC: a.HardwareAddr(), Src: pair.B.Addr4(), Dst: pair.A.Addr4(), HopLimit: 64, SrcPort: roce.SourcePort(17)}
	for q, l := range bs {
		ib := make([]byte, 64)
		ib[0] = byte(ibtransport.OpRCSendOnly)
		ib[20] = byte(q) // the payload says which queue sent it
		sendIB(t, l, &e, ib)
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	got := map[int]int{} // sending queue -> receiving link
	var f roce.Frame
	for deadline := time.Now().Add(5 * time.Second); len(got) < 4 && time.Now().Before(deadline); {
		for i, l := range as {
			l.Receive(func(frame []byte) {
				if err := roce.ParseFrame(frame, &f); err != nil {
					t.Errorf("link %d: %v", i, err)
					return
				}
				got[int(f.IB[20])] = i
			}, 64)
		}
		as[0].Wait(time.Millisecond)
	}
	for q := range 4 {
		i, ok := got[q]
		if !ok {
			t.Errorf("the frame sent on queue %d did not arrive", q)
		} else if i != q%2 {
			t.Errorf("the frame sent on queue %d arrived at link %d, want %d", q, i, q%2)
		}
	}
	st, err := a.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for q, s := range st.Sockets {
		if s.RxPackets != 1 {
			t.Errorf("socket of queue %d received %d frames, want 1", q, s.RxPackets)
		}
	}
}
