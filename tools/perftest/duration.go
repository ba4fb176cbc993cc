package perftest

import (
	"context"
	"fmt"
	"time"

	"github.com/softnic/softnic/verbs"
)

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
	w := r.newSendWindow(size, 0)
	clock := durationClock{start: time.Now(), margin: p.Margin, total: p.Duration}
	endCtx, cancel := context.WithDeadline(r.ctx, clock.start.Add(p.Duration))
	defer cancel()
	var count uint64
	for clock.phase(time.Now()) != phaseEnd {
		full, err := w.fill()
		if err != nil {
			return BWTimes{}, err
		}
		got, err := r.pollSends(endCtx, w.wcs, full)
		if err != nil {
			if r.ctx.Err() == nil && endCtx.Err() != nil {
				break // the run's time is up
			}
			return BWTimes{}, fmt.Errorf("poll send CQ: %w", causeOf(r.ctx, err))
		}
		if got == 0 {
			continue
		}
		sampling := clock.phase(time.Now()) == phaseSample
		for i := 0; i < got; i++ {
			wc := &w.wcs[i]
			if wc.Status != verbs.WCSuccess {
				return BWTimes{}, wcError("send", wc, count)
			}
			w.completed(int(wc.WRID))
			r.progress.Add(1)
			if sampling {
				count += w.cqMod
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
	posted := r.recvsPosted()
	wcs := make([]verbs.WC, 16)
	sge := make([]verbs.SGE, 1)
	var clock durationClock
	waitCtx := r.ctx
	var count uint64
	for clock.start.IsZero() || clock.phase(time.Now()) != phaseEnd {
		got, err := spinWait(waitCtx, r.rcq, wcs, bwSpin, r.pin)
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
			if err := r.repost(int(wc.WRID), posted, size, sge); err != nil {
				return BWTimes{}, err
			}
		}
	}
	return clock.times(count), nil
}
