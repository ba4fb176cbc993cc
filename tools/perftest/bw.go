package perftest

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/softnic/softnic/verbs"
)

// sendWindow is the sending half of the bandwidth loops (run_iter_bw,
// run_iter_bi and their duration mode): per QP the messages posted and
// completed, at most TxDepth in flight, every CQMod-th signaled (and the
// last of a counted run), with the timestamps the peak needs.
type sendWindow struct {
	r          *runCtx
	size       uint64
	iters      uint64 // messages per QP; 0: no limit (a duration run)
	n          uint64 // iters times the QPs
	cqMod      uint64
	scnt, ccnt []uint64
	totS, totC uint64
	stamps     bool // per-message timestamps in t (not with NoPeak)
	t          BWTimes
	start      time.Time
	wr         verbs.SendWR
	sge        []verbs.SGE
	wcs        []verbs.WC
}

// newSendWindow allocates what the loop needs, then starts the clock.
func (r *runCtx) newSendWindow(size, iters uint64) *sendWindow {
	nq := len(r.qps)
	w := &sendWindow{r: r, size: size, iters: iters, n: iters * uint64(nq), cqMod: uint64(max(r.p.CQMod, 1)),
		scnt: make([]uint64, nq), ccnt: make([]uint64, nq), sge: make([]verbs.SGE, 1), wcs: make([]verbs.WC, 16)}
	switch {
	case iters == 0:
	case r.p.NoPeak:
		w.t.Posted, w.t.Completed = make([]int64, 1), make([]int64, 1)
	default:
		w.t.Posted, w.t.Completed = make([]int64, w.n), make([]int64, w.n)
		w.stamps = true
	}
	w.start = time.Now()
	return w
}

func (w *sendWindow) now() int64 { return int64(time.Since(w.start)) }

// room reports whether QP q may post another message.
func (w *sendWindow) room(q int) bool {
	return (w.iters == 0 || w.scnt[q] < w.iters) && w.scnt[q]-w.ccnt[q]+1 <= uint64(w.r.p.TxDepth)
}

// fill posts on every QP while its window has room; full reports that a
// send queue refused a post (a completion will free a slot soon).
func (w *sendWindow) fill() (full bool, err error) {
	for q, qp := range w.r.qps {
		for w.room(q) {
			k := w.scnt[q]
			w.r.sendWR(&w.wr, w.sge, q, k, w.size)
			if k%w.cqMod == w.cqMod-1 || (w.iters > 0 && k == w.iters-1) {
				w.wr.Flags |= verbs.SendSignaled
			}
			if w.stamps {
				w.t.Posted[w.totS] = w.now()
			}
			ok, err := post(qp, &w.wr)
			if err != nil {
				return full, err
			}
			if !ok {
				full = true
				break
			}
			w.scnt[q]++
			w.totS++
		}
	}
	return full, nil
}

// completed counts a send completion of QP q, which covers CQMod messages.
func (w *sendWindow) completed(q int) {
	w.ccnt[q] += w.cqMod
	w.totC += w.cqMod
	if w.stamps {
		w.t.Completed[min(w.totC, w.n)-1] = w.now()
	}
}

// sendsDone counts the send completions in wcs, failing at the first
// unsuccessful one.
func (w *sendWindow) sendsDone(wcs []verbs.WC) error {
	for i := range wcs {
		wc := &wcs[i]
		if wc.Status != verbs.WCSuccess {
			return wcError("send", wc, w.totC)
		}
		w.completed(int(wc.WRID))
		w.r.progress.Add(1)
	}
	return nil
}

// times ends a counted run: without the peak, Posted[0] is the start and
// Completed[0] the end.
func (w *sendWindow) times() BWTimes {
	if !w.stamps {
		w.t.Completed[0] = w.now()
	}
	return w.t
}

