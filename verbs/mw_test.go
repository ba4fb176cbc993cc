package verbs_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// mwWorld is a connected pair whose y side has a region with MW_BIND
// access that y's windows open to x.
type mwWorld struct {
	p          *testPair
	x, y       *endpoint
	lmr, rmr   *verbs.MR
	lbuf, rbuf []byte
}

func newMWWorld(t *testing.T, m mode) *mwWorld {
	o := defaultOpts()
	p, x, y := connectedPairMode(t, m, memlink.Config{}, o)
	w := &mwWorld{p: p, x: x, y: y}
	w.lmr, w.lbuf = regMR(t, x.pd, 8192, allAccess)
	w.rmr, w.rbuf = regMR(t, y.pd, 8192, allAccess|verbs.AccessMWBind)
	fill(w.lbuf, 3)
	return w
}

// bind2 binds the type 2 window mw on y's QP to n bytes at offset off of
// y's region and returns its rkey.
func (w *mwWorld) bind2(t *testing.T, mw *verbs.MW, off, n int, access verbs.Access) uint32 {
	t.Helper()
	rkey := verbs.IncRKey(mw.RKey())
	require.NoError(t, w.y.qp.PostSend(&verbs.SendWR{ID: 77, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled,
		Bind: verbs.MWBind{RKey: rkey, LKey: w.rmr.LKey(), Addr: w.rmr.Addr() + uint64(off), Length: uint64(n), Access: access}}))
	wc := waitOK(t, w.y.scq, 77)
	require.Equal(t, verbs.WCBindMW, wc.Opcode)
	return rkey
}

// op posts one signaled request from x and returns its completion.
func (w *mwWorld) op(t *testing.T, id uint64, op verbs.WROpcode, off, n int, raddr uint64, rkey uint32) verbs.WC {
	t.Helper()
	require.NoError(t, w.x.qp.PostSend(&verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{w.lmr.SGE(off, n)}, RemoteAddr: raddr, RKey: rkey}))
	wc := waitWC(t, w.x.scq)
	require.Equal(t, id, wc.WRID)
	return wc
}

// A type 2 window bound by a BIND_MW work request opens its range, with
// its rights, to its QP's peer: WRITE and READ inside it work, a WRITE
// past its end fails with a remote access error (and the QP with it).
func TestMWType2Access(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		w := newMWWorld(t, m)
		mw, err := w.y.pd.AllocMW(verbs.MWType2)
		require.NoError(t, err)
		defer mw.Dealloc()
		rkey := w.bind2(t, mw, 1024, 4096, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		base := w.rmr.Addr() + 1024
		require.Equal(t, verbs.WCSuccess, w.op(t, 1, verbs.WRRDMAWrite, 0, 3000, base+1000, rkey).Status)
		require.Equal(t, w.lbuf[:3000], w.rbuf[2024:5024])
		require.Equal(t, verbs.WCSuccess, w.op(t, 2, verbs.WRRDMARead, 4096, 4096, base, rkey).Status)
		require.Equal(t, w.rbuf[1024:5120], w.lbuf[4096:8192])
		// The region's own rkey still works; the window's does not reach
		// past the window.
		require.Equal(t, verbs.WCRemAccessErr, w.op(t, 3, verbs.WRRDMAWrite, 0, 16, base+4090, rkey).Status)
	})
}

// A type 2 window grants only the rights it was bound with: a READ of a
// write-only window fails, though the region allows remote reads.
func TestMWType2Rights(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		w := newMWWorld(t, m)
		mw, err := w.y.pd.AllocMW(verbs.MWType2)
		require.NoError(t, err)
		defer mw.Dealloc()
		rkey := w.bind2(t, mw, 0, 4096, verbs.AccessRemoteWrite)
		require.Equal(t, verbs.WCRemAccessErr, w.op(t, 1, verbs.WRRDMARead, 0, 8, w.rmr.Addr(), rkey).Status)
	})
}

