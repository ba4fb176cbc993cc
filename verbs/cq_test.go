package verbs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

func TestCQEventsAndWait(t *testing.T) { forEachMode(t, testCQEventsAndWait) }

func testCQEventsAndWait(t *testing.T, m mode) {
	p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
	o := defaultOpts()
	ch := p.b.NewCompChannel()
	x := newEndpoint(t, p.a, nil, o, nil)
	y := newEndpoint(t, p.b, nil, o, nil)
	var err error
	y.rcq, err = p.b.CreateCQ(8, ch)
	require.NoError(t, err)
	// The QP must use the CQ with the channel: recreate y's QP with it.
	y.qp, err = y.pd.CreateQP(&verbs.QPInitAttr{SendCQ: y.scq, RecvCQ: y.rcq, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
	require.NoError(t, err)
	connect(t, x, y, o)
	smr, _ := regMR(t, x.pd, 64, allAccess)
	rmr, _ := regMR(t, y.pd, 64*8, allAccess)
	for i := range 8 {
		require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rmr.SGE(i*64, 64)}}))
	}

	// Wait honours its context.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var wcs [4]verbs.WC
	n, err := y.rcq.Wait(ctx, wcs[:])
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Zero(t, n)

	// Unarmed: no event.
	send := func(id uint64, flags verbs.SendFlags) {
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | flags,
			SGL: []verbs.SGE{smr.SGE(0, 8)}}))
		waitOK(t, x.scq, id)
	}
	send(0, 0)
	waitOK(t, y.rcq, 0)
	require.Empty(t, ch.C)

	// Armed for any completion: one event.
	require.NoError(t, y.rcq.RequestNotify(false))
	send(1, 0)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	cq, err := ch.Get(ctx2)
	require.NoError(t, err)
	require.Same(t, y.rcq, cq)
	waitOK(t, y.rcq, 1)
	send(2, 0) // not re-armed: no second event
	waitOK(t, y.rcq, 2)
	require.Empty(t, ch.C)

	// Armed for solicited completions: an unsolicited message does not
	// fire, a solicited one does.
	require.NoError(t, y.rcq.RequestNotify(true))
	send(3, 0)
	wc := waitOK(t, y.rcq, 3)
	require.Equal(t, uint32(8), wc.ByteLen)
	require.Empty(t, ch.C)
	send(4, verbs.SendSolicited)
	cq, err = ch.Get(ctx2)
	require.NoError(t, err)
	require.Same(t, y.rcq, cq)
	waitOK(t, y.rcq, 4)

	// A blocked Wait wakes up when a completion arrives.
	got := make(chan verbs.WC, 1)
	go func() {
		var w [1]verbs.WC
		if n, err := y.rcq.Wait(ctx2, w[:]); err == nil && n == 1 {
			got <- w[0]
		}
		close(got)
	}()
	time.Sleep(5 * time.Millisecond)
	send(5, 0)
	w := <-got
	require.Equal(t, uint64(5), w.WRID)

	// A CQ without a channel cannot be armed.
	require.ErrorIs(t, x.scq.RequestNotify(false), verbs.ErrInvalidArgument)
}

func TestCQOverrun(t *testing.T) { forEachMode(t, testCQOverrun) }

func testCQOverrun(t *testing.T, m mode) {
	o := defaultOpts()
	p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
	x := newEndpoint(t, p.a, nil, o, nil)
	y := newEndpoint(t, p.b, nil, o, nil)
	var err error
	x.scq, err = p.a.CreateCQ(2, nil)
	require.NoError(t, err)
	x.qp, err = x.pd.CreateQP(&verbs.QPInitAttr{SendCQ: x.scq, RecvCQ: x.rcq, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
	require.NoError(t, err)
	connect(t, x, y, o)
	mr, _ := regMR(t, x.pd, 8, allAccess)
	rmr, _ := regMR(t, y.pd, 8, allAccess)
	for i := range 3 {
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{mr.SGE(0, 8)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
	}
	require.Eventually(t, func() bool {
		var wcs [1]verbs.WC
		_, err := x.scq.Poll(wcs[:0])
		return err != nil
	}, 5*time.Second, time.Millisecond)
	var wcs [4]verbs.WC
	_, err = x.scq.Poll(wcs[:])
	require.ErrorIs(t, err, verbs.ErrCQOverflow)
	ev := nextEvent(t, p.a)
	require.Equal(t, verbs.EventCQErr, ev.Type)
	require.Same(t, x.scq, ev.CQ)
	// The QP that lost a completion is in error.
	ev = nextEvent(t, p.a)
	require.Equal(t, verbs.EventQPFatal, ev.Type)
	require.Same(t, x.qp, ev.QP)
	require.Equal(t, verbs.QPSErr, x.qp.State())
}

func TestDeviceQueryLimits(t *testing.T) {
	p := newPair(t, memlink.Config{})
	a := p.a.Query()
	require.Equal(t, 1, a.PhysPortCnt)
	_, err := p.a.CreateCQ(a.MaxCQE+1, nil)
	require.ErrorIs(t, err, verbs.ErrInvalidArgument)
	pd := p.a.AllocPD()
	cq, err := p.a.CreateCQ(16, nil)
	require.NoError(t, err)
	_, err = pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: a.MaxQPWR + 1, MaxRecvWR: 1}})
	require.ErrorIs(t, err, verbs.ErrInvalidArgument)
	_, err = pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: a.MaxSGE + 1}})
	require.ErrorIs(t, err, verbs.ErrInvalidArgument)
	// A CQ belongs to one device: the first whose QP uses it.
	_, err = pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	require.NoError(t, err)
	pdB := p.b.AllocPD()
	_, err = pdB.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	require.ErrorIs(t, err, verbs.ErrInvalidArgument)
}

