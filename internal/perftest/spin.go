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

// bwSpin is how long the bandwidth loops poll an empty CQ before they block.
// perftest busy-polls; blocking at once costs a goroutine wake-up per batch
// of completions, long enough to drain the send queue: 64-byte write_bw ran
// at 0.63 Mpps blocking at once and 0.78 Mpps spinning first, write_bw of
// 64 KiB at IB MTU 1024 at 5.6 and 7.0 Gb/s. Spinning without end (0.74
// Mpps, 6.5 Gb/s) took the CPU from the engines in read_bw.
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
