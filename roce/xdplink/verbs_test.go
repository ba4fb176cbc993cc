package xdplink_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/roce/xdplink"
	"github.com/softnic/softnic/verbs"
)

// xdpSide is one softnic device on an AF_XDP link in a namespace.
type xdpSide struct {
	end  *netnstest.End
	link *xdplink.Link
	dev  *verbs.Device
	nd   *xdplink.Netdev
	pd   *verbs.PD
	scq  *verbs.CQ
	rcq  *verbs.CQ
	qp   *verbs.QP
}

func openXDPSide(t testing.TB, e *netnstest.End) *xdpSide {
	t.Helper()
	return openXDPSideEngines(t, e, 0)
}

// openXDPSideEngines is openXDPSide with the device run by engines
// engines (verbs.Config.Engines).
func openXDPSideEngines(t testing.TB, e *netnstest.End, engines int) *xdpSide {
	t.Helper()
	s := &xdpSide{end: e}
	err := e.Do(func() (err error) {
		if s.nd, err = xdplink.LookupNetdev(e.Ifname); err != nil {
			return err
		}
		if s.link, err = xdplink.Open(e.Ifname, xdplink.Config{Addrs: s.nd.GIDs}); err != nil {
			return err
		}
		s.dev, err = verbs.Open(s.link, verbs.Config{Addrs: s.nd.GIDs, Engines: engines})
		if err != nil {
			s.link.Close()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.dev.Close()
		s.link.Close()
	})
	return s
}

func gidIndex(t testing.TB, s *xdpSide, a netip.Addr) int {
	t.Helper()
	for i, g := range s.nd.GIDs {
		if g == a {
			return i
		}
	}
	t.Fatalf("%v not in the GID table %v", a, s.nd.GIDs)
	return -1
}

// connectXDP creates a QP on each side and connects them over the given
// address family, with the peer's MAC from the kernel's neighbour table.
func connectXDP(t testing.TB, x, y *xdpSide, v6 bool, mtu verbs.MTU) {
	t.Helper()
	for _, s := range []*xdpSide{x, y} {
		s.pd = s.dev.AllocPD()
		var err error
		if s.scq, err = s.dev.CreateCQ(1024, nil); err != nil {
			t.Fatal(err)
		}
		if s.rcq, err = s.dev.CreateCQ(1024, nil); err != nil {
			t.Fatal(err)
		}
		if s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.scq, RecvCQ: s.rcq, Cap: verbs.QPCap{
			MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4}}); err != nil {
			t.Fatal(err)
		}
		if err := s.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1,
			AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
			verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPort|verbs.QPAttrPKeyIndex); err != nil {
			t.Fatal(err)
		}
	}
	addr := func(s *xdpSide) netip.Addr {
		if v6 {
			return s.end.Addr6()
		}
		return s.end.Addr4()
	}
	for _, pr := range [][2]*xdpSide{{x, y}, {y, x}} {
		me, peer := pr[0], pr[1]
		var mac [6]byte
		if err := me.end.Do(func() (err error) {
			mac, err = xdplink.ResolveNeighbor(me.nd.Index, addr(peer), 3*time.Second)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		me.dev.RoCE().SetNeighbor(addr(peer), mac)
		peerGID, err := peer.dev.GID(gidIndex(t, peer, addr(peer)))
		if err != nil {
			t.Fatal(err)
		}
		if err := me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: mtu, DestQPN: peer.qp.QPN(),
			RQPSN: 100, MaxDestRdAtomic: 16, MinRNRTimer: 1,
			AV: verbs.AddressVector{DGID: peerGID, SGIDIndex: uint8(gidIndex(t, me, addr(me))), HopLimit: 64}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*xdpSide{x, y} {
		if err := s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 100, Timeout: 14, RetryCnt: 7,
			RNRRetry: 7, MaxRdAtomic: 16},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
				verbs.QPAttrMaxQPRdAtomic); err != nil {
			t.Fatal(err)
		}
	}
}

func waitWC(t testing.TB, cq *verbs.CQ, id uint64) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	n, err := cq.Wait(ctx, wc[:])
	if err != nil || n != 1 {
		t.Fatalf("waiting for completion %d: %d, %v", id, n, err)
	}
	if wc[0].Status != verbs.WCSuccess || wc[0].WRID != id {
		t.Fatalf("completion %+v, want success of %d", wc[0], id)
	}
	return wc[0]
}

func pattern(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7+i>>8) ^ seed
	}
}

