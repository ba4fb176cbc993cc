package perftest

import (
	"context"
	"syscall"
	"time"

	"github.com/softnic/softnic/verbs"
)

// osYield gives the CPU to another runnable thread (sched_yield), where
// runtime.Gosched only lets other goroutines of this process run. The
// latency loops spin like perftest's, but softnic's engine runs in this
// process's threads and in the peer's: a poller that never leaves its CPU
// makes the woken engine wait for the scheduler's time slice (hundreds of
// µs on two cores). Yielding between polls keeps the spin's reaction time
// and lets the engine run at once.
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// SpinPoll polls cq until it returns a completion, like perftest's busy
// polling of ibv_poll_cq, yielding the CPU between polls; it gives up when
// ctx ends.
func SpinPoll(ctx context.Context, cq *verbs.CQ, wc []verbs.WC) (int, error) {
	for i := 0; ; i++ {
		if n, err := cq.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		if i&63 == 63 && ctx.Err() != nil {
			return 0, ctx.Err()
		}
		osYield()
	}
}

// bwSpin is how long the bandwidth loops poll an empty CQ before they block.
// perftest busy-polls. Blocking at once costs a goroutine wake-up per batch
// of completions, long enough for the send queue to drain; spinning without
// end takes the CPU from the engines (read_bw suffers most). The figures
// are in bench/results/ANALYSIS.md.
const bwSpin = 50 * time.Microsecond

// spinWait polls cq, yielding the CPU between empty polls, for up to d,
// then blocks in Wait until a completion arrives or ctx ends.
func spinWait(ctx context.Context, cq *verbs.CQ, wc []verbs.WC, d time.Duration) (int, error) {
	start := time.Now()
	for i := 0; ; i++ {
		if n, err := cq.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		if i&15 == 15 && time.Since(start) > d {
			return cq.Wait(ctx, wc)
		}
		osYield()
	}
}
