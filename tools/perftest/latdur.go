package perftest

import (
	"context"
	"fmt"
	"time"

	"github.com/softnic/softnic/verbs"
)

// LatDurReport is the line of a latency test run for a duration
// (print_report_lat_duration): the iterations counted in the sample
// window, the average latency and the transactions per second.
type LatDurReport struct {
	Size  uint64
	Iters uint64
	TAvg  float64 // microseconds
	TPS   float64
}

// LatencyDurationReport computes it as perftest does: the window divided
// by the round-trip factor (2 for write and send, 1 for read) and the
// iterations, and iterations per second.
func LatencyDurationReport(p *Params, size uint64, t BWTimes) LatDurReport {
	rep := LatDurReport{Size: size, Iters: t.Messages}
	if len(t.Posted) == 0 || len(t.Completed) == 0 || t.Messages == 0 {
		return rep
	}
	rtt := 2.0
	if v := p.Verb(); v == VerbRead || v == VerbAtomic {
		rtt = 1
	}
	window := float64(t.Completed[0] - t.Posted[0]) // ns
	rep.TAvg = window / 1000 / rtt / float64(t.Messages)
	rep.TPS = float64(t.Messages) / (window / 1e9)
	return rep
}

// durationRun is the clock and deadline of a latency duration run.
type durationRun struct {
	clock durationClock
	end   context.Context
	stop  context.CancelFunc
}

func (r *runCtx) startDuration() *durationRun {
	d := &durationRun{clock: durationClock{start: time.Now(), margin: r.p.Margin, total: r.p.Duration}}
	d.end, d.stop = context.WithDeadline(r.ctx, d.clock.start.Add(r.p.Duration))
	return d
}

// result is a run's figures: the sample window and the count in it, or
// nothing after an error.
func (d *durationRun) result(count uint64, err error) (BWTimes, error) {
	if err != nil {
		return BWTimes{}, err
	}
	return d.clock.times(count), nil
}

// waitUntilEnd waits for one successful completion; false when the run's
// time ran out first.
func (r *runCtx) waitUntilEnd(d *durationRun, cq *verbs.CQ, wc []verbs.WC, what string, done uint64) (bool, error) {
	if _, err := SpinPoll(d.end, cq, wc[:1], r.pin); err != nil {
		if r.ctx.Err() == nil && d.end.Err() != nil {
			return false, nil
		}
		return false, fmt.Errorf("poll %s CQ: %w", what, causeOf(r.ctx, err))
	}
	if wc[0].Status != verbs.WCSuccess {
		return false, wcError(what, &wc[0], done)
	}
	r.progress.Add(1)
	return true, nil
}

// runLatWriteDuration is run_iter_lat_write with -D: ping-pong RDMA
// writes until the time is up, counting this side's completed writes in
// the sample window.
func (r *runCtx) runLatWriteDuration(size uint64) (BWTimes, error) {
	p := r.p
	qp := r.qps[0]
	buf := r.mr.Bytes()
	postAt := int(r.sendArea(0) + size - 1)
	pollAt := int(r.recvArea(0) + size - 1)
	if pollAt >= len(buf) {
		return BWTimes{}, fmt.Errorf("message size %d does not fit the buffer", size)
	}
	sge := make([]verbs.SGE, 1)
	var wr verbs.SendWR
	wc := make([]verbs.WC, 1)
	d := r.startDuration()
	defer d.stop()
	var scnt, rcnt, count, seen uint64
loop:
	for d.clock.phase(time.Now()) != phaseEnd {
		if !(scnt < 1 && p.Server) {
			rcnt++
			if err := r.awaitWrite(d.end, &seen, buf, pollAt, byte(rcnt)); err != nil {
				if r.ctx.Err() != nil {
					return BWTimes{}, context.Cause(r.ctx)
				}
				break loop
			}
			r.progress.Add(1)
		}
		scnt++
		buf[postAt] = byte(scnt)
		if ok, err := r.signaledOp(d, qp, &wr, sge, size, wc, scnt, &count); !ok {
			return d.result(count, err)
		}
	}
	return d.result(count, nil)
}

// signaledOp posts one signaled operation of size bytes on qp and waits for
// its completion, as an iteration of perftest's duration-mode latency loops
// does; a completion inside the sample window adds to count. It returns false
// once the test's time is up.
func (r *runCtx) signaledOp(d *durationRun, qp *verbs.QP, wr *verbs.SendWR, sge []verbs.SGE, size uint64,
	wc []verbs.WC, seq uint64, count *uint64) (bool, error) {
	r.sendWR(wr, sge, 0, 0, size)
	wr.Flags |= verbs.SendSignaled
	if err := r.postWait(qp, wr); err != nil {
		return false, err
	}
	ok, err := r.waitUntilEnd(d, r.scq, wc, "send", seq)
	if err != nil || !ok {
		return false, err
	}
	if d.clock.phase(time.Now()) == phaseSample {
		*count++
	}
	return true, nil
}

// runLatReadDuration is run_iter_lat for READ with -D.
func (r *runCtx) runLatReadDuration(size uint64) (BWTimes, error) {
	qp := r.qps[0]
	sge := make([]verbs.SGE, 1)
	var wr verbs.SendWR
	wc := make([]verbs.WC, 1)
	d := r.startDuration()
	defer d.stop()
	var count uint64
	for k := uint64(0); d.clock.phase(time.Now()) != phaseEnd; k++ {
		if ok, err := r.signaledOp(d, qp, &wr, sge, size, wc, k, &count); !ok {
			return d.result(count, err)
		}
	}
	return d.result(count, nil)
}

// runLatSendDuration is run_iter_lat_send with -D: the receives counted in
// the sample window make the iterations; receives are reposted without
// limit.
func (r *runCtx) runLatSendDuration(size uint64) (BWTimes, error) {
	p := r.p
	b := newLatBufs()
	cqMod := uint64(max(p.CQMod, 1))
	d := r.startDuration()
	defer d.stop()
	var scnt, rcnt, count uint64
	rposted := r.recvsPosted()
	for d.clock.phase(time.Now()) != phaseEnd {
		if !(scnt < 1 && !p.Server) {
			ok, err := r.waitUntilEnd(d, r.rcq, b.wc, "receive", rcnt)
			if err != nil {
				return BWTimes{}, err
			}
			if !ok {
				break
			}
			rcnt++
			if d.clock.phase(time.Now()) == phaseSample {
				count++
			}
			if err := r.repost(0, rposted, size, b.rsge); err != nil {
				return BWTimes{}, err
			}
		}
		scnt++
		signaled := scnt%cqMod == 0
		if err := r.postLatSend(&b.wr, b.sge, size, signaled); err != nil {
			return BWTimes{}, err
		}
		if signaled {
			ok, err := r.waitUntilEnd(d, r.scq, b.wc, "send", scnt)
			if err != nil {
				return BWTimes{}, err
			}
			if !ok {
				break
			}
		}
	}
	return d.clock.times(count), nil
}