// Every verbs operation between two softnic devices over real AF_XDP
// sockets, with IB MTU 1024 on a 1500-byte link and IB MTU 4096 on a
// 9000-byte link, over IPv4 and IPv6 GIDs, while ping and TCP share the veth.
func TestVerbsOverXDP(t *testing.T) {
	netnstest.Integration(t)
	for _, tc := range []struct {
		linkMTU int
		mtu     verbs.MTU
	}{{1500, verbs.MTU1024}, {9000, verbs.MTU4096}} {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("link%d-ib%d-v6=%v", tc.linkMTU, tc.mtu.Bytes(), v6), func(t *testing.T) {
				pair := netnstest.NewT(t, netnstest.Config{MTU: tc.linkMTU})
				x, y := openXDPSide(t, &pair.A), openXDPSide(t, &pair.B)
				connectXDP(t, x, y, v6, tc.mtu)

				// Kernel traffic alongside: a TCP echo running during the transfers.
				tcpDone := make(chan error, 1)
				go func() {
					tcpDone <- netnstest.TCPEcho(&pair.B, &pair.A, pair.B.Addr4(), bytes.Repeat([]byte("k"), 1<<20), 10*time.Second)
				}()

				m := tc.mtu.Bytes()
				const guard = 64
				id := uint64(0)
				for _, size := range []int{0, 1, m - 1, m, m + 1, 3*m + 5, 256 << 10} {
					for _, op := range []verbs.WROpcode{verbs.WRSend, verbs.WRRDMAWrite, verbs.WRRDMARead} {
						id++
						lbuf := make([]byte, size+2*guard)
						rbuf := make([]byte, size+2*guard)
						src, dst := lbuf, rbuf
						if op == verbs.WRRDMARead {
							src, dst = rbuf, lbuf
						}
						// Fill before registering and compare after
						// deregistering: both run on the engine goroutine,
						// which orders these accesses with the engine's own
						// (the race detector cannot see through the wire).
						pattern(src, byte(id))
						pattern(dst, ^byte(id))
						want := append([]byte(nil), dst...)
						copy(want[guard:guard+size], src[guard:guard+size])
						lmr, err := x.pd.RegMR(lbuf, verbs.AccessLocalWrite)
						if err != nil {
							t.Fatal(err)
						}
						rmr, err := y.pd.RegMR(rbuf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
						if err != nil {
							t.Fatal(err)
						}
						wr := &verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled,
							SGL: []verbs.SGE{lmr.SGE(guard, size)}}
						if op == verbs.WRSend {
							if err := y.qp.PostRecv(&verbs.RecvWR{ID: id, SGL: []verbs.SGE{rmr.SGE(guard, size)}}); err != nil {
								t.Fatal(err)
							}
						} else {
							wr.RemoteAddr, wr.RKey = rmr.Addr()+guard, rmr.RKey()
						}
						if err := x.qp.PostSend(wr); err != nil {
							t.Fatal(err)
						}
						if wc := waitWC(t, x.scq, id); int(wc.ByteLen) != size {
							t.Fatalf("%v %d bytes: completion says %d", op, size, wc.ByteLen)
						}
						if op == verbs.WRSend {
							waitWC(t, y.rcq, id)
						}
						lmr.Dereg()
						rmr.Dereg()
						if !bytes.Equal(want, dst) {
							t.Fatalf("%v of %d bytes: data differs", op, size)
						}
					}
				}

				// Atomics: FETCH_AND_ADD then COMPARE_AND_SWAP on one 8-byte word.
				lbuf, rbuf := make([]byte, 8), make([]byte, 8)
				binary.NativeEndian.PutUint64(rbuf, 40)
				lmr, _ := x.pd.RegMR(lbuf, verbs.AccessLocalWrite)
				rmr, _ := y.pd.RegMR(rbuf, verbs.AccessLocalWrite|verbs.AccessRemoteAtomic)
				id++
				if err := x.qp.PostSend(&verbs.SendWR{ID: id, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{lmr.SGE(0, 8)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey(), CompareAdd: 2}); err != nil {
					t.Fatal(err)
				}
				waitWC(t, x.scq, id)
				if old := binary.NativeEndian.Uint64(lbuf); old != 40 {
					t.Fatalf("fetch-and-add returned %d, want 40", old)
				}
				id++
				if err := x.qp.PostSend(&verbs.SendWR{ID: id, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{lmr.SGE(0, 8)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey(), CompareAdd: 42, Swap: 7}); err != nil {
					t.Fatal(err)
				}
				waitWC(t, x.scq, id)
				rmr.Dereg()
				if old, now := binary.NativeEndian.Uint64(lbuf), binary.NativeEndian.Uint64(rbuf); old != 42 || now != 7 {
					t.Fatalf("compare-and-swap: returned %d (want 42), memory %d (want 7)", old, now)
				}

				if err := <-tcpDone; err != nil {
					t.Errorf("TCP beside softnic: %v", err)
				}
				if err := pair.A.Ping(pair.B.Addr6(), 2*time.Second); err != nil {
					t.Errorf("ping beside softnic: %v", err)
				}
				for _, s := range []*xdpSide{x, y} {
					st := s.dev.RoCE()
					if bad := st.Counters().Rx.BadICRC.Load(); bad != 0 {
						t.Errorf("%s: %d frames with a bad ICRC", s.end.Namespace, bad)
					}
					ls, err := s.link.Stats()
					if err != nil {
						t.Fatal(err)
					}
					if ls.Program.Steered == 0 || ls.Sockets[0].RxPackets == 0 {
						t.Errorf("%s: nothing went through AF_XDP: %+v", s.end.Namespace, ls)
					}
					t.Logf("%s: program %+v, link staged %d, joined %d", s.end.Namespace, ls.Program, ls.TxStaged, ls.RxJoined)
					// veth is copy mode: frames of several chunks are built
					// and delivered in place (contiguous layout); only one
					// wrapping around the receive area is joined.
					if ls.TxStaged != 0 || ls.RxJoined > ls.Sockets[0].RxPackets/20 {
						t.Errorf("%s: %d frames staged, %d of %d joined", s.end.Namespace, ls.TxStaged, ls.RxJoined, ls.Sockets[0].RxPackets)
					}
				}
			})
		}
	}
}

