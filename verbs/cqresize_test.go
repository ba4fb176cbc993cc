package verbs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

func TestCQResize(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) { testCQResize(t, newPairMode(t, m, memlink.Config{}, verbs.Config{})) })
}

// With two engines on each device, a resize pauses both (Group.Do): the
// one that runs the CQ's QP and the other.
func TestCQResizeTwoEngines(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		la, lb := memlink.PairQueues(memlink.Config{}, 2)
		p := &testPair{}
		t.Cleanup(p.close)
		p.add(func() { la.Close(); lb.Close() })
		dc := verbs.Config{Engines: 2}
		p.a, p.engA = openMode(t, m, la, dc, addrA, &p.closers)
		p.b, p.engB = openMode(t, m, lb, dc, addrB, &p.closers)
		require.Equal(t, 2, p.engB.RoCE().Engines())
		testCQResize(t, p)
	})
}

// y's receive CQ is resized while it holds completions nobody polled: x
// waits for its sends' completions, which come after y's responder made
// the receives' (it completes a SEND before it ACKs it), so y's CQ holds
// exactly them.
func testCQResize(t *testing.T, p *testPair) {
	o := defaultOpts()
	ch := p.b.NewCompChannel()
	x := newEndpoint(t, p.a, nil, o, nil)
	y := newEndpoint(t, p.b, nil, o, nil)
	var err error
	y.rcq, err = p.b.CreateCQ(4, ch)
	require.NoError(t, err)
	require.Equal(t, 4, y.rcq.Cap())
	y.qp, err = y.pd.CreateQP(&verbs.QPInitAttr{SendCQ: y.scq, RecvCQ: y.rcq, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 64}})
	require.NoError(t, err)
	connect(t, x, y, o)
	smr, _ := regMR(t, x.pd, 64, allAccess)
	rmr, _ := regMR(t, y.pd, 64*64, allAccess)
	next := uint64(0)
	send := func(n int) { // n messages, all received and acknowledged
		t.Helper()
		for range n {
			require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: next, SGL: []verbs.SGE{rmr.SGE(int(next%64)*64, 64)}}))
			require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: next, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{smr.SGE(0, 8)}}))
			waitOK(t, x.scq, next)
			next++
		}
	}
	polled := func(want ...uint64) {
		t.Helper()
		var wcs [8]verbs.WC
		n, err := y.rcq.Poll(wcs[:])
		require.NoError(t, err)
		got := make([]uint64, n)
		for i := range n {
			require.Equal(t, verbs.WCSuccess, wcs[i].Status)
			got[i] = wcs[i].WRID
		}
		require.Equal(t, append([]uint64{}, want...), got, "each completion once, in order")
	}

	send(3)
	require.ErrorIs(t, y.rcq.Resize(2), verbs.ErrInvalidArgument, "fewer entries than it holds")
	require.Equal(t, 4, y.rcq.Cap())
	require.ErrorIs(t, y.rcq.Resize(0), verbs.ErrInvalidArgument)
	require.ErrorIs(t, y.rcq.Resize(verbs.MaxCQE+1), verbs.ErrInvalidArgument)

	require.NoError(t, y.rcq.Resize(40)) // grows, keeping the three
	require.Equal(t, 64, y.rcq.Cap())
	send(30) // more than the old ring held
	want := make([]uint64, 0, 33)
	for i := range uint64(33) {
		want = append(want, i)
	}
	for len(want) > 0 {
		k := min(8, len(want))
		polled(want[:k]...)
		want = want[k:]
	}
	polled()

	send(3)
	require.NoError(t, y.rcq.Resize(3)) // shrinks to just what it holds
	require.Equal(t, 4, y.rcq.Cap())
	polled(33, 34, 35)

	// An arm made before a resize holds after it: the next completion
	// sends the event.
	require.NoError(t, y.rcq.RequestNotify(false))
	require.NoError(t, y.rcq.Resize(1))
	require.Equal(t, 1, y.rcq.Cap())
	send(1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cq, err := ch.Get(ctx)
	require.NoError(t, err)
	require.Same(t, y.rcq, cq)
	polled(36)
}