// A type 2 window is reached through the QP it is bound to only, not
// through another QP of its PD.
func TestMWType2OtherQP(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		w := newMWWorld(t, m)
		o := defaultOpts()
		x2 := newEndpoint(t, w.p.a, w.x.pd, o, nil)
		y2 := newEndpoint(t, w.p.b, w.y.pd, o, nil)
		connect(t, x2, y2, o)
		mw, err := w.y.pd.AllocMW(verbs.MWType2)
		require.NoError(t, err)
		defer mw.Dealloc()
		rkey := w.bind2(t, mw, 0, 4096, verbs.AccessRemoteWrite)
		require.NoError(t, x2.qp.PostSend(&verbs.SendWR{ID: 9, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{w.lmr.SGE(0, 8)}, RemoteAddr: w.rmr.Addr(), RKey: rkey}))
		require.Equal(t, verbs.WCRemAccessErr, waitWC(t, x2.scq).Status)
		require.Equal(t, verbs.WCSuccess, w.op(t, 1, verbs.WRRDMAWrite, 0, 8, w.rmr.Addr(), rkey).Status)
	})
}

// LOCAL_INV on y's side invalidates y's window: x's next WRITE through it
// fails (and the responder's QP goes to ERR, as rxe's).
func TestMWType2LocalInvalidate(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		w := newMWWorld(t, m)
		mw, err := w.y.pd.AllocMW(verbs.MWType2)
		require.NoError(t, err)
		defer mw.Dealloc()
		rkey := w.bind2(t, mw, 0, 4096, verbs.AccessRemoteWrite)
		require.NoError(t, w.y.qp.PostSend(&verbs.SendWR{ID: 5, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled,
			InvalidateRKey: rkey}))
		wc := waitOK(t, w.y.scq, 5)
		require.Equal(t, verbs.WCLocalInv, wc.Opcode)
		require.Equal(t, verbs.WCRemAccessErr, w.op(t, 1, verbs.WRRDMAWrite, 0, 8, w.rmr.Addr(), rkey).Status)
	})
}

// SEND_WITH_INV from x invalidates y's window: y's receive says which
// rkey, and x's WRITE through it afterwards fails.
func TestMWType2RemoteInvalidate(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		w := newMWWorld(t, m)
		mw, err := w.y.pd.AllocMW(verbs.MWType2)
		require.NoError(t, err)
		defer mw.Dealloc()
		rkey := w.bind2(t, mw, 0, 4096, verbs.AccessRemoteWrite)
		require.NoError(t, w.y.qp.PostRecv(&verbs.RecvWR{ID: 8, SGL: []verbs.SGE{w.rmr.SGE(6000, 64)}}))
		require.NoError(t, w.x.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{w.lmr.SGE(0, 16)}, InvalidateRKey: rkey}))
		waitOK(t, w.x.scq, 2)
		wc := waitOK(t, w.y.rcq, 8)
		require.Equal(t, verbs.WCWithInv, wc.Flags&verbs.WCWithInv)
		require.Equal(t, rkey, wc.InvalidatedRKey)
		require.Equal(t, verbs.WCRemAccessErr, w.op(t, 1, verbs.WRRDMAWrite, 0, 8, w.rmr.Addr(), rkey).Status)
	})
}

// A bad bind completes with MW_BIND_ERR: to a region without MW_BIND
// access.
func TestMWBindError(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		w := newMWWorld(t, m)
		plain, _ := regMR(t, w.y.pd, 4096, allAccess)
		mw, err := w.y.pd.AllocMW(verbs.MWType2)
		require.NoError(t, err)
		defer mw.Dealloc()
		require.NoError(t, w.y.qp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled,
			Bind: verbs.MWBind{RKey: verbs.IncRKey(mw.RKey()), LKey: plain.LKey(), Addr: plain.Addr(), Length: 4096,
				Access: verbs.AccessRemoteWrite}}))
		wc := waitWC(t, w.y.scq)
		require.Equal(t, verbs.WCMWBindErr, wc.Status)
		_, err = w.y.pd.AllocMW(3)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument)
	})
}

