package xdp

import (
	"testing"
	"time"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/stretchr/testify/require"
)

// TestFlushHoldsKicksOfAFullQueue checks that once the kernel refused a
// kick (the driver's queue was full), Flush does not kick again until a
// completion, RetryTx or maxHeldKicks flushes, and that the frames held go
// out then. A veth's queue is never full for AF_XDP, so the refusal is
// set by hand; the kicks and the frames are the kernel's.
func TestFlushHoldsKicksOfAFullQueue(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	a := setupSide(t, &pair.A, Config{NumFrames: 64})
	b := setupSide(t, &pair.B, Config{NumFrames: 64})
	src, dst := pair.A.Addr4(), pair.B.Addr4()
	frame := make([]byte, 100)

	queue := func(seq uint32) {
		d, buf, ok := a.sock.NextTxFrame()
		require.True(t, ok, "free transmit frame")
		d.Len = uint32(len(udpFrame(buf, len(frame), pair.A.MAC, pair.B.MAC, src, dst, seq)))
		n, err := a.sock.Transmit([]Desc{d})
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	kicks := func() (kicks, held uint64) {
		st, err := a.sock.Stats()
		require.NoError(t, err)
		return st.Kicks, st.KicksHeld
	}
	// settle reaps the completions of the first n frames, which the
	// kernel may write after the peer has read the frame.
	settle := func(n uint64) {
		require.Eventually(t, func() bool {
			a.sock.Complete()
			return a.sock.ctr.txCompleted.Load() == n
		}, 2*time.Second, time.Millisecond, "completions of %d frames", n)
	}

	// Held while nothing completes: the frame stays on the ring.
	queue(1)
	a.sock.txFull = true
	k0, _ := kicks()
	for i := 1; i <= maxHeldKicks; i++ {
		require.NoError(t, a.sock.Flush())
	}
	k, h := kicks()
	require.Equal(t, k0, k, "kicks while the queue is full")
	require.Equal(t, uint64(maxHeldKicks), h, "flushes held")
	require.Equal(t, 1, a.sock.TxPending(), "frame left on the TX ring")
	// The next flush kicks anyway, and the frame arrives.
	require.NoError(t, a.sock.Flush())
	k, _ = kicks()
	require.Equal(t, k0+1, k, "kick after maxHeldKicks flushes")
	require.Len(t, receiveFrames(t, b.sock, 1, 2*time.Second), 1)
	settle(1)

	// RetryTx ends the hold at once.
	queue(2)
	a.sock.txFull = true
	require.NoError(t, a.sock.Flush())
	k1, _ := kicks()
	require.Equal(t, k0+1, k1, "kick held")
	a.sock.RetryTx()
	require.NoError(t, a.sock.Flush())
	k, _ = kicks()
	require.Equal(t, k1+1, k, "kick after RetryTx")
	require.Len(t, receiveFrames(t, b.sock, 1, 2*time.Second), 1)
	settle(2)

	// So does a completion: the driver freed a frame, so it has room.
	queue(3)
	require.NoError(t, a.sock.kick()) // sent; its completion not reaped
	require.Eventually(t, func() bool { return a.sock.comp.consAvail() > 0 }, 2*time.Second, time.Millisecond, "completion of frame 3")
	queue(4)
	a.sock.txFull = true
	_, h0 := kicks()
	require.NoError(t, a.sock.Flush())
	_, h = kicks()
	require.Equal(t, h0, h, "flush held after a completion")
	require.Zero(t, a.sock.TxPending(), "frame 4 left on the TX ring")
	require.Len(t, receiveFrames(t, b.sock, 2, 2*time.Second), 2)
}
