package xdplink

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/softnic/softnic/bpf"
	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/xdp"
)

func TestNetdevAndNeighbors(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{MTU: 9000})
	err := pair.A.Do(func() error {
		nd, err := LookupNetdev(pair.A.Ifname)
		if err != nil {
			return err
		}
		assert.Equal(t, 9000, nd.MTU)
		assert.Equal(t, []byte(pair.A.MAC), nd.MAC[:])
		assert.Equal(t, pair.A.Ifindex, nd.Index)
		assert.True(t, nd.Up)
		assert.Equal(t, 4096, nd.ActiveMTU())
		// Link-local first, then IPv4, then global IPv6.
		require.Len(t, nd.GIDs, 3)
		require.Equal(t, roce.DefaultGID(nd.MAC), nd.GIDs[0], "the link-local address first")
		assert.Equal(t, []netip.Addr{nd.GIDs[0], pair.A.Addr4(), pair.A.Addr6()}, nd.GIDs)

		for _, dst := range []netip.Addr{pair.B.Addr4(), pair.B.Addr6()} {
			mac, err := ResolveNeighbor(pair.A.Ifindex, dst, 3*time.Second)
			if assert.NoError(t, err, "resolve %v", dst) {
				assert.Equal(t, []byte(pair.B.MAC), mac[:], "resolve %v", dst)
			}
		}
		start := time.Now()
		_, err = ResolveNeighbor(pair.A.Ifindex, netip.MustParseAddr("10.47.0.99"), 300*time.Millisecond)
		assert.ErrorIs(t, err, ErrNeighborUnresolved, "absent neighbour")
		assert.LessOrEqual(t, time.Since(start), 2*time.Second, "absent neighbour")
		_, err = ResolveNeighbor(pair.A.Ifindex, netip.MustParseAddr("192.0.2.1"), 300*time.Millisecond)
		assert.ErrorIs(t, err, ErrNoRoute, "unroutable address")
		return nil
	})
	require.NoError(t, err)
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
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// sendIB sends one RoCEv2 frame carrying ib through l.
func sendIB(t *testing.T, l roce.Link, e *roce.Encap, ib []byte) {
	t.Helper()
	var buf []byte
	for deadline := time.Now().Add(2 * time.Second); buf == nil; {
		if buf = l.TxFrame(); buf == nil {
			require.False(t, time.Now().After(deadline), "no TX buffer for 2s")
			l.Flush()
			l.Wait(time.Millisecond)
		}
	}
	require.GreaterOrEqual(t, len(buf), l.MTU()+22, "TxFrame's buffer")
	copy(buf[e.HeaderLen():], ib)
	n, err := e.Finish(buf, len(ib))
	require.NoError(t, err)
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
			require.Equal(t, tc.mtu, a.MTU(), "link MTU")
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
							if frame == nil {
								return // the end of a batch
							}
							if assert.NoError(t, roce.ParseFrame(frame, &f), "frame %d", got) {
								assert.Equal(t, e.Dst, f.Dst, "frame %d", got)
								assert.True(t, bytes.Equal(f.IB, sent[got]), "frame %d differs (%d IB bytes)", got, len(f.IB))
							}
							got++
						}, 64)
						if got < want {
							b.Wait(10 * time.Millisecond)
						}
					}
					if got != want {
						st, _ := b.Stats()
						require.Failf(t, "frames missing", "received %d of %d frames; stats %+v", got, want, st)
					}
				}
				for i := 0; i < n; i++ {
					// BTH (SEND ONLY, QP 17, PSN i) and a payload of the IB MTU.
					ib := make([]byte, header.BTHLen+tc.ibMTU)
					bth := header.BTH(ib)
					bth.SetOpcode(header.OpRCSendOnly)
					bth.SetPKey(0xffff)
					bth.SetDestQPN(17)
					bth.SetPSN(header.PSN(i))
					for j := header.BTHLen; j < len(ib); j++ {
						ib[j] = byte(i + j)
					}
					sent = append(sent, ib)
					sendIB(t, a, &e, ib)
					if i%32 == 31 || i == n-1 {
						require.NoError(t, a.Flush())
						receiveUpTo(i + 1)
					}
				}
			}
			// Ordinary traffic still flows while both links are open.
			assert.NoError(t, pair.A.Ping(pair.B.Addr4(), 2*time.Second))
			assert.NoError(t, netnstest.TCPEcho(&pair.B, &pair.A, pair.B.Addr6(), make([]byte, 100000), 5*time.Second))
			st, err := b.Stats()
			require.NoError(t, err)
			assert.Zero(t, st.RxOversized+st.RxBadDesc, "receiver stats %+v", st)
			assert.Zero(t, st.Sockets[0].RxDropped, "receiver stats %+v", st)
			assert.Equal(t, uint64(600), st.Program.Steered, "receiver stats %+v", st)
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
		require.NoError(t, err)
	case <-time.After(2 * time.Second):
		require.Fail(t, "Wake did not interrupt Wait")
	}
	start := time.Now()
	require.NoError(t, l.Wait(30*time.Millisecond), "timed Wait")
	require.GreaterOrEqual(t, time.Since(start), 25*time.Millisecond, "timed Wait")
	require.NoError(t, l.Close())
	require.ErrorIs(t, l.Wait(0), roce.ErrLinkClosed, "Wait after Close")
	// The interface is as it was: no XDP program left.
	nl, err := pair.A.Link()
	require.NoError(t, err)
	if x := nl.Attrs().Xdp; x != nil {
		require.False(t, x.Attached, "XDP program %d left on the interface", x.ProgId)
	}
}

