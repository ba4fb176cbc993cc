package roce

import "time"

// A raised engine thread (priority.go) preempts the applications on its
// CPU, and under SCHED_FIFO they get the CPU back only when it sleeps: an
// engine that always finds work (a bandwidth test) would starve them.
// The budget bounds that as a token bucket of raised running time: the
// thread may run raised for at most burst at a time, and on average
// share percent of the time; once it is spent the thread runs at normal
// priority, where the scheduler shares the CPU fairly, until half the
// burst has come back. Sleeping and running lowered earn time back.

const (
	// budgetBurst is the longest a raised thread runs without sleeping
	// (when its bucket is full and it earns nothing meanwhile: twice as
	// long at budgetSharePct 50): much less than a scheduler slice.
	budgetBurst = time.Millisecond
	// budgetSharePct is the percentage of a CPU a raised thread may
	// take over time.
	budgetSharePct = 50
)

// budget is the token bucket. Times are on one monotonic clock; the
// engine goroutine alone uses it.
type budget struct {
	burst    time.Duration
	sharePct int64
	// tokens is the raised running time left; last is when it was
	// last brought up to date.
	tokens, last time.Duration
	// running is set while the thread runs raised; resting once the
	// tokens ran out, until half the burst is back.
	running, resting bool
}

func newBudget(burst time.Duration, sharePct int) budget {
	return budget{burst: burst, sharePct: int64(sharePct), tokens: burst}
}

// advance brings tokens up to now: earned at share, spent while running.
func (b *budget) advance(now time.Duration) {
	dt := now - b.last
	if dt <= 0 {
		return
	}
	b.last = now
	b.tokens += dt * time.Duration(b.sharePct) / 100
	if b.running {
		b.tokens -= dt
	}
	b.tokens = min(b.tokens, b.burst)
}

// start is when the thread begins to run raised (raised, or woken up
// raised); stop when it stops (lowered, or asleep).
func (b *budget) start(now time.Duration) {
	b.advance(now)
	b.running = true
}

func (b *budget) stop(now time.Duration) {
	b.advance(now)
	b.running = false
}

// spent reports whether the raised thread has used up its tokens, and
// must be lowered, at now.
func (b *budget) spent(now time.Duration) bool {
	b.advance(now)
	if b.tokens <= 0 {
		b.resting = true
	}
	return b.resting
}

// allows reports whether the thread may be raised at now.
func (b *budget) allows(now time.Duration) bool {
	b.advance(now)
	if b.resting && b.tokens >= b.burst/2 {
		b.resting = false
	}
	return !b.resting
}
