package verbs_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// icrcCounts are frames by opcode and ICRC: FLUSHes with IBA's ICRC or
// rxe's variant, other frames, those of them failing IBA's check.
type icrcCounts struct {
	flushRxe, flushIBA   int
	others, othersBadIBA int
}

// wireICRCs counts the frames a tap sees.
type wireICRCs struct {
	mu sync.Mutex
	n  icrcCounts
}

func (w *wireICRCs) counts() icrcCounts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func (w *wireICRCs) tap(frame []byte) bool {
	var f roce.Frame
	strict := roce.ParseFrame(frame, &f)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case header.Opcode(f.IB[0]) != header.OpRCFlush:
		w.n.others++
		if strict != nil {
			w.n.othersBadIBA++
		}
	case strict == nil:
		w.n.flushIBA++
	case roce.ParseFrameRxeFlush(frame, &f) == nil && f.RxeFlushICRC:
		w.n.flushRxe++
	}
	return true
}

// TestRxeFlushICRC: two devices in rxe's FLUSH mode (Config.RxeFlushICRC)
// FLUSH each other: each FLUSH frame carries rxe's ICRC, the responder
// counts it in rx_flush_icrc_rxe, and every other frame keeps IBA's ICRC;
// a FLUSH of a region without FLUSH access is still refused.
func TestRxeFlushICRC(t *testing.T) { forEachMode(t, testRxeFlushICRC) }

func testRxeFlushICRC(t *testing.T, m mode) {
	o := flushOpts()
	p := newPairMode(t, m, memlink.Config{}, verbs.Config{RxeFlushICRC: true})
	x, y := newEndpoint(t, p.a, nil, o, nil), newEndpoint(t, p.b, nil, o, nil)
	connect(t, x, y, o)
	lmr, lbuf := regMR(t, x.pd, 64, allAccess)
	rmr, rbuf := regMR(t, y.pd, 64, allAccess|verbs.AccessFlushGlobal)
	noFlush, _ := regMR(t, y.pd, 64, allAccess)
	var req, resp wireICRCs
	p.la.SetTap(req.tap)
	p.lb.SetTap(resp.tap)
	fill(lbuf, 5)
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{lmr.SGE(0, 64)},
		RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled,
		RemoteAddr: rmr.Addr(), RKey: rmr.RKey(), FlushLength: 64, FlushType: verbs.FlushGlobal, FlushLevel: verbs.FlushRange}))
	require.Equal(t, verbs.WCFlush, waitOK(t, x.scq, 2).Opcode)
	require.Equal(t, lbuf, rbuf)
	refusal(t, x, &verbs.SendWR{ID: 3, Opcode: verbs.WRFlush, RemoteAddr: noFlush.Addr(), RKey: noFlush.RKey(),
		FlushType: verbs.FlushGlobal, FlushLevel: verbs.FlushMR}, verbs.WCRemAccessErr)
	p.la.SetTap(nil)
	p.lb.SetTap(nil)
	require.Equal(t, icrcCounts{flushRxe: 2, others: 1}, req.counts(), "the requester's frames: a WRITE, two FLUSHes")
	// The responder's: the FLUSH's READ RESPONSE ONLY, the NAK, and an ACK
	// of the WRITE unless it came with the FLUSH (coalesced).
	rc := resp.counts()
	require.GreaterOrEqual(t, rc.others, 2)
	require.Equal(t, icrcCounts{others: rc.others}, rc, "the responder's frames keep IBA's ICRC")
	rx := &p.engB.RoCE().Counters().Rx
	require.Equal(t, uint64(2), rx.FlushICRCRxe.Load())
	require.Zero(t, rx.BadICRC.Load())
	require.Equal(t, uint64(3), rx.Good.Load())
}

// TestRxeFlushICRCAgainstIBA: between a device in rxe's FLUSH mode and
// one without, the one in the mode takes the other's FLUSHes (IBA's ICRC)
// but the other drops its FLUSHes as bad ICRCs, so that its requester
// runs out of retries; a WRITE works either way. The mode is for rxe
// peers only.
func TestRxeFlushICRCAgainstIBA(t *testing.T) {
	for _, rxeRequests := range []bool{true, false} {
		la, lb := memlink.Pair(memlink.Config{})
		a, b := openPair(t, la, lb, verbs.Config{RxeFlushICRC: rxeRequests}, verbs.Config{RxeFlushICRC: !rxeRequests})
		o := flushOpts()
		o.retry, o.timeout = 1, 1
		x, y := newEndpoint(t, a, nil, o, nil), newEndpoint(t, b, nil, o, nil)
		connect(t, x, y, o)
		lmr, _ := regMR(t, x.pd, 64, allAccess)
		rmr, _ := regMR(t, y.pd, 64, allAccess|verbs.AccessFlushGlobal)
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{lmr.SGE(0, 64)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
		waitOK(t, x.scq, 1)
		flush := &verbs.SendWR{ID: 2, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RemoteAddr: rmr.Addr(),
			RKey: rmr.RKey(), FlushType: verbs.FlushGlobal, FlushLevel: verbs.FlushMR}
		rx := &b.RoCE().Counters().Rx
		if !rxeRequests {
			require.NoError(t, x.qp.PostSend(flush))
			require.Equal(t, verbs.WCFlush, waitOK(t, x.scq, 2).Opcode, "IBA's FLUSH to a device in the mode")
			require.Zero(t, rx.FlushICRCRxe.Load())
			continue
		}
		refusal(t, x, flush, verbs.WCRetryExcErr)
		// The requester gives up after its short timeout, which may be
		// before the other engine took the frames it sent.
		require.Eventually(t, func() bool { return rx.BadICRC.Load() >= 2 }, 10*time.Second, time.Millisecond,
			"the FLUSH in the mode and its one retry, dropped")
		require.Equal(t, uint64(2), rx.BadICRC.Load(), "the FLUSH in the mode and its one retry, dropped")
	}
}
