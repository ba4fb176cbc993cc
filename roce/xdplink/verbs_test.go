package xdplink_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	require.NoError(t, err)
	t.Cleanup(func() {
		s.dev.Close()
		s.link.Close()
	})
	return s
}

// createQP gives s a new PD, send and receive CQs of 1024 entries, and a
// QP on them created with init's other attributes.
func (s *xdpSide) createQP(t testing.TB, init *verbs.QPInitAttr) {
	t.Helper()
	s.pd = s.dev.AllocPD()
	var err error
	s.scq, err = s.dev.CreateCQ(1024, nil)
	require.NoError(t, err)
	s.rcq, err = s.dev.CreateCQ(1024, nil)
	require.NoError(t, err)
	init.SendCQ, init.RecvCQ = s.scq, s.rcq
	s.qp, err = s.pd.CreateQP(init)
	require.NoError(t, err)
}

func gidIndex(t testing.TB, s *xdpSide, a netip.Addr) int {
	t.Helper()
	for i, g := range s.nd.GIDs {
		if g == a {
			return i
		}
	}
	require.Failf(t, "address not in the GID table", "%v not in %v", a, s.nd.GIDs)
	return -1
}

// connectXDP creates a QP on each side and connects them over the given
// address family, with the peer's MAC from the kernel's neighbour table.
func connectXDP(t testing.TB, x, y *xdpSide, v6 bool, mtu verbs.MTU) {
	t.Helper()
	for _, s := range []*xdpSide{x, y} {
		s.createQP(t, &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4}})
		require.NoError(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1,
			AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
			verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPort|verbs.QPAttrPKeyIndex))
	}
	addr := func(s *xdpSide) netip.Addr { return sideAddr(s, v6) }
	resolvePeers(t, x, y, v6)
	for _, pr := range [][2]*xdpSide{{x, y}, {y, x}} {
		me, peer := pr[0], pr[1]
		peerGID, err := peer.dev.GID(gidIndex(t, peer, addr(peer)))
		require.NoError(t, err)
		require.NoError(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: mtu, DestQPN: peer.qp.QPN(),
			RQPSN: 100, MaxDestRdAtomic: 16, MinRNRTimer: 1,
			AV: verbs.AddressVector{DGID: peerGID, SGIDIndex: uint8(gidIndex(t, me, addr(me))), HopLimit: 64}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
	}
	for _, s := range []*xdpSide{x, y} {
		require.NoError(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 100, Timeout: 14, RetryCnt: 7,
			RNRRetry: 7, MaxRdAtomic: 16},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
				verbs.QPAttrMaxQPRdAtomic))
	}
}

// sideAddr returns s's IPv6 or IPv4 address.
func sideAddr(s *xdpSide, v6 bool) netip.Addr {
	if v6 {
		return s.end.Addr6()
	}
	return s.end.Addr4()
}

// resolvePeers gives each side the other's MAC address from the kernel's
// neighbour table.
func resolvePeers(t testing.TB, x, y *xdpSide, v6 bool) {
	t.Helper()
	for _, pr := range [][2]*xdpSide{{x, y}, {y, x}} {
		me, peer := pr[0], pr[1]
		var mac [6]byte
		require.NoError(t, me.end.Do(func() (err error) {
			mac, err = xdplink.ResolveNeighbor(me.nd.Index, sideAddr(peer, v6), 3*time.Second)
			return err
		}))
		me.dev.RoCE().SetNeighbor(sideAddr(peer, v6), mac)
	}
}

// linkMTUs are the link MTUs the tests run on, each with the largest IB MTU
// that fits it.
var linkMTUs = []struct {
	linkMTU int
	mtu     verbs.MTU
}{{1500, verbs.MTU1024}, {9000, verbs.MTU4096}}