func nextEvent(t *testing.T, d *verbs.Device) verbs.Event {
	t.Helper()
	select {
	case ev := <-d.Events():
		return ev
	case <-time.After(5 * time.Second):
		require.FailNow(t, "no asynchronous event")
	}
	return verbs.Event{}
}

func TestAsyncEvents(t *testing.T) { forEachMode(t, testAsyncEvents) }

func testAsyncEvents(t *testing.T, m mode) {
	o := defaultOpts()
	p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
	pdB := p.b.AllocPD()
	srq, err := pdB.NewSRQ(16, 1)
	require.NoError(t, err)
	x := newEndpoint(t, p.a, nil, o, nil)
	y := newEndpoint(t, p.b, pdB, o, srq)
	connect(t, x, y, o)
	rmr, _ := regMR(t, pdB, 64, allAccess)
	lmr, _ := regMR(t, x.pd, 64, allAccess)
	for i := range 4 {
		require.NoError(t, srq.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rmr.SGE(0, 64)}}))
	}
	// SRQ limit: armed at 3, fires once when the count drops below it.
	require.NoError(t, srq.Modify(3))
	send := func(id uint64) {
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{lmr.SGE(0, 8)}}))
		waitOK(t, x.scq, id)
		waitOK(t, y.rcq, id)
	}
	send(0)
	require.Empty(t, p.b.Events())
	send(1)
	ev := nextEvent(t, p.b)
	require.Equal(t, verbs.EventSRQLimitReached, ev.Type)
	require.Same(t, srq, ev.SRQ)
	send(2)
	require.Empty(t, p.b.Events(), "the limit fires once per arming")

	// SQ drained: a QP moved to SQD with nothing in flight says so.
	require.NoError(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSSQD}, verbs.QPAttrState))
	ev = nextEvent(t, p.a)
	require.Equal(t, verbs.EventSQDrained, ev.Type)
	require.Same(t, x.qp, ev.QP)
	// In SQD, new work waits; back in RTS it goes.
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{lmr.SGE(0, 8)}}))
	noWC(t, x.scq)
	require.NoError(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.QPAttrState))
	waitOK(t, x.scq, 3)
	waitOK(t, y.rcq, 3)

	// A failing request: the requester's QP is fatal, the responder's too,
	// and the responder's QP, on an SRQ, reaches its last WQE.
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{lmr.SGE(0, 8)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey() + 1}))
	wc := waitWC(t, x.scq)
	require.Equal(t, verbs.WCRemAccessErr, wc.Status)
	ev = nextEvent(t, p.a)
	require.Equal(t, verbs.EventQPFatal, ev.Type)
	require.Same(t, x.qp, ev.QP)
	got := map[verbs.EventType]bool{}
	for range 2 {
		ev := nextEvent(t, p.b)
		require.Same(t, y.qp, ev.QP)
		got[ev.Type] = true
	}
	require.Equal(t, map[verbs.EventType]bool{verbs.EventQPFatal: true, verbs.EventQPLastWQEReached: true}, got)
	require.Equal(t, 0, srq.Len(), "no receive was left")
}

// TestCommEstEvent: a QP still in RTR that receives its first packet
// raises COMM_EST, once; OnCommEst hears it too.
func TestCommEstEvent(t *testing.T) {
	o := defaultOpts()
	p := newPair(t, memlink.Config{})
	x, y := newEndpoint(t, p.a, nil, o, nil), newEndpoint(t, p.b, nil, o, nil)
	connect(t, x, y, o)
	// y back to a fresh connection left in RTR: reset, INIT, RTR.
	require.NoError(t, y.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState))
	require.NoError(t, y.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: y.access, Port: 1},
		verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPort|verbs.QPAttrPKeyIndex))
	require.NoError(t, y.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: o.mtu, DestQPN: x.qp.QPN(),
		RQPSN: x.sqPSN, MaxDestRdAtomic: o.maxRd, MinRNRTimer: o.minRNR, AV: verbs.AddressVector{DGID: x.gid, HopLimit: 64}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
	heard := make(chan struct{}, 2)
	p.b.OnCommEst(y.qp, func() { heard <- struct{}{} })
	mr, _ := regMR(t, x.pd, 64, allAccess)
	ymr, _ := regMR(t, y.pd, 64, allAccess)
	for i := range 2 {
		require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{ymr.SGE(0, 64)}}))
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{mr.SGE(0, 8)}}))
		waitOK(t, y.rcq, uint64(i))
	}
	select {
	case ev := <-p.b.Events():
		assert.Equal(t, verbs.EventCommEst, ev.Type)
		assert.Same(t, y.qp, ev.QP)
	case <-time.After(5 * time.Second):
		t.Fatal("no COMM_EST")
	}
	assert.Len(t, heard, 1, "OnCommEst's function ran once")
	select {
	case ev := <-p.b.Events():
		t.Fatalf("a second event: %v", ev.Type)
	default:
	}
}
