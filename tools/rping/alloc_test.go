package rping

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoopsDoNotAllocate measures the heap allocations of whole runs of
// 100 and 1100 pings with -v and -V (both loops, both devices' engines):
// the thousand extra pings must cost next to nothing, as the loops reuse
// their work requests, completions and output line.
func TestLoopsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("needs a build without -race: the race detector allocates, so the counts mean nothing")
	}
	mallocs := func(count int) uint64 {
		cfg := Config{Size: DefaultSize, Count: count, Verbose: true, Validate: true}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		srv, cli, serr, cerr := runLoops(t, cfg, cfg)
		runtime.ReadMemStats(&after)
		require.NoError(t, serr, srv.stderr.String())
		require.NoError(t, cerr, cli.stderr.String())
		return after.Mallocs - before.Mallocs
	}
	few, many := mallocs(100), mallocs(1100)
	perPing := float64(int64(many)-int64(few)) / 1000
	t.Logf("heap allocations: %d for 100 pings, %d for 1100: %.2f per ping", few, many, perPing)
	assert.Less(t, perPing, 0.5, "allocations per ping")
}
