package ibtransport

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Polled passes that only look for expired timers reuse the last reading,
// at most clockReuse times in a row; a reading in the pass, or a pass that
// is not polled, reads the clock again.
func TestEngineClockReuse(t *testing.T) {
	c := newEngineClock(time.Now().Add(-time.Hour))
	first := c.forTimers(true) // never read: reads
	c.endPass()
	require.Greater(t, first, int64(time.Hour-time.Second))
	for i := range clockReuse {
		require.Equal(t, first, c.forTimers(true), "pass %d", i)
		c.endPass()
	}
	time.Sleep(time.Millisecond)
	require.Greater(t, c.forTimers(true), first, "pass after %d reuses", clockReuse)
	c.endPass()

	last := c.forTimers(true)
	c.endPass()
	time.Sleep(time.Millisecond)
	armed := c.now() // what arms a timer in the pass reads anew
	require.Greater(t, armed, last)
	require.Equal(t, armed, c.forTimers(true), "one reading per pass")
	c.endPass()

	time.Sleep(time.Millisecond)
	require.Greater(t, c.forTimers(false), armed, "a pass not polled")
}
