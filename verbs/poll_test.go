package verbs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// pollPair is newPair with both devices' PollHold set.
func pollPair(t *testing.T, hold time.Duration) (*testPair, *endpoint, *endpoint) {
	t.Helper()
	p := newPairConfig(t, memlink.Config{}, verbs.Config{PollHold: hold})
	o := defaultOpts()
	x := newEndpoint(t, p.a, nil, o, nil)
	y := newEndpoint(t, p.b, nil, o, nil)
	connect(t, x, y, o)
	return p, x, y
}

// spin polls cq, never blocking, until it has a completion or 10s passed.
func spin(t *testing.T, cq *verbs.CQ) verbs.WC {
	t.Helper()
	var wc [1]verbs.WC
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		n, err := cq.Poll(wc[:])
		require.NoError(t, err)
		if n == 1 {
			return wc[0]
		}
	}
	require.FailNow(t, "no completion within 10s of polling")
	return verbs.WC{}
}

// A program that polls runs the engine in its own goroutine: with a hold
// of a minute, the engine goroutines nap through a ping-pong that both
// sides drive by polling their CQs.
func TestPollRunsEngineInCaller(t *testing.T) {
	p, x, y := pollPair(t, time.Minute)
	const rounds, size = 300, 100
	xmr, xbuf := regMR(t, x.pd, 2*size, verbs.AccessLocalWrite)
	ymr, ybuf := regMR(t, y.pd, 2*size, verbs.AccessLocalWrite)
	postRecv := func(e *endpoint, mr *verbs.MR) {
		require.NoError(t, e.qp.PostRecv(&verbs.RecvWR{SGL: []verbs.SGE{mr.SGE(size, size)}}))
	}
	postRecv(x, xmr)
	postRecv(y, ymr)
	// Let each engine goroutine see its application poll and settle.
	spinEmpty := func(cq *verbs.CQ) {
		var wc [1]verbs.WC
		for range 1000 {
			n, err := cq.Poll(wc[:])
			require.NoError(t, err)
			require.Zero(t, n)
		}
	}
	spinEmpty(x.scq)
	spinEmpty(y.scq)
	engineA := p.a.RoCE().Counters().Passes.Load() - p.a.RoCE().Counters().PollPasses.Load()
	engineB := p.b.RoCE().Counters().Passes.Load() - p.b.RoCE().Counters().PollPasses.Load()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // y echoes what x sends
		defer wg.Done()
		for i := range rounds {
			wc := spin(t, y.rcq)
			require.Equal(t, verbs.WCSuccess, wc.Status)
			require.Equal(t, byte(i), ybuf[size])
			postRecv(y, ymr)
			ybuf[0] = ybuf[size]
			require.NoError(t, y.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{ymr.SGE(0, size)}}))
			require.Equal(t, verbs.WCSuccess, spin(t, y.scq).Status)
		}
	}()
	for i := range rounds {
		xbuf[0] = byte(i)
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{xmr.SGE(0, size)}}))
		require.Equal(t, verbs.WCSuccess, spin(t, x.scq).Status)
		wc := spin(t, x.rcq)
		require.Equal(t, verbs.WCSuccess, wc.Status)
		require.Equal(t, byte(i), xbuf[size], "round %d", i)
		postRecv(x, xmr)
	}
	wg.Wait()

	for _, d := range []struct {
		dev    *verbs.Device
		before uint64
	}{{p.a, engineA}, {p.b, engineB}} {
		ctr := d.dev.RoCE().Counters()
		byEngine := ctr.Passes.Load() - ctr.PollPasses.Load() - d.before
		t.Logf("passes in Poll %d, by the engine goroutine during the ping-pong %d", ctr.PollPasses.Load(), byEngine)
		// The engine goroutine may finish a pass it started, but it
		// naps: the 1,200 frames and completions came through Poll.
		require.Less(t, byEngine, uint64(20))
		require.Greater(t, ctr.PollPasses.Load(), uint64(2*rounds))
	}
}

// CQ.Wait hands the engine back to the engine goroutine: a program that
// polled and then blocks is not left waiting for the hold to end.
func TestWaitHandsBackTheEngine(t *testing.T) {
	_, x, y := pollPair(t, time.Minute)
	var wc [1]verbs.WC
	for range 100 {
		_, err := x.scq.Poll(wc[:]) // the engine goroutine now naps for a minute
		require.NoError(t, err)
	}
	require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: 1}))
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 7, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := x.scq.Wait(ctx, wc[:])
	require.NoError(t, err, "the SEND did not complete: the engine goroutine kept napping")
	require.Equal(t, 1, n)
	require.Equal(t, verbs.WCSuccess, wc[0].Status)
}

// A program that polls and then stops without blocking in Wait gets the
// engine goroutine back once the hold has passed.
func TestHoldEnds(t *testing.T) {
	_, x, y := pollPair(t, 20*time.Millisecond)
	xmr, xbuf := regMR(t, x.pd, 64, 0)
	ymr, ybuf := regMR(t, y.pd, 64, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	var wc [1]verbs.WC
	for range 100 {
		_, err := x.scq.Poll(wc[:])
		require.NoError(t, err)
	}
	xbuf[0] = 42
	start := time.Now()
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{xmr.SGE(0, 1)},
		RemoteAddr: ymr.Addr(), RKey: ymr.RKey()}))
	for ymr.RemoteWriteSeq() == 0 {
		require.Less(t, time.Since(start), 5*time.Second, "the WRITE never left")
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, byte(42), ybuf[0])
	t.Logf("the WRITE landed %v after the post (hold 20ms)", time.Since(start))
}

// Closing a device while goroutines poll it neither hangs nor lets a poll
// run a stopped engine.
func TestCloseWhilePolling(t *testing.T) {
	p, x, _ := pollPair(t, 0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var wc [4]verbs.WC
			for {
				select {
				case <-stop:
					return
				default:
				}
				x.scq.Poll(wc[:])
				p.a.Poll()
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	done := make(chan struct{})
	go func() { p.a.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Close hung while goroutines polled")
	}
	passes := p.a.RoCE().Counters().Passes.Load()
	time.Sleep(20 * time.Millisecond)
	close(stop)
	wg.Wait()
	require.Equal(t, passes, p.a.RoCE().Counters().Passes.Load(), "a pass ran after Close")
}
