package hostif

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// An entry the client marked discarded is consumed without being
// returned, and the daemon's next entry in that slot is not discarded:
// Push clears the mark the slot's last entry left.
func TestCQDiscardedEntry(t *testing.T) {
	const depth = 4
	mem := make([]byte, HeaderSize+depth*CQEntrySize)
	daemon, err := NewCompletionQueue(mem, depth)
	require.NoError(t, err)
	client, err := NewCompletionQueue(mem, depth)
	require.NoError(t, err)
	for i := range 3 {
		require.True(t, daemon.Push(&ibv.WC{WRID: uint64(i), QPN: uint32(7 + i%2)}))
	}
	client.entry(0)[offCQDiscarded] = 1 // QP 7's reset
	client.entry(2)[offCQDiscarded] = 1
	wcs := make([]ibv.WC, 4)
	require.Equal(t, 1, client.Poll(wcs))
	require.Equal(t, uint64(1), wcs[0].WRID)
	require.Zero(t, client.Poll(wcs))
	for i := 3; i < 3+depth; i++ { // around the ring, over the marked slots
		require.True(t, daemon.Push(&ibv.WC{WRID: uint64(i)}), "entry %d", i)
	}
	require.Equal(t, depth, client.Poll(wcs))
	for i, wc := range wcs {
		require.Equal(t, uint64(3+i), wc.WRID)
	}
}