// Frames the kernel has not taken (copy mode refuses them while the
// driver's queue is full) must not wait for the next packet or timer: Wait
// returns soon so that the next Flush kicks them.
func TestXDPLinkWaitWithFramesQueued(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	l := openLinkT(t, &pair.A)
	frame := l.TxFrame()
	require.NotNil(t, frame)
	l.Send(frame[:60]) // queued until Flush
	done := make(chan error, 1)
	go func() { done <- l.Wait(-1) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(2 * time.Second):
		l.Wake()
		require.Fail(t, "Wait without limit slept with a frame queued")
	}
	st, err := l.Stats()
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.TxBusyWaits)
	require.NoError(t, l.Flush())
	require.NoError(t, l.Wait(time.Millisecond))
	st, err = l.Stats()
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.TxBusyWaits, "a Wait after the frame left")
}

func TestOpenErrors(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	err := pair.A.Do(func() error { _, err := Open("nosuch0", Config{}); return err })
	assert.ErrorIs(t, err, bpf.ErrNoInterface, "missing interface")
	first := openLinkT(t, &pair.A)
	_ = first
	err = pair.A.Do(func() error { _, err := Open(pair.A.Ifname, Config{}); return err })
	assert.ErrorIs(t, err, bpf.ErrXDPBusy, "second link on one interface")
	// A UMEM that cannot be had fails after the program was attached: the
	// program must be gone again.
	umem := netnstest.NewT(t, netnstest.Config{})
	err = umem.A.Do(func() error {
		_, err := Open(umem.A.Ifname, Config{Socket: xdp.Config{NumFrames: 1 << 26}})
		return err
	})
	assert.ErrorIs(t, err, xdp.ErrUMEM, "huge UMEM")
	assert.False(t, xdpAttached(t, &umem.A), "XDP program left on the interface after the UMEM failed")
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
	assert.ErrorIs(t, err, ErrLinkDown, "interface down")
	assert.False(t, xdpAttached(t, &down.A), "XDP program left on the interface that was down")
	// The first link still works after the refused second one.
	assert.True(t, xdpAttached(t, &pair.A), "the refused second link detached the first one's program")
}

// xdpAttached reports whether an XDP program is attached to e's interface.
func xdpAttached(t *testing.T, e *netnstest.End) bool {
	nl, _ := e.Link()
	return nl.Attrs().Xdp != nil && nl.Attrs().Xdp.Attached
}