// On a veth pair of two queues each device runs two engines, one per
// queue: connections spread over both, a frame sent on queue k arrives on
// the peer's queue k, and each connection stays on one engine a side, so
// nothing is forwarded between engines.
func TestVerbsOverXDPMultiQueue(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{MTU: 9000, Queues: 2})
	x, y := openXDPSideEngines(t, &pair.A, 2), openXDPSideEngines(t, &pair.B, 2)
	for _, s := range []*xdpSide{x, y} {
		if n := s.dev.RoCE().Engines(); n != 2 {
			t.Fatalf("%s: %d engines on 2 queues", s.end.Namespace, n)
		}
	}
	const conns, size = 16, 256 << 10
	perEngine := [2]int{}
	for i := range conns {
		connectXDP(t, x, y, false, verbs.MTU4096)
		perEngine[x.qp.Engine()]++
		src, dst := make([]byte, size), make([]byte, size)
		pattern(src, byte(i))
		lmr, err := x.pd.RegMR(src, verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		rmr, err := y.pd.RegMR(dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{lmr.SGE(0, size)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, x.scq, uint64(i))
		rmr.Dereg() // orders the engines' writes before the comparison
		if !bytes.Equal(src, dst) {
			t.Fatalf("connection %d: data differs", i)
		}
	}
	t.Logf("connections per engine: %v", perEngine)
	for _, s := range []*xdpSide{x, y} {
		for k, e := range s.dev.RoCE().Group().Engines() {
			if e.Ctr.TxPackets.Load() == 0 || e.Ctr.RxPackets.Load() == 0 {
				t.Errorf("%s: engine %d sent %d and received %d packets", s.end.Namespace, k, e.Ctr.TxPackets.Load(), e.Ctr.RxPackets.Load())
			}
		}
		if f := s.dev.Counters().Forwarded.Load(); f != 0 {
			t.Errorf("%s: %d packets arrived at another engine than their QP's", s.end.Namespace, f)
		}
		ls, err := s.link.Stats()
		if err != nil {
			t.Fatal(err)
		}
		for q, ss := range ls.Sockets {
			if ss.RxPackets == 0 || ss.TxPackets == 0 {
				t.Errorf("%s: queue %d's socket received %d and sent %d frames", s.end.Namespace, q, ss.RxPackets, ss.TxPackets)
			}
		}
	}
}

// BenchmarkVerbsOverXDP measures RDMA WRITE throughput between two softnic
// devices over AF_XDP on a veth pair (64 KiB messages, 16 in flight): the
// figure to compare with bench/xdpblast's raw ceiling.
func BenchmarkVerbsOverXDP(b *testing.B) {
	netnstest.Integration(b)
	for _, tc := range []struct {
		linkMTU int
		mtu     verbs.MTU
	}{{1500, verbs.MTU1024}, {9000, verbs.MTU4096}} {
		b.Run(fmt.Sprintf("write64KiB/link%d-ib%d", tc.linkMTU, tc.mtu.Bytes()), func(b *testing.B) {
			pair := netnstest.NewT(b, netnstest.Config{MTU: tc.linkMTU})
			x, y := openXDPSide(b, &pair.A), openXDPSide(b, &pair.B)
			connectXDP(b, x, y, false, tc.mtu)
			const size, window = 64 << 10, 16
			lbuf, rbuf := make([]byte, size), make([]byte, size)
			lmr, err := x.pd.RegMR(lbuf, verbs.AccessLocalWrite)
			if err != nil {
				b.Fatal(err)
			}
			rmr, err := y.pd.RegMR(rbuf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			if err != nil {
				b.Fatal(err)
			}
			wr := &verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{lmr.SGE(0, size)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}
			var wcs [window]verbs.WC
			ctx := context.Background()
			b.SetBytes(size)
			b.ResetTimer()
			posted, done := 0, 0
			for done < b.N {
				for posted < b.N && posted-done < window {
					wr.ID = uint64(posted)
					if err := x.qp.PostSend(wr); err != nil {
						b.Fatal(err)
					}
					posted++
				}
				n, err := x.scq.Wait(ctx, wcs[:])
				if err != nil {
					b.Fatal(err)
				}
				for _, wc := range wcs[:n] {
					if wc.Status != verbs.WCSuccess {
						b.Fatalf("completion %+v", wc)
					}
				}
				done += n
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)*size*8/b.Elapsed().Seconds()/1e9, "Gb/s")
		})
	}
}
