package ibtransport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// TestDoorbellOnlyWhenSleeping checks that posters ring the doorbell (a
// system call on AF_XDP links) only when the engine may be blocked, and
// that an engine about to block notices posts that came without one.
func TestDoorbellOnlyWhenSleeping(t *testing.T) {
	wakes := 0
	e := NewEngine(&fakePort{}, func() { wakes++ })
	e.Exit() // commands run inline
	mr := newTestRegion(make([]byte, 64), 1, ibv.AccessAll)
	q, err := e.CreateQP(&QPConfig{Memory: &testMemory{mr}, SendCQ: &testCQ{}, RecvCQ: &testCQ{}, Cap: ibv.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	require.NoError(t, err)

	// Awake: a post leaves a kick for the next pass, without a doorbell.
	e.kick(q)
	require.Zero(t, wakes)
	// The engine must not block with that kick pending.
	require.False(t, e.PrepareSleep())
	e.Process()
	require.True(t, e.PrepareSleep())
	// Asleep: the next post rings.
	e.kick(q)
	require.Equal(t, 1, wakes)
	e.Awake()
	e.Process()
	e.kick(q)
	require.Equal(t, 1, wakes)
}
