package verbs_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// A CQ whose ring another process polls (the daemon's side of a client's
// CQ): completions land in the ring, an armed ring notifies once, and an
// overrun is marked in the ring and reported as an event.
func TestSharedCQ(t *testing.T) {
	p := newPair(t, memlink.Config{})
	mem := make([]byte, hostif.RingSize(4, hostif.CQEntrySize))
	daemonSide, err := hostif.NewCompletionQueue(mem, 4)
	require.NoError(t, err)
	clientSide, err := hostif.NewCompletionQueue(mem, 4)
	require.NoError(t, err)
	var notified atomic.Int32 // the engine goroutine or a Poll calls it
	scq, err := p.a.CreateSharedCQ(daemonSide, func() { notified.Add(1) })
	require.NoError(t, err)
	require.Equal(t, 4, scq.Cap())

	o := defaultOpts()
	x := newEndpoint(t, p.a, nil, o, nil)
	y := newEndpoint(t, p.b, nil, o, nil)
	qp, err := x.pd.CreateQP(&verbs.QPInitAttr{SendCQ: scq, RecvCQ: x.rcq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	x.qp.Destroy()
	x.qp, x.scq = qp, scq
	connect(t, x, y, o)
	lmr, _ := regMR(t, x.pd, 4096, allAccess)
	rmr, _ := regMR(t, y.pd, 4096, allAccess)

	write := func(id uint64) {
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{lmr.SGE(0, 8)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
	}
	poll := func() []verbs.WC {
		wcs := make([]verbs.WC, 8)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if n := clientSide.Poll(wcs); n > 0 {
				return wcs[:n]
			}
			p.a.Poll()
		}
		t.Fatal("no completion in the shared ring")
		return nil
	}

	clientSide.Arm(false)
	write(1)
	wcs := poll()
	require.Len(t, wcs, 1)
	require.Equal(t, uint64(1), wcs[0].WRID)
	require.Equal(t, verbs.WCSuccess, wcs[0].Status)
	require.Equal(t, x.qp.QPN(), wcs[0].QPN)
	require.EqualValues(t, 1, notified.Load())
	write(2)
	require.Equal(t, uint64(2), poll()[0].WRID)
	require.EqualValues(t, 1, notified.Load(), "once per arming")

	// Nobody polls: the fifth completion has no room.
	for id := uint64(3); id < 8; id++ {
		write(id)
	}
	ev := nextEvent(t, p.a)
	require.Equal(t, verbs.EventCQErr, ev.Type)
	require.Same(t, scq, ev.CQ)
	require.True(t, clientSide.Overrun())
}