// Deallocating a bound type 2 window ends the peer's access, and the
// region it held may then be deregistered, which it could not before.
func TestMWType2Dealloc(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		w := newMWWorld(t, m)
		mw, err := w.y.pd.AllocMW(verbs.MWType2)
		require.NoError(t, err)
		rkey := w.bind2(t, mw, 0, 4096, verbs.AccessRemoteWrite)
		require.ErrorIs(t, w.rmr.Dereg(), verbs.ErrBusy)
		require.NoError(t, mw.Dealloc())
		require.Equal(t, verbs.WCRemAccessErr, w.op(t, 1, verbs.WRRDMAWrite, 0, 8, w.rmr.Addr(), rkey).Status)
	})
}

// A type 1 window is bound with QP.BindMW, reached through any QP of its
// PD, rebound with a new rkey (the old one then fails), and unbound by a
// bind of length 0; it cannot be invalidated.
func TestMWType1(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		w := newMWWorld(t, m)
		mw, err := w.y.pd.AllocMW(verbs.MWType1)
		require.NoError(t, err)
		defer mw.Dealloc()
		first := mw.RKey()
		rkey, err := w.y.qp.BindMW(mw, 10, verbs.SendSignaled, w.rmr, w.rmr.Addr(), 4096, verbs.AccessRemoteWrite)
		require.NoError(t, err)
		require.Equal(t, verbs.IncRKey(first), rkey)
		require.Equal(t, rkey, mw.RKey())
		require.Equal(t, verbs.WCBindMW, waitOK(t, w.y.scq, 10).Opcode)
		require.Equal(t, verbs.WCSuccess, w.op(t, 1, verbs.WRRDMAWrite, 0, 100, w.rmr.Addr()+8, rkey).Status)
		require.Equal(t, w.lbuf[:100], w.rbuf[8:108])
		require.ErrorIs(t, w.rmr.Dereg(), verbs.ErrBusy)

		again, err := w.y.qp.BindMW(mw, 11, verbs.SendSignaled, w.rmr, w.rmr.Addr(), 0, 0)
		require.NoError(t, err)
		waitOK(t, w.y.scq, 11)
		require.NotEqual(t, rkey, again)
		require.Equal(t, verbs.WCRemAccessErr, w.op(t, 2, verbs.WRRDMAWrite, 0, 8, w.rmr.Addr(), again).Status)
		require.NoError(t, w.rmr.Dereg(), "unbound, the window holds the region no more")
		_, err = w.y.qp.BindMW(&verbs.MW{}, 12, 0, w.lmr, 0, 0, 0)
		require.True(t, errors.Is(err, verbs.ErrInvalidArgument))
	})
}

// A type 1 window is not invalidated (o10-37.2.26): LOCAL_INV of its
// rkey fails, and a type 1 window is reached through another QP of its PD.
func TestMWType1NoInvalidate(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		w := newMWWorld(t, m)
		o := defaultOpts()
		x2 := newEndpoint(t, w.p.a, w.x.pd, o, nil)
		y2 := newEndpoint(t, w.p.b, w.y.pd, o, nil)
		connect(t, x2, y2, o)
		mw, err := w.y.pd.AllocMW(verbs.MWType1)
		require.NoError(t, err)
		defer mw.Dealloc()
		rkey, err := w.y.qp.BindMW(mw, 10, verbs.SendSignaled, w.rmr, w.rmr.Addr(), 4096, verbs.AccessRemoteWrite)
		require.NoError(t, err)
		waitOK(t, w.y.scq, 10)
		require.NoError(t, x2.qp.PostSend(&verbs.SendWR{ID: 9, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{w.lmr.SGE(0, 8)}, RemoteAddr: w.rmr.Addr(), RKey: rkey}))
		waitOK(t, x2.scq, 9)
		require.NoError(t, y2.qp.PostSend(&verbs.SendWR{ID: 6, Opcode: verbs.WRLocalInv, InvalidateRKey: rkey}))
		require.Equal(t, verbs.WCLocQPOpErr, waitWC(t, y2.scq).Status)
		require.Equal(t, verbs.WCSuccess, w.op(t, 1, verbs.WRRDMAWrite, 0, 8, w.rmr.Addr(), rkey).Status)
	})
}