// regWrite registers src at x as the source and dst at y as the target of
// RDMA WRITEs.
func regWrite(t testing.TB, x, y *xdpSide, src, dst []byte) (lmr, rmr *verbs.MR) {
	t.Helper()
	lmr, err := x.pd.RegMR(src, verbs.AccessLocalWrite)
	require.NoError(t, err)
	rmr, err = y.pd.RegMR(dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	return lmr, rmr
}

func waitWC(t testing.TB, cq *verbs.CQ, id uint64) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	n, err := cq.Wait(ctx, wc[:])
	require.NoError(t, err, "waiting for completion %d", id)
	require.Equal(t, 1, n, "waiting for completion %d", id)
	require.Equal(t, verbs.WCSuccess, wc[0].Status, "completion %+v, want success of %d", wc[0], id)
	require.Equal(t, id, wc[0].WRID, "completion %+v, want success of %d", wc[0], id)
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
	for _, tc := range linkMTUs {
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
						require.NoError(t, err)
						rmr, err := y.pd.RegMR(rbuf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
						require.NoError(t, err)
						wr := &verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled,
							SGL: []verbs.SGE{lmr.SGE(guard, size)}}
						if op == verbs.WRSend {
							require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: id, SGL: []verbs.SGE{rmr.SGE(guard, size)}}))
						} else {
							wr.RemoteAddr, wr.RKey = rmr.Addr()+guard, rmr.RKey()
						}
						require.NoError(t, x.qp.PostSend(wr))
						wc := waitWC(t, x.scq, id)
						require.Equal(t, size, int(wc.ByteLen), "%v %d bytes: completion's byte count", op, size)
						if op == verbs.WRSend {
							waitWC(t, y.rcq, id)
						}
						lmr.Dereg()
						rmr.Dereg()
						require.True(t, bytes.Equal(want, dst), "%v of %d bytes: data differs", op, size)
					}
				}

				// Atomics: FETCH_AND_ADD then COMPARE_AND_SWAP on one 8-byte word.
				lbuf, rbuf := make([]byte, 8), make([]byte, 8)
				binary.NativeEndian.PutUint64(rbuf, 40)
				lmr, _ := x.pd.RegMR(lbuf, verbs.AccessLocalWrite)
				rmr, _ := y.pd.RegMR(rbuf, verbs.AccessLocalWrite|verbs.AccessRemoteAtomic)
				id++
				require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: id, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{lmr.SGE(0, 8)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey(), CompareAdd: 2}))
				waitWC(t, x.scq, id)
				require.Equal(t, uint64(40), binary.NativeEndian.Uint64(lbuf), "fetch-and-add's original value")
				id++
				require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: id, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{lmr.SGE(0, 8)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey(), CompareAdd: 42, Swap: 7}))
				waitWC(t, x.scq, id)
				rmr.Dereg()
				require.Equal(t, uint64(42), binary.NativeEndian.Uint64(lbuf), "compare-and-swap's original value")
				require.Equal(t, uint64(7), binary.NativeEndian.Uint64(rbuf), "memory after compare-and-swap")

				assert.NoError(t, <-tcpDone, "TCP beside softnic")
				assert.NoError(t, pair.A.Ping(pair.B.Addr6(), 2*time.Second), "ping beside softnic")
				for _, s := range []*xdpSide{x, y} {
					st := s.dev.RoCE()
					assert.Zero(t, st.Counters().Rx.BadICRC.Load(), "%s: frames with a bad ICRC", s.end.Namespace)
					ls, err := s.link.Stats()
					require.NoError(t, err)
					assert.NotZero(t, ls.Program.Steered, "%s: nothing went through AF_XDP: %+v", s.end.Namespace, ls)
					assert.NotZero(t, ls.Sockets[0].RxPackets, "%s: nothing went through AF_XDP: %+v", s.end.Namespace, ls)
					t.Logf("%s: program %+v, link staged %d, joined %d", s.end.Namespace, ls.Program, ls.TxStaged, ls.RxJoined)
					// veth is copy mode: frames of several chunks are built
					// and delivered in place (contiguous layout); only one
					// wrapping around the receive area is joined.
					assert.Zero(t, ls.TxStaged, "%s: frames staged", s.end.Namespace)
					assert.LessOrEqual(t, ls.RxJoined, ls.Sockets[0].RxPackets/20, "%s: frames joined of %d", s.end.Namespace, ls.Sockets[0].RxPackets)
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
		require.Equal(t, 2, s.dev.RoCE().Engines(), "%s: engines on 2 queues", s.end.Namespace)
	}
	const conns, size = 16, 256 << 10
	perEngine := [2]int{}
	for i := range conns {
		connectXDP(t, x, y, false, verbs.MTU4096)
		perEngine[x.qp.EngineIndex()]++
		src, dst := make([]byte, size), make([]byte, size)
		pattern(src, byte(i))
		lmr, rmr := regWrite(t, x, y, src, dst)
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{lmr.SGE(0, size)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
		waitWC(t, x.scq, uint64(i))
		rmr.Dereg() // orders the engines' writes before the comparison
		require.True(t, bytes.Equal(src, dst), "connection %d: data differs", i)
	}
	t.Logf("connections per engine: %v", perEngine)
	for _, s := range []*xdpSide{x, y} {
		for k, e := range s.dev.RoCE().Group().Engines() {
			assert.NotZero(t, e.Ctr.TxPackets.Load(), "%s: engine %d sent nothing", s.end.Namespace, k)
			assert.NotZero(t, e.Ctr.RxPackets.Load(), "%s: engine %d received nothing", s.end.Namespace, k)
		}
		assert.Zero(t, s.dev.Counters().Forwarded.Load(), "%s: packets that arrived at another engine than their QP's", s.end.Namespace)
		ls, err := s.link.Stats()
		require.NoError(t, err)
		for q, ss := range ls.Sockets {
			assert.NotZero(t, ss.RxPackets, "%s: queue %d's socket received nothing", s.end.Namespace, q)
			assert.NotZero(t, ss.TxPackets, "%s: queue %d's socket sent nothing", s.end.Namespace, q)
		}
	}
}

// BenchmarkVerbsOverXDP measures RDMA WRITE throughput between two softnic
// devices over AF_XDP on a veth pair (64 KiB messages, 16 in flight): the
// figure to compare with bench/xdpblast's raw ceiling.
func BenchmarkVerbsOverXDP(b *testing.B) {
	netnstest.Integration(b)
	for _, tc := range linkMTUs {
		b.Run(fmt.Sprintf("write64KiB/link%d-ib%d", tc.linkMTU, tc.mtu.Bytes()), func(b *testing.B) {
			pair := netnstest.NewT(b, netnstest.Config{MTU: tc.linkMTU})
			x, y := openXDPSide(b, &pair.A), openXDPSide(b, &pair.B)
			connectXDP(b, x, y, false, tc.mtu)
			const size, window = 64 << 10, 16
			lbuf, rbuf := make([]byte, size), make([]byte, size)
			lmr, rmr := regWrite(b, x, y, lbuf, rbuf)
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
					require.NoError(b, x.qp.PostSend(wr))
					posted++
				}
				n, err := x.scq.Wait(ctx, wcs[:])
				require.NoError(b, err)
				for _, wc := range wcs[:n] {
					if wc.Status != verbs.WCSuccess { // no testify call per completion: it would allocate
						require.Failf(b, "completion failed", "%+v", wc)
					}
				}
				done += n
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)*size*8/b.Elapsed().Seconds()/1e9, "Gb/s")
		})
	}
}
