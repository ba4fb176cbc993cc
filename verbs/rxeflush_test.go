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

// icrcCounts are a tap's packets by opcode and ICRC, each PSN counted
// once (a retransmission is the same packet): FLUSHes with IBA's ICRC or
// rxe's variant, other packets, those of them failing IBA's check.
type icrcCounts struct {
	flushRxe, flushIBA   int
	others, othersBadIBA int
}

// wireICRCs counts the frames a tap sees: every frame, retransmissions
// included, for the receiver's counters, and the distinct packets seen,
// from which counts derives icrcCounts.
type wireICRCs struct {
	mu             sync.Mutex
	seen           map[icrcKey]bool
	frames         int
	flushRxeFrames int
}

// icrcKey names one packet: its PSN and what the tap made of it.
type icrcKey struct {
	psn  header.PSN
	kind int
}

func (w *wireICRCs) counts() (icrcCounts, int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n icrcCounts
	for k := range w.seen {
		switch k.kind {
		case kindFlushRxe:
			n.flushRxe++
		case kindFlushIBA:
			n.flushIBA++
		case kindOtherBadIBA:
			n.othersBadIBA++
			n.others++
		default:
			n.others++
		}
	}
	return n, w.frames, w.flushRxeFrames
}

func (w *wireICRCs) tap(frame []byte) bool {
	var f roce.Frame
	strict := roce.ParseFrame(frame, &f)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.frames++
	kind := kindOther
	switch {
	case header.Opcode(f.IB[0]) != header.OpRCFlush:
		if strict != nil {
			kind = kindOtherBadIBA
		}
	case strict == nil:
		kind = kindFlushIBA
	case roce.ParseFrameRxeFlush(frame, &f) == nil && f.RxeFlushICRC:
		kind = kindFlushRxe
		w.flushRxeFrames++
	default:
		return true
	}
	if w.seen == nil {
		w.seen = map[icrcKey]bool{}
	}
	w.seen[icrcKey{header.BTH(f.IB).PSN(), kind}] = true
	return true
}

// The kinds of packet a tap tells apart.
const (
	kindOther = iota
	kindOtherBadIBA
	kindFlushIBA
	kindFlushRxe
)

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
	rq, frames, flushRxeFrames := req.counts()
	require.Equal(t, icrcCounts{flushRxe: 2, others: 1}, rq, "the requester's packets: a WRITE, two FLUSHes")
	// The responder's: the FLUSH's READ RESPONSE ONLY, the NAK, and an ACK
	// of the WRITE unless it came with the FLUSH (coalesced).
	rc, _, _ := resp.counts()
	require.GreaterOrEqual(t, rc.others, 2)
	require.Equal(t, icrcCounts{others: rc.others}, rc, "the responder's frames keep IBA's ICRC")
	// memlink loses nothing: the responder took every frame the tap saw,
	// a retransmission (a slow machine's timeout) included.
	rx := &p.engB.RoCE().Counters().Rx
	require.Equal(t, uint64(flushRxeFrames), rx.FlushICRCRxe.Load())
	require.Zero(t, rx.BadICRC.Load())
	require.Equal(t, uint64(frames), rx.Good.Load())
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
		// One retry, each after 67 ms: long enough that a loaded machine's
		// WRITE is not retried out, short enough for the FLUSH's refusal.
		o.retry, o.timeout = 1, 14
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