// A SEND_WITH_INV naming a type 1 window's rkey is an invalid request
// (o10-37.2.26): the responder NAKs it, the sender gets REM_INV_REQ_ERR
// and the receive fails with it.
func TestMWRemoteInvalidateType1NAK(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		w := newMWWorld(t, m)
		mw, err := w.y.pd.AllocMW(verbs.MWType1)
		require.NoError(t, err)
		defer mw.Dealloc()
		rkey, err := w.y.qp.BindMW(mw, 10, verbs.SendSignaled, w.rmr, w.rmr.Addr(), 4096, verbs.AccessRemoteWrite)
		require.NoError(t, err)
		waitOK(t, w.y.scq, 10)
		require.NoError(t, w.y.qp.PostRecv(&verbs.RecvWR{ID: 8, SGL: []verbs.SGE{w.rmr.SGE(6000, 64)}}))
		require.NoError(t, w.x.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{w.lmr.SGE(0, 16)}, InvalidateRKey: rkey}))
		require.Equal(t, verbs.WCRemInvReqErr, waitWC(t, w.x.scq).Status)
		require.Equal(t, verbs.WCRemInvReqErr, waitWC(t, w.y.rcq).Status)
	})
}

// Binds between WRITEs on a lossy link complete in the order posted, each
// once, though go-back-N sends the WRITEs around them again: the
// requester executes a bind when it first reaches it and steps over it
// when it rewinds, and the completer retires it with its neighbours. The
// last bind's rkey is the window's.
func TestMWBindsInOrderUnderLoss(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		o := defaultOpts()
		faults := memlink.Faults{Loss: 0.05}
		p, x, y := connectedPairMode(t, m, memlink.Config{Seed: 7, AtoB: faults, BtoA: faults}, o)
		xmr, xbuf := regMR(t, x.pd, 1<<16, allAccess)
		ymr, ybuf := regMR(t, y.pd, 1<<16, allAccess|verbs.AccessMWBind)
		fill(ybuf, 9)
		mw, err := y.pd.AllocMW(verbs.MWType1)
		require.NoError(t, err)
		defer mw.Dealloc()
		const rounds = 20
		var rkey uint32
		for i := range rounds {
			require.NoError(t, y.qp.PostSend(&verbs.SendWR{ID: uint64(2 * i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{ymr.SGE(0, 8192)}, RemoteAddr: xmr.Addr(), RKey: xmr.RKey()}))
			rkey, err = y.qp.BindMW(mw, uint64(2*i+1), verbs.SendSignaled, ymr, ymr.Addr(), uint64(1024*(i+1)),
				verbs.AccessRemoteRead)
			require.NoError(t, err)
		}
		for i := range 2 * rounds {
			wc := waitOK(t, y.scq, uint64(i))
			if i%2 == 1 {
				require.Equal(t, verbs.WCBindMW, wc.Opcode)
			}
		}
		require.Equal(t, ybuf[:8192], xbuf[:8192])
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 99, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{xmr.SGE(8192, 1024*rounds)}, RemoteAddr: ymr.Addr(), RKey: rkey}))
		waitOK(t, x.scq, 99)
		require.Equal(t, ybuf[:1024*rounds], xbuf[8192:8192+1024*rounds])
		require.NotZero(t, p.engB.Counters().Retransmits.Load(), "the WRITEs went again")
	})
}

