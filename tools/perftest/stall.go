package perftest

import (
	"context"
	"errors"
	"time"
)

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
