package perftest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/softnic/softnic/verbs"
)

// Values perftest's atomic work requests carry (perftest_resources.h).
const (
	atomicAddValue  = 1
	atomicSwapValue = 0
)

// offset returns where message k of size bytes goes within a QP's area:
// perftest steps by INC(size) and wraps at the cycle buffer when messages
// are at most half a cycle buffer (increase_loc_addr, increase_rem_addr),
// and otherwise always uses the area's start.
func (r *runCtx) offset(k uint64, size uint64) uint64 {
	if size > r.cycle/2 {
		return 0
	}
	step := inc(size, r.cacheLine)
	per := r.cycle / step
	if per == 0 {
		return 0
	}
	return (k % per) * step
}

// sendArea and recvArea are the offsets of QP q's areas in the buffer:
// perftest's send buffers come first, and the address a QP advertises is
// its receive area (set_up_connection).
func (r *runCtx) sendArea(q int) uint64 { return uint64(q) * r.area }
func (r *runCtx) recvArea(q int) uint64 { return uint64(len(r.qps)+q) * r.area }

// sendWR fills wr for message k of QP q.
func (r *runCtx) sendWR(wr *verbs.SendWR, sge []verbs.SGE, q int, k, size uint64) {
	off := r.offset(k, size)
	sge[0] = r.mr.SGE(int(r.sendArea(q)+off), int(size))
	*wr = verbs.SendWR{ID: uint64(q), SGL: sge}
	switch r.p.Verb() {
	case VerbSend:
		wr.Opcode = verbs.WRSend
	case VerbWrite:
		wr.Opcode = verbs.WRRDMAWrite
	case VerbRead:
		wr.Opcode = verbs.WRRDMARead
	case VerbAtomic:
		if r.p.Atomic == CmpAndSwap {
			wr.Opcode, wr.CompareAdd, wr.Swap = verbs.WRAtomicCmpAndSwp, 0, atomicSwapValue
		} else {
			wr.Opcode, wr.CompareAdd = verbs.WRAtomicFetchAndAdd, atomicAddValue
		}
	}
	if r.p.Verb() != VerbSend {
		wr.RemoteAddr, wr.RKey = r.remote[q].VAddr+off, r.remote[q].RKey
	}
	if r.p.InlineSize > 0 && size <= uint64(r.p.InlineSize) && (r.p.Verb() == VerbSend || r.p.Verb() == VerbWrite) {
		wr.Flags |= verbs.SendInline
		wr.InlineData = r.mr.Bytes()[r.sendArea(q)+off : r.sendArea(q)+off+size]
	}
}

// wcError reports a failed completion like NOTIFY_COMP_ERROR_SEND.
func wcError(what string, wc *verbs.WC, done uint64) error {
	return fmt.Errorf("%s completion with error: status %v, after %d completions", what, wc.Status, done)
}

