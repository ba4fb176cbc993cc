package verbs_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

func TestQPStateMachine(t *testing.T) {
	p := newPair(t, memlink.Config{})
	o := defaultOpts()
	x := newEndpoint(t, p.a, nil, o, nil)
	y := newEndpoint(t, p.b, nil, o, nil)
	q := x.qp
	require.Equal(t, verbs.QPSReset, q.State())

	rtr := &verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: y.qp.QPN(), RQPSN: 1,
		MaxDestRdAtomic: 4, MinRNRTimer: 12, AV: verbs.AddressVector{DGID: y.gid}}
	rtrMask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
		verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	rts := &verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 2, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}
	rtsMask := verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
		verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic

	// Skipping states is refused and changes nothing.
	require.ErrorIs(t, q.Modify(rtr, rtrMask), verbs.ErrInvalidState)
	require.ErrorIs(t, q.Modify(rts, rtsMask), verbs.ErrInvalidState)
	require.Equal(t, verbs.QPSReset, q.State())
	// Posting sends or receives in RESET is refused.
	require.ErrorIs(t, q.PostSend(&verbs.SendWR{Opcode: verbs.WRSend}), verbs.ErrInvalidState)
	require.ErrorIs(t, q.PostRecv(&verbs.RecvWR{}), verbs.ErrInvalidState)

	require.NoError(t, q.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: allAccess &^ verbs.AccessLocalWrite},
		verbs.QPAttrState|verbs.QPAttrAccessFlags))
	require.Equal(t, verbs.QPSInit, q.State())
	// RTR needs its attributes, in range.
	require.ErrorIs(t, q.Modify(rtr, rtrMask&^verbs.QPAttrDestQPN), verbs.ErrInvalidArgument)
	bad := *rtr
	bad.PathMTU = 6
	require.ErrorIs(t, q.Modify(&bad, rtrMask), verbs.ErrInvalidArgument)
	bad = *rtr
	bad.AV.SGIDIndex = 3
	require.ErrorIs(t, q.Modify(&bad, rtrMask), verbs.ErrInvalidArgument)
	require.ErrorIs(t, q.Modify(rtr, rtrMask|verbs.QPAttrSQPSN), verbs.ErrInvalidArgument, "SQ PSN belongs to RTS")
	require.Equal(t, verbs.QPSInit, q.State())
	// Receives may be posted from INIT on, sends not before RTS.
	require.NoError(t, q.PostRecv(&verbs.RecvWR{ID: 77}))
	require.NoError(t, q.Modify(rtr, rtrMask))
	require.ErrorIs(t, q.PostSend(&verbs.SendWR{Opcode: verbs.WRSend}), verbs.ErrInvalidState)
	badRTS := *rts
	badRTS.RetryCnt = 8
	require.ErrorIs(t, q.Modify(&badRTS, rtsMask), verbs.ErrInvalidArgument)
	require.NoError(t, q.Modify(rts, rtsMask))
	a := q.Query()
	require.Equal(t, verbs.QPSRTS, a.State)
	require.Equal(t, verbs.MTU1024, a.PathMTU)
	require.Equal(t, y.qp.QPN(), a.DestQPN)
	require.Equal(t, uint8(14), a.Timeout)
	require.Equal(t, verbs.PSN(2), a.SQPSN)

	// RTS -> SQD -> RTS, RTS -> RTS with an optional attribute.
	require.NoError(t, q.Modify(&verbs.QPAttr{State: verbs.QPSSQD}, verbs.QPAttrState))
	require.Equal(t, verbs.QPSSQD, q.State())
	require.ErrorIs(t, q.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState), verbs.ErrInvalidState)
	require.NoError(t, q.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.QPAttrState))
	require.NoError(t, q.Modify(&verbs.QPAttr{State: verbs.QPSRTS, MinRNRTimer: 3}, verbs.QPAttrState|verbs.QPAttrMinRNRTimer))
	require.ErrorIs(t, q.Modify(&verbs.QPAttr{State: verbs.QPSRTS, PathMTU: verbs.MTU256}, verbs.QPAttrState|verbs.QPAttrPathMTU),
		verbs.ErrInvalidArgument)

	// ERR flushes posted receives; RESET then INIT starts over.
	require.NoError(t, q.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState))
	wc := waitWC(t, x.rcq)
	require.Equal(t, uint64(77), wc.WRID)
	require.Equal(t, verbs.WCWRFlushErr, wc.Status)
	// Work posted in ERR completes with a flush error.
	require.NoError(t, q.PostSend(&verbs.SendWR{ID: 78, Opcode: verbs.WRSend}))
	wc = waitWC(t, x.scq)
	require.Equal(t, uint64(78), wc.WRID)
	require.Equal(t, verbs.WCWRFlushErr, wc.Status)
	require.ErrorIs(t, q.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.QPAttrState), verbs.ErrInvalidState)
	require.NoError(t, q.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState))
	require.NoError(t, q.Modify(&verbs.QPAttr{State: verbs.QPSInit}, verbs.QPAttrState))
	require.Equal(t, verbs.QPSInit, q.State())
	require.NoError(t, q.Destroy())
}