// The link's per-frame path (TxFrame, Send, Flush, Receive) allocates nothing.
func TestXDPLinkHotPathAllocs(t *testing.T) {
	netnstest.Integration(t)
	for _, mtu := range []int{1500, 9000} {
		pair := netnstest.NewT(t, netnstest.Config{MTU: mtu})
		a, b := openLinkT(t, &pair.A), openLinkT(t, &pair.B)
		e := roce.Encap{SrcMAC: a.HardwareAddr(), DstMAC: b.HardwareAddr(), Src: pair.A.Addr4(), Dst: pair.B.Addr4(), HopLimit: 64, SrcPort: roce.SourcePort(1)}
		ib := make([]byte, header.BTHLen+mtu-100)
		header.BTH(ib).SetOpcode(header.OpRCSendOnly)
		received := 0
		onFrame := func(frame []byte) {
			if frame != nil {
				received++
			}
		}
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
		assert.Zero(t, testing.AllocsPerRun(2000, step), "MTU %d: allocations per frame", mtu)
		assert.NotZero(t, received, "MTU %d: nothing received", mtu)
	}
}

// Opening and closing links leaks no file descriptors (sockets, eventfds,
// BPF objects), once closed links are garbage.
func TestXDPLinkNoFDLeak(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	count := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return len(entries)
	}
	cycle := func() {
		var l *Link
		require.NoError(t, pair.A.Do(func() (err error) {
			l, err = Open(pair.A.Ifname, Config{Addrs: []netip.Addr{pair.A.Addr4()}, Socket: xdp.Config{NumFrames: 64}})
			return err
		}))
		l.Wake()
		require.NoError(t, l.Close())
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
	assert.LessOrEqual(t, count(), before+2, "file descriptors after 20 open/close cycles, %d before", before)
}

// Split divides the sockets of a 4-queue veth: link i of 2 receives what
// arrives on queues i and i+2, and each of the peer's 4 links sends on its
// own queue, which on veth is the queue the frame arrives on.
func TestXDPLinkSplit(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{Queues: 4})
	a, b := openLinkT(t, &pair.A), openLinkT(t, &pair.B)
	require.Equal(t, 4, a.NumQueues())
	require.Equal(t, 4, b.NumQueues())
	_, err := a.Split(5)
	require.ErrorIs(t, err, roce.ErrSplit, "Split(5) of 4 queues")
	as, err := a.Split(2)
	require.NoError(t, err)
	_, err = a.Split(2)
	require.ErrorIs(t, err, roce.ErrSplit, "a second Split")
	bs, err := b.Split(4)
	require.NoError(t, err)
	e := roce.Encap{SrcMAC: b.HardwareAddr(), DstMAC: a.HardwareAddr(), Src: pair.B.Addr4(), Dst: pair.A.Addr4(), HopLimit: 64, SrcPort: roce.SourcePort(17)}
	for q, l := range bs {
		ib := make([]byte, 64)
		ib[0] = byte(header.OpRCSendOnly)
		ib[20] = byte(q) // the payload says which queue sent it
		sendIB(t, l, &e, ib)
		require.NoError(t, l.Flush())
	}
	got := map[int]int{} // sending queue -> receiving link
	var f roce.Frame
	for deadline := time.Now().Add(5 * time.Second); len(got) < 4 && time.Now().Before(deadline); {
		for i, l := range as {
			l.Receive(func(frame []byte) {
				if frame == nil {
					return // the end of a batch
				}
				if !assert.NoError(t, roce.ParseFrame(frame, &f), "link %d", i) {
					return
				}
				got[int(f.IB[20])] = i
			}, 64)
		}
		as[0].Wait(time.Millisecond)
	}
	for q := range 4 {
		i, ok := got[q]
		if assert.True(t, ok, "the frame sent on queue %d did not arrive", q) {
			assert.Equal(t, q%2, i, "the link the frame sent on queue %d arrived at", q)
		}
	}
	st, err := a.Stats()
	require.NoError(t, err)
	for q, s := range st.Sockets {
		assert.Equal(t, uint64(1), s.RxPackets, "frames the socket of queue %d received", q)
	}
}