// pollSends polls the send CQ once. When it is empty it yields if a send
// queue was full (a completion will come soon), or else spins a while and
// then blocks until a completion arrives or ctx ends.
func (r *runCtx) pollSends(ctx context.Context, wcs []verbs.WC, full bool) (int, error) {
	got, err := r.scq.Poll(wcs)
	if err != nil || got > 0 {
		return got, err
	}
	if full {
		runtime.Gosched()
		return 0, nil
	}
	return spinWait(ctx, r.scq, wcs, bwSpin, r.pin)
}

// runBW is run_iter_bw: keep up to TxDepth messages in flight per QP,
// signal every CQMod-th and the last, and time posts and completions.
func (r *runCtx) runBW(size uint64) (BWTimes, error) {
	if r.p.Duration > 0 {
		return r.runBWDuration(size)
	}
	w := r.newSendWindow(size, r.p.Iters)
	for w.totS < w.n || w.totC < w.n {
		full, err := w.fill()
		if err != nil {
			return w.t, err
		}
		if w.totC >= w.n {
			continue
		}
		got, err := r.pollSends(r.ctx, w.wcs, full)
		if err != nil {
			return w.t, fmt.Errorf("poll send CQ: %w", causeOf(r.ctx, err))
		}
		if err := w.sendsDone(w.wcs[:got]); err != nil {
			return w.t, err
		}
	}
	return w.times(), nil
}

// recvsPosted returns, per QP, the receives posted before a loop starts.
func (r *runCtx) recvsPosted() []uint64 {
	posted := make([]uint64, len(r.qps))
	for q := range posted {
		posted[q] = uint64(r.p.RxDepth)
	}
	return posted
}

// repost posts QP q's next receive, the posted[q]-th.
func (r *runCtx) repost(q int, posted []uint64, size uint64, sge []verbs.SGE) error {
	if err := r.postRecv(r.qps[q], q, posted[q], size, sge); err != nil {
		return err
	}
	posted[q]++
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
	n := p.Iters * uint64(len(r.qps))
	posted := r.recvsPosted()
	t := BWTimes{Posted: make([]int64, 1), Completed: make([]int64, 1)}
	start := time.Now()
	wcs := make([]verbs.WC, 16)
	sge := make([]verbs.SGE, 1)
	var rcnt uint64
	first := true
	for rcnt < n {
		got, err := spinWait(r.ctx, r.rcq, wcs, bwSpin, r.pin)
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
			if q := int(wc.WRID); posted[q]+1 <= p.Iters {
				if err := r.repost(q, posted, size, sge); err != nil {
					return t, err
				}
			}
		}
	}
	t.Completed[0] = int64(time.Since(start))
	return t, nil
}

// runBi is run_iter_bi, send_bw's bidirectional loop: send as runBW does
// while receiving and reposting the peer's messages; the server sends only
// after its first receive. The send and receive CQ are one (see setup).
func (r *runCtx) runBi(size uint64) (BWTimes, error) {
	p := r.p
	rposted := r.recvsPosted()
	rsge := make([]verbs.SGE, 1)
	w := r.newSendWindow(size, p.Iters)
	var totR uint64
	beforeFirstRx := p.Server
	for w.totS < w.n || w.totC < w.n || totR < w.n {
		full := false
		if !beforeFirstRx {
			var err error
			if full, err = w.fill(); err != nil {
				return w.t, err
			}
		}
		// An empty poll with no queue full means nothing can be posted:
		// every window is full or done, so pollSends may block.
		got, err := r.pollSends(r.ctx, w.wcs, full)
		if err != nil {
			return w.t, fmt.Errorf("poll CQ: %w", causeOf(r.ctx, err))
		}
		for i := 0; i < got; i++ {
			wc := &w.wcs[i]
			if wc.Status != verbs.WCSuccess {
				return w.t, wcError(wc.Opcode.String(), wc, w.totC+totR)
			}
			r.progress.Add(1)
			q := int(wc.WRID)
			if wc.Opcode != verbs.WCRecv {
				w.completed(q)
				continue
			}
			beforeFirstRx = false
			totR++
			if rposted[q]+1 <= p.Iters {
				if err := r.repost(q, rposted, size, rsge); err != nil {
					return w.t, err
				}
			}
		}
	}
	return w.times(), nil
}
