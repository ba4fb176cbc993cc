package hostif

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
)

func newTestCQ(t *testing.T, depth int) *CompletionQueue {
	t.Helper()
	c, err := NewCompletionQueue(make([]byte, RingSize(depth, CQEntrySize)), depth)
	require.NoError(t, err)
	return c
}

// MoveTo carries exactly the completions not yet polled, at their indices,
// across the wrap of both rings, with the arm; Follow polls on from there
// and brings along an arm made in the old ring after the move.
func TestCQMoveTo(t *testing.T) {
	daemonOld, client := newTestCQ(t, 4), &CompletionQueue{}
	*client = *daemonOld // the client's side of the same memory
	push := func(d *CompletionQueue, ids ...uint64) {
		for _, id := range ids {
			require.True(t, d.Push(&ibv.WC{WRID: id, Timestamp: 1000 + id}))
		}
	}
	poll := func(c *CompletionQueue, n int) []uint64 {
		wcs := make([]ibv.WC, n)
		got := wcs[:c.Poll(wcs)]
		ids := []uint64{}
		for _, wc := range got {
			require.Equal(t, 1000+wc.WRID, wc.Timestamp)
			ids = append(ids, wc.WRID)
		}
		return ids
	}
	push(daemonOld, 0, 1, 2)
	require.Equal(t, []uint64{0, 1}, poll(client, 2))
	push(daemonOld, 3, 4, 5) // wraps the 4-entry ring; 2..5 are held
	require.Equal(t, 4, daemonOld.Held())
	client.Arm(true)
	require.False(t, daemonOld.WantsTimestamps())
	client.SetTimestamps()
	require.True(t, daemonOld.WantsTimestamps())

	small := newTestCQ(t, 2)
	require.False(t, daemonOld.MoveTo(small), "no room for four")
	daemonNew := newTestCQ(t, 8)
	require.True(t, daemonOld.MoveTo(daemonNew))
	require.Equal(t, uint32(ArmSolicited), atomic.LoadUint32(word(daemonNew.mem, offArmed)), "the arm moved")
	require.Equal(t, uint32(ArmNone), atomic.LoadUint32(word(daemonOld.mem, offArmed)))
	require.True(t, daemonNew.WantsTimestamps(), "the options moved")
	push(daemonNew, 6)

	clientNew := &CompletionQueue{mem: daemonNew.mem, mask: daemonNew.mask}
	client.Arm(false) // made during the resize, in the old ring
	clientNew.Follow(client)
	require.Equal(t, uint32(ArmNext), atomic.LoadUint32(word(daemonNew.mem, offArmed)), "a late arm follows")
	require.Equal(t, []uint64{2, 3, 4, 5, 6}, poll(clientNew, 8))
	require.Empty(t, poll(clientNew, 8))
}

// A consumer index the daemon cannot believe (ahead of what it wrote)
// moves nothing.
func TestCQMoveToLyingConsumer(t *testing.T) {
	d := newTestCQ(t, 4)
	require.True(t, d.Push(&ibv.WC{WRID: 1}))
	atomic.StoreUint32(word(d.mem, offCQCons), 7)
	dst := newTestCQ(t, 1<<10)
	require.False(t, d.MoveTo(dst))
	require.Greater(t, d.Held(), d.Depth())
}