func TestRNRRetryThenSuccess(t *testing.T) {
	o := defaultOpts()
	o.rnrRetry = 7 // forever
	o.minRNR = 1   // 10 µs
	_, x, y := connectedPair(t, memlink.Config{}, o)
	smr, sbuf := regMR(t, x.pd, 3000, allAccess)
	rmr, rbuf := regMR(t, y.pd, 3000, allAccess)
	fill(sbuf, 5)
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{smr.SGE(0, 3000)}}))
	// No receive yet: the responder answers RNR NAKs and nothing completes.
	require.Eventually(t, func() bool { return y.dev.Counters().TxRNRNAK.Load() >= 3 }, 5*time.Second, time.Millisecond)
	noWC(t, x.scq)
	require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: 2, SGL: []verbs.SGE{rmr.SGE(0, 3000)}}))
	waitOK(t, x.scq, 1)
	waitOK(t, y.rcq, 2)
	require.Equal(t, sbuf, rbuf)
	require.Equal(t, verbs.QPSRTS, x.qp.State())
}

func TestRNRRetryExhausted(t *testing.T) {
	o := defaultOpts()
	o.rnrRetry = 3
	o.minRNR = 2   // 20 µs
	o.timeout = 20 // 4 s: only RNR NAKs drive this test, never a timeout
	_, x, y := connectedPair(t, memlink.Config{}, o)
	smr, _ := regMR(t, x.pd, 100, allAccess)
	for i := range 4 {
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend,
			SGL: []verbs.SGE{smr.SGE(0, 100)}}))
	}
	wc := waitWC(t, x.scq)
	require.Equal(t, uint64(0), wc.WRID)
	require.Equal(t, verbs.WCRNRRetryExcErr, wc.Status)
	// The first try and three retries each met an RNR NAK.
	require.Equal(t, uint64(4), y.dev.Counters().TxRNRNAK.Load())
	for i := 1; i < 4; i++ {
		wc := waitWC(t, x.scq)
		require.Equal(t, uint64(i), wc.WRID)
		require.Equal(t, verbs.WCWRFlushErr, wc.Status)
	}
	require.Equal(t, verbs.QPSErr, x.qp.State())
	// The responder is fine: it only had no receive.
	require.Equal(t, verbs.QPSRTS, y.qp.State())
}

