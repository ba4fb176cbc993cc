package roce

import (
	"runtime"
	"time"
)

// An engine finds its CPU contested when its spin, yielding between
// passes, overran its length by far: a yield to a thread that does not
// yield back (an application's busy loop) returns after a scheduler slice,
// milliseconds, where one to another poller (the peer's engine, a tool
// polling its CQ) returns in microseconds. While contested, an engine with
// a Priority sleeps as soon as it is idle, raised (priority.go), instead
// of spinning at normal priority for a CPU it would get a slice at a time;
// after contendHold it spins again, which finds out whether the
// contention lasts.
const (
	contendOverrun = 500 * time.Microsecond
	contendHold    = 100 * time.Millisecond
)

// startRaiser locks the engine goroutine to its thread, whose priority
// the raiser changes, if the device has a Priority; stopRaiser undoes it.
func (ln *lane) startRaiser() {
	if ln.raiser = newRaiser(ln.d.prio); ln.raiser != nil {
		runtime.LockOSThread()
	}
}

func (ln *lane) stopRaiser() {
	if ln.raiser != nil {
		ln.lower()
		runtime.UnlockOSThread()
	}
}

// noteSpin looks at a spin that ended after idle: one that overran its
// length by far makes the CPU contested for contendHold.
func (ln *lane) noteSpin(idle time.Duration) {
	if ln.raiser != nil && idle >= ln.d.spin+contendOverrun {
		ln.contended = ln.idleSince + idle + contendHold
		ln.ctr.Contended.Add(1)
	}
}

// isContended reports whether the engine's CPU is contested now.
func (ln *lane) isContended() bool {
	if ln.contended == 0 {
		return false
	}
	if monoClock() >= ln.contended {
		ln.contended = 0
		return false
	}
	return true
}

// afterWork, after a pass that worked, lowers a raised thread whose budget
// is spent, and raises it again while contested once the budget allows.
func (ln *lane) afterWork() {
	r := ln.raiser
	now := monoClock()
	switch {
	case r.raised:
		r.check(now)
	case ln.contended != 0 && now < ln.contended:
		r.raise(now)
	}
}

// lower puts the thread back to normal priority, if raised.
func (ln *lane) lower() {
	if ln.raiser != nil && ln.raiser.raised {
		ln.raiser.lower(monoClock())
	}
}

// raiseToSleep raises the thread before it sleeps, so that the kernel's
// wake-up preempts what runs on the CPU then; it returns when the sleep
// began.
func (ln *lane) raiseToSleep() time.Duration {
	if ln.raiser == nil {
		return 0
	}
	now := monoClock()
	ln.raiser.raise(now)
	return now
}

// wokeRaised tells the budget the thread slept from since.
func (ln *lane) wokeRaised(since time.Duration) {
	if ln.raiser != nil {
		ln.raiser.slept(since, monoClock())
	}
}
