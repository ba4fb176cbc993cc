package roce

import (
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Where applications take every CPU (an MPI job runs a rank per core), an
// engine that polls at the scheduler's normal priority gets the CPU a
// time slice at a time, milliseconds after the frame or the post came.
// An engine with a Priority behaves there as an interrupt-driven NIC:
// once its spin finds the CPU contested (contention.go) it sleeps as soon
// as it is idle, on the link and the hosts' doorbell, and its thread
// sleeps at a raised priority, so that the kernel's wake-up preempts the
// spinning applications; a budget (budget.go) lowers it again before it
// could starve them.

// Priority is how an engine's thread is raised while it sleeps and works
// (DeviceConfig.Priority).
type Priority int

const (
	// PriorityOff leaves the engine threads at the process's priority,
	// and the engines spin and sleep as without contention.
	PriorityOff Priority = iota
	// PriorityAuto is PriorityRT where permitted (CAP_SYS_NICE), else
	// PriorityNice where permitted, else PriorityOff.
	PriorityAuto
	// PriorityRT raises the thread to SCHED_FIFO (RTPriority).
	PriorityRT
	// PriorityNice raises the thread to nice RaisedNice.
	PriorityNice
)

// RTPriority is the SCHED_FIFO priority of a raised engine thread: above
// every normal thread, below the kernel's threaded interrupt handlers
// (50), which deliver its frames.
const RTPriority = 10

// RaisedNice is a raised engine thread's nice value where SCHED_FIFO is
// not permitted: ten times the weight of a nice 0 spinner.
const RaisedNice = -10

func (p Priority) String() string {
	switch p {
	case PriorityOff:
		return "off"
	case PriorityAuto:
		return "auto"
	case PriorityRT:
		return "rt"
	case PriorityNice:
		return "nice"
	}
	return fmt.Sprintf("Priority(%d)", int(p))
}

// ParsePriority parses off, auto, rt or nice.
func ParsePriority(s string) (Priority, error) {
	for _, p := range []Priority{PriorityOff, PriorityAuto, PriorityRT, PriorityNice} {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, fmt.Errorf("engine priority %q: want off, auto, rt or nice", s)
}

// Describe says what a raised engine thread runs at, for the logs.
func (p Priority) Describe() string {
	switch p {
	case PriorityRT:
		return fmt.Sprintf("SCHED_FIFO %d while working, at most %v at a time and %d%% of a CPU over time", RTPriority, budgetBurst, budgetSharePct)
	case PriorityNice:
		return fmt.Sprintf("nice %d while working, at most %v at a time and %d%% of a CPU over time", RaisedNice, budgetBurst, budgetSharePct)
	}
	return "normal priority (the engines spin, then sleep)"
}

// resolvePriority turns PriorityAuto into what this process may use: it
// tries each on a thread of its own and puts the thread back.
func resolvePriority(p Priority) Priority {
	if p != PriorityAuto {
		return p
	}
	got := make(chan Priority)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for _, try := range []Priority{PriorityRT, PriorityNice} {
			if setThreadPriority(try) == nil {
				setThreadPriority(PriorityOff)
				got <- try
				return
			}
		}
		got <- PriorityOff
	}()
	return <-got
}

// setThreadPriority sets the calling thread's scheduling: p raised, or
// PriorityOff for SCHED_OTHER at nice 0. The goroutine must be locked to
// its thread.
func setThreadPriority(p Priority) error {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr}
	switch p {
	case PriorityRT:
		attr.Policy, attr.Priority = unix.SCHED_FIFO, RTPriority
	case PriorityNice:
		attr.Nice = RaisedNice
	}
	return unix.SchedSetAttr(0, &attr, 0)
}

// raiser is an engine goroutine's hold on its thread's priority: the
// thread is raised while it sleeps and while its passes work, within the
// budget, and lowered while it spins and for the budget's rest.
type raiser struct {
	prio   Priority // PriorityRT or PriorityNice
	raised bool
	budget budget
}

// newRaiser returns nil for PriorityOff. The caller locks its goroutine
// to its thread.
func newRaiser(p Priority) *raiser {
	if p != PriorityRT && p != PriorityNice {
		return nil
	}
	return &raiser{prio: p, budget: newBudget(budgetBurst, budgetSharePct)}
}

// raise raises the thread if the budget allows, at now; it reports
// whether the thread is raised.
func (r *raiser) raise(now time.Duration) bool {
	if r.raised {
		return true
	}
	if !r.budget.allows(now) {
		return false
	}
	if setThreadPriority(r.prio) != nil {
		return false
	}
	r.raised = true
	r.budget.start(now)
	return true
}

// lower puts the thread back to normal priority at now.
func (r *raiser) lower(now time.Duration) {
	if !r.raised {
		return
	}
	setThreadPriority(PriorityOff)
	r.raised = false
	r.budget.stop(now)
}

// slept tells the budget the raised thread was off the CPU from since
// to now (it slept in the link's Wait).
func (r *raiser) slept(since, now time.Duration) {
	if r.raised {
		r.budget.stop(since)
		r.budget.start(now)
	}
}

// check lowers the thread once the budget is spent; the engine calls it
// after each pass while raised.
func (r *raiser) check(now time.Duration) {
	if r.raised && r.budget.spent(now) {
		r.lower(now)
	}
}
