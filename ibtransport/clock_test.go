package ibtransport

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Passes that only look for expired timers reuse the last reading, at
// most clockReuse times in a row; a reading in the pass, or a pass after
// the engine slept, reads the clock again.
func TestEngineClockReuse(t *testing.T) {
	c := newEngineClock(time.Now().Add(-time.Hour))
	first := c.forTimers() // never read: reads
	c.endPass()
	require.Greater(t, first, int64(time.Hour-time.Second))
	for i := range clockReuse {
		require.Equal(t, first, c.forTimers(), "pass %d", i)
		c.endPass()
	}
	time.Sleep(time.Millisecond)
	require.Greater(t, c.forTimers(), first, "pass after %d reuses", clockReuse)
	c.endPass()

	last := c.forTimers()
	c.endPass()
	time.Sleep(time.Millisecond)
	armed := c.now() // what arms a timer in the pass reads anew
	require.Greater(t, armed, last)
	require.Equal(t, armed, c.forTimers(), "one reading per pass")
	c.endPass()

	time.Sleep(time.Millisecond)
	require.Equal(t, armed, c.forTimers(), "reused")
	c.endPass()
	c.slept()
	require.Greater(t, c.forTimers(), armed, "a pass after a sleep")
}

// The engine reads the clock again once its goroutine comes back from a
// wait.
func TestEngineAwakeReadsClock(t *testing.T) {
	e := &Engine{clock: newEngineClock(time.Now())}
	first := e.clock.forTimers()
	e.clock.endPass()
	time.Sleep(time.Millisecond)
	e.Awake()
	require.Greater(t, e.clock.forTimers(), first)
}
