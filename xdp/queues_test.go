package xdp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
)

// TestPoolsReleasedAfterClose: a bound socket's queue reports its pool
// (copy mode registers one too); once the socket is closed the kernel's
// deferred release takes it away, and WaitPoolsReleased sees that.
func TestPoolsReleasedAfterClose(t *testing.T) {
	pair := netnstest.NewT(t, netnstest.Config{})
	e := &pair.A
	var s *Socket
	var before, after map[int]bool
	var released bool
	require.NoError(t, e.Do(func() (err error) {
		if s, err = Open(e.Ifindex, 0, Config{}); err != nil {
			return err
		}
		if before, err = PooledQueues(e.Ifindex); err != nil {
			return err
		}
		s.Close()
		released = WaitPoolsReleased(e.Ifindex, []int{0}, 10*time.Second)
		after, err = PooledQueues(e.Ifindex)
		return err
	}))
	assert.Equal(t, map[int]bool{0: true}, before, "the bound socket's pool on queue 0")
	assert.True(t, released)
	assert.Empty(t, after)
}
