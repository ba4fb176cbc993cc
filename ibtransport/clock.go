package ibtransport

import "time"

// clockReuse is how many passes in a row may check timers against the
// last clock reading instead of a new one, when nothing in them read the
// clock.
const clockReuse = 16

// engineClock is an engine's view of the time, for its timers. Reading
// the clock is cheap where the kernel has a fast clocksource (TSC: 0.25 µs
// in a TCG guest), and a system call that reads an emulated device
// where it has not (the same guest with two vCPUs marks the TSC unstable
// and uses the HPET: 2-12 µs a read, under qemu's big lock), and passes
// follow each other every few microseconds. So a pass reads the clock at
// most once, and passes that only look for expired timers reuse the last
// reading for up to clockReuse passes: a timer then expires up to that
// many passes late, never early, since whatever arms a timer reads the
// clock anew. After the engine slept (Awake) the next pass reads it.
type engineClock struct {
	epoch time.Time
	last  int64 // the last reading, ns since epoch
	read  bool  // last was read in this pass
	stale int   // passes in a row that reused last
}

// newEngineClock returns a clock whose first timer check reads it.
func newEngineClock(epoch time.Time) engineClock {
	return engineClock{epoch: epoch, stale: clockReuse}
}

// now returns the time, reading the clock once per pass.
func (c *engineClock) now() int64 {
	if !c.read {
		c.last = int64(time.Since(c.epoch))
		c.read = true
	}
	return c.last
}

// forTimers returns the time to check timers against: the last reading
// when it may stand in for a new one.
func (c *engineClock) forTimers() int64 {
	if !c.read && c.stale < clockReuse {
		c.stale++
		return c.last
	}
	c.stale = 0
	return c.now()
}

// endPass marks the end of a pass: the next reads the clock again.
func (c *engineClock) endPass() { c.read = false }

// slept makes the next pass read the clock: the last reading may be as
// old as the sleep.
func (c *engineClock) slept() { c.stale, c.read = clockReuse, false }