// post posts wr, reporting whether the send queue had room.
func post(qp *verbs.QP, wr *verbs.SendWR) (bool, error) {
	if err := qp.PostSend(wr); err != nil {
		if errors.Is(err, verbs.ErrQueueFull) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// postWait posts wr, retrying while the send queue is full: the engine
// may publish a completion a moment before it frees the slot.
func (r *runCtx) postWait(qp *verbs.QP, wr *verbs.SendWR) error {
	for {
		ok, err := post(qp, wr)
		if ok || err != nil {
			return err
		}
		if r.ctx.Err() != nil {
			return context.Cause(r.ctx)
		}
		runtime.Gosched()
	}
}

// runBW is run_iter_bw: keep up to TxDepth messages in flight per QP,
// signal every CQMod-th and the last, and time posts and completions.
func (r *runCtx) runBW(size uint64) (BWTimes, error) {
	p := r.p
	if p.Duration > 0 {
		return r.runBWDuration(size)
	}
	iters := p.Iters
	nq := len(r.qps)
	n := iters * uint64(nq)
	cqMod := uint64(max(p.CQMod, 1))
	var t BWTimes
	if p.NoPeak {
		t.Posted, t.Completed = make([]int64, 1), make([]int64, 1)
	} else {
		t.Posted, t.Completed = make([]int64, n), make([]int64, n)
	}
	scnt := make([]uint64, nq)
	ccnt := make([]uint64, nq)
	var totS, totC uint64
	wcs := make([]verbs.WC, 16)
	sge := make([]verbs.SGE, 1)
	var wr verbs.SendWR
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	for totS < n || totC < n {
		full := false
		for q, qp := range r.qps {
			for scnt[q] < iters && scnt[q]-ccnt[q]+1 <= uint64(p.TxDepth) {
				k := scnt[q]
				r.sendWR(&wr, sge, q, k, size)
				if k%cqMod == cqMod-1 || k == iters-1 {
					wr.Flags |= verbs.SendSignaled
				}
				if !p.NoPeak {
					t.Posted[totS] = now()
				}
				ok, err := post(qp, &wr)
				if err != nil {
					return t, err
				}
				if !ok {
					full = true
					break
				}
				scnt[q]++
				totS++
			}
		}
		if totC >= n {
			continue
		}
		got, err := r.scq.Poll(wcs)
		if err == nil && got == 0 {
			if full {
				runtime.Gosched()
				continue
			}
			got, err = spinWait(r.ctx, r.scq, wcs, bwSpin)
		}
		if err != nil {
			return t, fmt.Errorf("poll send CQ: %w", causeOf(r.ctx, err))
		}
		for i := 0; i < got; i++ {
			wc := &wcs[i]
			if wc.Status != verbs.WCSuccess {
				return t, wcError("send", wc, totC)
			}
			ccnt[wc.WRID] += cqMod
			totC += cqMod
			r.progress.Add(1)
			if !p.NoPeak {
				t.Completed[min(totC, n)-1] = now()
			}
		}
	}
	if p.NoPeak {
		t.Completed[0] = now()
	}
	return t, nil
}

// postRecvs posts RxDepth receives of size bytes on every QP
// (ctx_set_recv_wqes), stepping through the receive area.
func (r *runCtx) postRecvs(size uint64) error {
	sge := make([]verbs.SGE, 1)
	for q, qp := range r.qps {
		for k := 0; k < r.p.RxDepth; k++ {
			if err := r.postRecv(qp, q, uint64(k), size, sge); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *runCtx) postRecv(qp *verbs.QP, q int, k, size uint64, sge []verbs.SGE) error {
	sge[0] = r.mr.SGE(int(r.recvArea(q)+r.offset(k, size)), int(size))
	if err := qp.PostRecv(&verbs.RecvWR{ID: uint64(q), SGL: sge}); err != nil {
		return fmt.Errorf("post receive: %w", err)
	}
	return nil
}

// runBWServer is run_iter_bw_server: count Iters receives per QP,
// reposting while fewer than Iters were posted, timed from the first
// arrival to the last.
func (r *runCtx) runBWServer(size uint64) (BWTimes, error) {
	p := r.p
	if p.Duration > 0 {
		return r.runBWServerDuration(size)
	}
	nq := len(r.qps)
	n := p.Iters * uint64(nq)
	posted := make([]uint64, nq)
	for q := range posted {
		posted[q] = uint64(p.RxDepth)
	}
	t := BWTimes{Posted: make([]int64, 1), Completed: make([]int64, 1)}
	start := time.Now()
	wcs := make([]verbs.WC, 16)
	sge := make([]verbs.SGE, 1)
	var rcnt uint64
	first := true
	for rcnt < n {
		got, err := spinWait(r.ctx, r.rcq, wcs, bwSpin)
		if err != nil {
			return t, fmt.Errorf("poll receive CQ: %w", causeOf(r.ctx, err))
		}
		if first {
			t.Posted[0] = int64(time.Since(start))
			first = false
		}
		for i := 0; i < got; i++ {
			wc := &wcs[i]
			if wc.Status != verbs.WCSuccess {
				return t, wcError("receive", wc, rcnt)
			}
			rcnt++
			r.progress.Add(1)
			q := int(wc.WRID)
			if posted[q]+1 <= p.Iters {
				if err := r.postRecv(r.qps[q], q, posted[q], size, sge); err != nil {
					return t, err
				}
				posted[q]++
			}
		}
	}
	t.Completed[0] = int64(time.Since(start))
	return t, nil
}

// waitOne waits for one completion on cq.
func (r *runCtx) waitOne(cq *verbs.CQ, wc []verbs.WC, what string, done uint64) error {
	if _, err := spinPoll(r.ctx, cq, wc[:1]); err != nil {
		return fmt.Errorf("poll %s CQ: %w", what, context.Cause(r.ctx))
	}
	if wc[0].Status != verbs.WCSuccess {
		return wcError(what, &wc[0], done)
	}
	r.progress.Add(1)
	return nil
}

// awaitWrite waits for the peer's RDMA WRITE that sets buf[at] to want. It
// reads the byte only once the region's remote-write sequence moved past
// *seen: the engine publishes the sequence after the bytes landed, so the
// read never races the transport (the peer writes again only after this
// side answered). It runs the device's engine between looks, yields the
// CPU when that found nothing, and gives up when ctx ends.
func (r *runCtx) awaitWrite(ctx context.Context, seen *uint64, buf []byte, at int, want byte) error {
	for i := 0; ; i++ {
		if s := r.mr.RemoteWriteSeq(); s != *seen {
			*seen = s
			if buf[at] == want {
				return nil
			}
			continue
		}
		if i&63 == 63 && ctx.Err() != nil {
			return ctx.Err()
		}
		// Run the engine here: the WRITE lands in this thread, with no
		// hand-off from the engine goroutine. Yield only when it had
		// nothing to do.
		if !r.dev.Verbs.Poll() {
			osYield()
		}
	}
}

// runLatWrite is run_iter_lat_write: each side RDMA-writes size bytes
// whose last byte is the iteration number, and waits for the peer's
// write to change the last byte of its own receive area. The client
// writes first.
func (r *runCtx) runLatWrite(size uint64) ([]int64, error) {
	p := r.p
	qp := r.qps[0]
	buf := r.mr.Bytes()
	postAt := int(r.sendArea(0) + size - 1)
	pollAt := int(r.recvArea(0) + size - 1)
	if pollAt >= len(buf) || postAt < 0 {
		return nil, fmt.Errorf("message size %d does not fit the buffer", size)
	}
	posted := make([]int64, p.Iters)
	sge := make([]verbs.SGE, 1)
	var wr verbs.SendWR
	wc := make([]verbs.WC, 1)
	start := time.Now()
	var scnt, rcnt, ccnt, seen uint64
	for scnt < p.Iters || ccnt < p.Iters || rcnt < p.Iters {
		if rcnt < p.Iters && !(scnt < 1 && p.Server) {
			rcnt++
			if err := r.awaitWrite(r.ctx, &seen, buf, pollAt, byte(rcnt)); err != nil {
				return nil, context.Cause(r.ctx)
			}
			r.progress.Add(1)
		}
		if scnt < p.Iters {
			posted[scnt] = int64(time.Since(start))
			scnt++
			buf[postAt] = byte(scnt)
			r.sendWR(&wr, sge, 0, 0, size)
			wr.Flags |= verbs.SendSignaled
			if err := r.postWait(qp, &wr); err != nil {
				return nil, err
			}
		}
		if ccnt < p.Iters {
			if err := r.waitOne(r.scq, wc, "send", ccnt); err != nil {
				return nil, err
			}
			ccnt++
		}
	}
	return posted, nil
}

// runLatRead is run_iter_lat for READ: one signaled read at a time.
func (r *runCtx) runLatRead(size uint64) ([]int64, error) {
	qp := r.qps[0]
	posted := make([]int64, r.p.Iters)
	sge := make([]verbs.SGE, 1)
	var wr verbs.SendWR
	wc := make([]verbs.WC, 1)
	start := time.Now()
	for k := uint64(0); k < r.p.Iters; k++ {
		r.sendWR(&wr, sge, 0, 0, size)
		wr.Flags |= verbs.SendSignaled
		posted[k] = int64(time.Since(start))
		if err := r.postWait(qp, &wr); err != nil {
			return nil, err
		}
		if err := r.waitOne(r.scq, wc, "send", k); err != nil {
			return nil, err
		}
	}
	return posted, nil
}

// runLatSend is run_iter_lat_send: wait for the peer's message (the
// client sends first), repost the receive, send, and wait for the send's
// completion when it is signaled (every CQMod-th and the last).
func (r *runCtx) runLatSend(size uint64) ([]int64, error) {
	p := r.p
	qp := r.qps[0]
	posted := make([]int64, p.Iters)
	sge := make([]verbs.SGE, 1)
	rsge := make([]verbs.SGE, 1)
	var wr verbs.SendWR
	wc := make([]verbs.WC, 1)
	cqMod := uint64(max(p.CQMod, 1))
	start := time.Now()
	var scnt, rcnt uint64
	rposted := uint64(p.RxDepth)
	for scnt < p.Iters || rcnt < p.Iters {
		if rcnt < p.Iters && !(scnt < 1 && !p.Server) {
			if err := r.waitOne(r.rcq, wc, "receive", rcnt); err != nil {
				return nil, err
			}
			rcnt++
			if rposted < p.Iters {
				if err := r.postRecv(qp, 0, rposted, size, rsge); err != nil {
					return nil, err
				}
				rposted++
			}
		}
		if scnt < p.Iters {
			posted[scnt] = int64(time.Since(start))
			scnt++
			r.sendWR(&wr, sge, 0, 0, size)
			signaled := scnt%cqMod == 0 || scnt == p.Iters
			if signaled {
				wr.Flags |= verbs.SendSignaled
			}
			if err := r.postWait(qp, &wr); err != nil {
				return nil, err
			}
			if signaled {
				if err := r.waitOne(r.scq, wc, "send", scnt); err != nil {
					return nil, err
				}
			}
		}
	}
	return posted, nil
}

// causeOf prefers the run context's cause (a stall) to err.
func causeOf(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// ErrStalled is perftest's check_alive verdict: no completion for too long.
var ErrStalled = errors.New("perftest: no progress (no completion or message) for too long; is the peer still running?")

// watch cancels the run with ErrStalled when progress stops advancing for
// limit; it returns a function that stops watching.
func (r *runCtx) watch(cancel context.CancelCauseFunc, limit time.Duration) func() {
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(limit / 10)
		defer tick.Stop()
		last, since := r.progress.Load(), time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				if p := r.progress.Load(); p != last {
					last, since = p, now
				} else if now.Sub(since) >= limit {
					cancel(ErrStalled)
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// runBi is run_iter_bi, send_bw's bidirectional loop: send as runBW does
// while receiving and reposting the peer's messages; the server sends only
// after its first receive. The send and receive CQ are one (see setup).
func (r *runCtx) runBi(size uint64) (BWTimes, error) {
	p := r.p
	iters := p.Iters
	nq := len(r.qps)
	n := iters * uint64(nq)
	cqMod := uint64(max(p.CQMod, 1))
	var t BWTimes
	if p.NoPeak {
		t.Posted, t.Completed = make([]int64, 1), make([]int64, 1)
	} else {
		t.Posted, t.Completed = make([]int64, n), make([]int64, n)
	}
	scnt := make([]uint64, nq)
	ccnt := make([]uint64, nq)
	rposted := make([]uint64, nq)
	for q := range rposted {
		rposted[q] = uint64(p.RxDepth)
	}
	var totS, totC, totR uint64
	wcs := make([]verbs.WC, 16)
	sge := make([]verbs.SGE, 1)
	rsge := make([]verbs.SGE, 1)
	var wr verbs.SendWR
	beforeFirstRx := p.Server
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	for totS < n || totC < n || totR < n {
		full := false
		for q, qp := range r.qps {
			for !beforeFirstRx && scnt[q] < iters && scnt[q]-ccnt[q]+1 <= uint64(p.TxDepth) {
				k := scnt[q]
				r.sendWR(&wr, sge, q, k, size)
				if k%cqMod == cqMod-1 || k == iters-1 {
					wr.Flags |= verbs.SendSignaled
				}
				if !p.NoPeak {
					t.Posted[totS] = now()
				}
				ok, err := post(qp, &wr)
				if err != nil {
					return t, err
				}
				if !ok {
					full = true
					break
				}
				scnt[q]++
				totS++
			}
		}
		got, err := r.scq.Poll(wcs)
		if err == nil && got == 0 {
			if full {
				runtime.Gosched()
				continue
			}
			// Nothing can be posted: every window is full or done.
			got, err = spinWait(r.ctx, r.scq, wcs, bwSpin)
		}
		if err != nil {
			return t, fmt.Errorf("poll CQ: %w", causeOf(r.ctx, err))
		}
		for i := 0; i < got; i++ {
			wc := &wcs[i]
			if wc.Status != verbs.WCSuccess {
				return t, wcError(wc.Opcode.String(), wc, totC+totR)
			}
			r.progress.Add(1)
			q := int(wc.WRID)
			if wc.Opcode == verbs.WCRecv {
				beforeFirstRx = false
				totR++
				if rposted[q]+1 <= iters {
					if err := r.postRecv(r.qps[q], q, rposted[q], size, rsge); err != nil {
						return t, err
					}
					rposted[q]++
				}
				continue
			}
			ccnt[q] += cqMod
			totC += cqMod
			if !p.NoPeak {
				t.Completed[min(totC, n)-1] = now()
			}
		}
	}
	if p.NoPeak {
		t.Completed[0] = now()
	}
	return t, nil
}

// Phases of a duration run (perftest's catch_alarm states): a warm-up
// margin, the sample window, a cool-down margin, the end.
const (
	phaseWarmUp = iota
	phaseSample
	phaseCoolDown
	phaseEnd
)

// durationClock places instants in the phases of a run started at start.
type durationClock struct {
	start         time.Time
	margin, total time.Duration
}

func (c durationClock) phase(now time.Time) int {
	switch e := now.Sub(c.start); {
	case e < c.margin:
		return phaseWarmUp
	case e < c.total-c.margin:
		return phaseSample
	case e < c.total:
		return phaseCoolDown
	}
	return phaseEnd
}

// times returns the sample window as perftest's tposted[0] and
// tcompleted[0], with the number of messages counted in it.
func (c durationClock) times(count uint64) BWTimes {
	return BWTimes{Posted: []int64{int64(c.margin)}, Completed: []int64{int64(c.total - c.margin)}, Messages: count}
}

// runBWDuration is run_iter_bw with -D: post for Duration, counting the
// completions that arrive in the sample window; work still in flight at
// the end is abandoned, as perftest does.
func (r *runCtx) runBWDuration(size uint64) (BWTimes, error) {
	p := r.p
	nq := len(r.qps)
	cqMod := uint64(max(p.CQMod, 1))
	scnt := make([]uint64, nq)
	ccnt := make([]uint64, nq)
	wcs := make([]verbs.WC, 16)
	sge := make([]verbs.SGE, 1)
	var wr verbs.SendWR
	clock := durationClock{start: time.Now(), margin: p.Margin, total: p.Duration}
	endCtx, cancel := context.WithDeadline(r.ctx, clock.start.Add(p.Duration))
	defer cancel()
	var count uint64
	for clock.phase(time.Now()) != phaseEnd {
		full := false
		for q, qp := range r.qps {
			for scnt[q]-ccnt[q]+1 <= uint64(p.TxDepth) {
				r.sendWR(&wr, sge, q, scnt[q], size)
				if scnt[q]%cqMod == cqMod-1 {
					wr.Flags |= verbs.SendSignaled
				}
				ok, err := post(qp, &wr)
				if err != nil {
					return BWTimes{}, err
				}
				if !ok {
					full = true
					break
				}
				scnt[q]++
			}
		}
		got, err := r.scq.Poll(wcs)
		if err == nil && got == 0 {
			if full {
				runtime.Gosched()
				continue
			}
			got, err = spinWait(endCtx, r.scq, wcs, bwSpin)
		}
		if err != nil {
			if r.ctx.Err() == nil && endCtx.Err() != nil {
				break // the run's time is up
			}
			return BWTimes{}, fmt.Errorf("poll send CQ: %w", causeOf(r.ctx, err))
		}
		sampling := clock.phase(time.Now()) == phaseSample
		for i := 0; i < got; i++ {
			wc := &wcs[i]
			if wc.Status != verbs.WCSuccess {
				return BWTimes{}, wcError("send", wc, count)
			}
			ccnt[wc.WRID] += cqMod
			r.progress.Add(1)
			if sampling {
				count += cqMod
			}
		}
	}
	return clock.times(count), nil
}

// runBWServerDuration is run_iter_bw_server with -D: the clock starts at
// the first arrival (set_on_first_rx_packet); receives are reposted
// without limit and counted in the sample window.
func (r *runCtx) runBWServerDuration(size uint64) (BWTimes, error) {
	p := r.p
	nq := len(r.qps)
	posted := make([]uint64, nq)
	for q := range posted {
		posted[q] = uint64(p.RxDepth)
	}
	wcs := make([]verbs.WC, 16)
	sge := make([]verbs.SGE, 1)
	var clock durationClock
	waitCtx := r.ctx
	var count uint64
	for clock.start.IsZero() || clock.phase(time.Now()) != phaseEnd {
		got, err := spinWait(waitCtx, r.rcq, wcs, bwSpin)
		if err != nil {
			if r.ctx.Err() == nil && waitCtx.Err() != nil {
				break // the run's time is up
			}
			return BWTimes{}, fmt.Errorf("poll receive CQ: %w", causeOf(r.ctx, err))
		}
		if clock.start.IsZero() {
			clock = durationClock{start: time.Now(), margin: p.Margin, total: p.Duration}
			var cancel context.CancelFunc
			waitCtx, cancel = context.WithDeadline(r.ctx, clock.start.Add(p.Duration))
			defer cancel()
		}
		sampling := clock.phase(time.Now()) == phaseSample
		for i := 0; i < got; i++ {
			wc := &wcs[i]
			if wc.Status != verbs.WCSuccess {
				return BWTimes{}, wcError("receive", wc, count)
			}
			r.progress.Add(1)
			if sampling {
				count++
			}
			q := int(wc.WRID)
			if err := r.postRecv(r.qps[q], q, posted[q], size, sge); err != nil {
				return BWTimes{}, err
			}
			posted[q]++
		}
	}
	return clock.times(count), nil
}