// A QP binds only its own PD's windows, to its own PD's regions: a
// window's rkey names it to any QP (and the daemon's sessions share one
// key space), so the PD check is what keeps one from binding another's.
func TestMWBindOtherPD(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		w := newMWWorld(t, m)
		o := defaultOpts()
		x2 := newEndpoint(t, w.p.a, nil, o, nil)
		y2 := newEndpoint(t, w.p.b, nil, o, nil) // a PD of its own
		connect(t, x2, y2, o)
		mw, err := w.y.pd.AllocMW(verbs.MWType2)
		require.NoError(t, err)
		defer mw.Dealloc()
		own, _ := regMR(t, y2.pd, 4096, allAccess|verbs.AccessMWBind)
		for i, b := range []verbs.MWBind{
			{RKey: verbs.IncRKey(mw.RKey()), LKey: own.LKey(), Addr: own.Addr(), Length: 64, Access: verbs.AccessRemoteWrite},
			{RKey: verbs.IncRKey(mw.RKey()), LKey: w.rmr.LKey(), Addr: w.rmr.Addr(), Length: 64, Access: verbs.AccessRemoteWrite},
		} {
			require.NoError(t, y2.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, Bind: b}))
			require.Equal(t, verbs.WCMWBindErr, waitWC(t, y2.scq).Status)
			connectAgain(t, x2, y2, o)
		}
		// Its own PD's QP binds it.
		w.bind2(t, mw, 0, 64, verbs.AccessRemoteWrite)
	})
}

// connectAgain takes both QPs through RESET to RTS again.
func connectAgain(t *testing.T, x, y *endpoint, o qpOpts) {
	t.Helper()
	require.NoError(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState))
	require.NoError(t, y.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState))
	connect(t, x, y, o)
}

// One type 1 window reached through QPs on both engines of a device at
// once, and a type 2 window bound by each of them: the engines share the
// window table without locks, and each window's binding is what its
// engine swapped in.
func TestMWAcrossEngines(t *testing.T) {
	p := newMultiPair(t, memlink.Config{}, 2, 2)
	o := defaultOpts()
	ypd := p.b.AllocPD()
	ymr, ybuf := regMR(t, ypd, 1<<16, allAccess|verbs.AccessMWBind)
	mw1, err := ypd.AllocMW(verbs.MWType1)
	require.NoError(t, err)
	defer mw1.Dealloc()
	const n = 8
	xs, ys := make([]*endpoint, n), make([]*endpoint, n)
	engines := map[int]bool{}
	for i := range n {
		xs[i], ys[i] = newEndpoint(t, p.a, nil, o, nil), newEndpoint(t, p.b, ypd, o, nil)
		connect(t, xs[i], ys[i], o)
		engines[ys[i].qp.EngineIndex()] = true
	}
	require.Len(t, engines, 2, "the QPs are on both engines")
	rkey1, err := ys[0].qp.BindMW(mw1, 1, verbs.SendSignaled, ymr, ymr.Addr(), 1<<15, verbs.AccessRemoteWrite)
	require.NoError(t, err)
	waitOK(t, ys[0].scq, 1)
	rkeys := make([]uint32, n)
	for i, y := range ys {
		mw, err := ypd.AllocMW(verbs.MWType2)
		require.NoError(t, err)
		defer mw.Dealloc()
		rkeys[i] = verbs.IncRKey(mw.RKey())
		require.NoError(t, y.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled,
			Bind: verbs.MWBind{RKey: rkeys[i], LKey: ymr.LKey(), Addr: ymr.Addr() + 1<<15 + uint64(4096*i), Length: 4096,
				Access: verbs.AccessRemoteWrite}}))
	}
	for _, y := range ys {
		waitOK(t, y.scq, 2)
	}
	xbufs := make([][]byte, n)
	for i, x := range xs {
		var xmr *verbs.MR
		xmr, xbufs[i] = regMR(t, x.pd, 8192, allAccess)
		fill(xbufs[i], byte(i))
		_, err := x.qp.PostSendList([]verbs.SendWR{
			{ID: 3, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{xmr.SGE(0, 4096)}, RemoteAddr: ymr.Addr() + uint64(4096*i), RKey: rkey1},
			{ID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{xmr.SGE(4096, 4096)},
				RemoteAddr: ymr.Addr() + 1<<15 + uint64(4096*i), RKey: rkeys[i]},
		})
		require.NoError(t, err)
	}
	for i, x := range xs {
		waitOK(t, x.scq, 4)
		require.Equal(t, xbufs[i][:4096], ybuf[4096*i:4096*(i+1)])
		require.Equal(t, xbufs[i][4096:], ybuf[1<<15+4096*i:1<<15+4096*(i+1)])
	}
}
