package perftest

import (
	"context"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/softnic/softnic/internal/cpupin"
	"github.com/softnic/softnic/verbs"
)

// osYield gives the CPU to another runnable thread (sched_yield), where
// runtime.Gosched only lets other goroutines of this process run. The
// latency loops spin like perftest's, but softnic's engine runs in this
// process's threads and in the peer's: a poller that never leaves its CPU
// makes the woken engine wait for the scheduler's time slice (hundreds of
// µs on two cores). Yielding between polls keeps the spin's reaction time
// and lets the engine run at once.
//
// It is a raw system call: sched_yield never blocks, and the runtime's
// monitor thread (sysmon), finding a poller that runs for 10 ms in a
// system call, takes its P and starts over polling every 20 µs, on
// another CPU. In a two-vCPU guest sysmon then kept the second vCPU about
// a quarter busy (1.5 s of system time over a 5 s write_lat run, against
// 0.3 s with the raw call).
func osYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// pollYield gives the CPU away between empty polls: to other threads
// (osYield) and, when the process has a single P, to its other goroutines
// as well. With one P those (the engine goroutine back from a nap, the
// runtime's timers) run only when the poller enters the Go scheduler,
// otherwise at its preemption, every 10 ms: in a one-vCPU guest, write_lat's
// typical round trip was 1.7-1.9 x rdma_rxe's without runtime.Gosched and
// 1.1-1.2 x with it. With more Ps, Gosched
// would wake an idle P's thread at every poll.
func pollYield(pin *cpupin.Pin) {
	pin.Check()
	if oneP() {
		runtime.Gosched()
	}
	osYield()
}

// oneP reports whether the process runs goroutines on a single P, as of
// the first poll: runtime.GOMAXPROCS takes the scheduler's lock, and the
// latency loops ask once per round trip.
var oneP = sync.OnceValue(func() bool { return runtime.GOMAXPROCS(0) == 1 })

// SpinPoll polls cq until it returns a completion, like perftest's busy
// polling of ibv_poll_cq, yielding the CPU between polls; it gives up when
// ctx ends. pin, if not nil, is the caller's hold on its CPU.
func SpinPoll(ctx context.Context, cq *verbs.CQ, wc []verbs.WC, pin *cpupin.Pin) (int, error) {
	for i := 0; ; i++ {
		if n, err := cq.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		if i&63 == 63 && ctx.Err() != nil {
			return 0, ctx.Err()
		}
		pollYield(pin)
	}
}

// bwSpin is how long the bandwidth loops poll an empty CQ before they block.
// perftest busy-polls. Blocking at once costs a goroutine wake-up per batch
// of completions, long enough for the send queue to drain; spinning without
// end takes the CPU from the engines (read_bw suffers most).
const bwSpin = 50 * time.Microsecond

// spinWait polls cq, yielding the CPU between empty polls, for up to d,
// then blocks in Wait until a completion arrives or ctx ends.
func spinWait(ctx context.Context, cq *verbs.CQ, wc []verbs.WC, d time.Duration, pin *cpupin.Pin) (int, error) {
	start := time.Now()
	for i := 0; ; i++ {
		if n, err := cq.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		if i&15 == 15 && time.Since(start) > d {
			return cq.Wait(ctx, wc)
		}
		pin.Check()
		osYield()
	}
}