func TestSilentPeerRetryExceeded(t *testing.T) {
	o := defaultOpts()
	o.retry = 3
	o.timeout = 10 // 4.2 ms
	p, x, y := connectedPair(t, memlink.Config{}, o)
	smr, _ := regMR(t, x.pd, 10000, allAccess)
	rmr, _ := regMR(t, y.pd, 10000, allAccess)
	// One WRITE goes through, then the peer falls silent.
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 100, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{smr.SGE(0, 10000)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
	waitOK(t, x.scq, 100)
	before := x.dev.Counters().Timeouts.Load() // a loaded machine's retry
	p.lb.SetDown(true)
	start := time.Now()
	ops := []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead, verbs.WRSend, verbs.WRAtomicFetchAndAdd}
	for i, op := range ops {
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: op,
			SGL: []verbs.SGE{smr.SGE(0, 8)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
	}
	wc := waitWC(t, x.scq)
	require.Equal(t, uint64(0), wc.WRID)
	require.Equal(t, verbs.WCRetryExcErr, wc.Status)
	// The first transmission and three retries, each waiting a full timeout.
	require.Equal(t, before+4, x.dev.Counters().Timeouts.Load())
	require.GreaterOrEqual(t, time.Since(start), 4*4096*time.Nanosecond<<10)
	for i := 1; i < len(ops); i++ {
		wc := waitWC(t, x.scq)
		require.Equal(t, uint64(i), wc.WRID)
		require.Equal(t, verbs.WCWRFlushErr, wc.Status)
	}
	require.Equal(t, verbs.QPSErr, x.qp.State())
}

// TestRetransmitAfterLoss drops chosen packets so that each recovery path
// runs: PSN sequence NAK, lost ACK (timeout), lost READ response (gap).
func TestRetransmitAfterLoss(t *testing.T) {
	o := defaultOpts()
	o.timeout = 8 // 1 ms
	p, x, y := connectedPair(t, memlink.Config{}, o)
	var n int
	drop := map[int]bool{}
	tap := func(frame []byte) bool {
		n++
		return !drop[n]
	}
	for round, d := range []struct {
		dir string
		at  []int
	}{
		{"request", []int{2}},          // a middle packet: sequence NAK
		{"request", []int{16}},         // the last packet: timeout
		{"response", []int{1}},         // the (only) ACK, or the first READ response
		{"response", []int{3, 4, 5}},   // later responses
		{"request", []int{1, 2, 3, 9}}, // several holes
	} {
		for _, op := range dataOps {
			n = 0
			drop = map[int]bool{}
			for _, k := range d.at {
				drop[k] = true
			}
			if d.dir == "request" {
				p.la.SetTap(tap)
			} else {
				p.lb.SetTap(tap)
			}
			transfer(t, x, y, op, 16*1024, byte(round))
			p.la.SetTap(nil)
			p.lb.SetTap(nil)
		}
	}
	require.NotZero(t, x.dev.Counters().Retransmits.Load())
	require.NotZero(t, y.dev.Counters().TxNAKSeq.Load())
}

// TestImplicitAckByReadResponse loses the ACK of a WRITE; the READ response
// that follows acknowledges the WRITE implicitly, so nothing waits for the
// (long) retransmit timeout.
func TestImplicitAckByReadResponse(t *testing.T) {
	o := defaultOpts()
	o.timeout = 22 // 17 s: a timeout would fail the test's deadline
	p, x, y := connectedPair(t, memlink.Config{}, o)
	lmr, lbuf := regMR(t, x.pd, 128, allAccess)
	rmr, _ := regMR(t, y.pd, 128, allAccess)
	fill(lbuf[:64], 4)
	first := true
	p.lb.SetTap(func([]byte) bool {
		drop := first
		first = false
		return !drop
	})
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{lmr.SGE(0, 64)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{lmr.SGE(64, 64)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
	start := time.Now()
	waitOK(t, x.scq, 1)
	waitOK(t, x.scq, 2)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Equal(t, lbuf[:64], lbuf[64:])
	require.Zero(t, x.dev.Counters().Timeouts.Load())
	require.Zero(t, x.dev.Counters().Retransmits.Load())
	require.Equal(t, uint64(1), p.lb.Stats().Lost.Load())
}

// TestAddressVectorOnTheWire checks that the path attributes reach the
// frames: traffic class, hop limit, flow label, and the per-QP UDP source
// port.
func TestAddressVectorOnTheWire(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		la, lb := memlink.Pair(memlink.Config{})
		a1, a2 := addrA, addrB
		if v6 {
			a1, a2 = netip.MustParseAddr("fd00::a"), netip.MustParseAddr("fd00::b")
		}
		da, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{a1}})
		require.NoError(t, err)
		db, err := verbs.Open(lb, verbs.Config{Addrs: []netip.Addr{a2}})
		require.NoError(t, err)
		o := defaultOpts()
		x := newEndpoint(t, da, nil, o, nil)
		y := newEndpoint(t, db, nil, o, nil)
		connect(t, x, y, o)
		// Reconnect x's path with distinctive attributes: RESET and up again.
		require.NoError(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState))
		require.NoError(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: allAccess}, verbs.QPAttrState|verbs.QPAttrAccessFlags))
		require.NoError(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: y.qp.QPN(),
			RQPSN: y.sqPSN, MaxDestRdAtomic: 1, AV: verbs.AddressVector{DGID: y.gid, TrafficClass: 0x68, HopLimit: 7, FlowLabel: 0x12345}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
		require.NoError(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: x.sqPSN, Timeout: 10, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic))
		frames := make(chan roce.Frame, 16)
		la.SetTap(func(b []byte) bool {
			var f roce.Frame
			if roce.ParseFrame(b, &f) == nil {
				f.IB = nil
				select {
				case frames <- f:
				default:
				}
			}
			return true
		})
		lmr, _ := regMR(t, x.pd, 8, allAccess)
		rmr, _ := regMR(t, y.pd, 8, allAccess)
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{lmr.SGE(0, 8)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
		waitOK(t, x.scq, 1)
		f := <-frames
		require.Equal(t, uint8(0x68|2), f.TrafficClass, "the AV's DSCP, ECT(0)")
		require.Equal(t, uint8(7), f.HopLimit)
		require.Equal(t, a1, f.Src)
		require.Equal(t, a2, f.Dst)
		require.Equal(t, roce.SourcePort(x.qp.QPN()), f.SrcPort)
		if v6 {
			require.Equal(t, uint32(0x12345), f.FlowLabel)
		}
		da.Close()
		db.Close()
		la.Close()
		lb.Close()
	}
}
