package perftest

import (
	"context"
	"syscall"

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

// spinPoll polls cq until it returns a completion, like perftest's busy
// polling of ibv_poll_cq, yielding the CPU between polls; it gives up when
// ctx ends.
func spinPoll(ctx context.Context, cq *verbs.CQ, wc []verbs.WC) (int, error) {
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
