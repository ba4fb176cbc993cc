package memlink

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sendN sends n frames of 100 bytes from a, the first byte numbering them.
func sendN(t *testing.T, a *Endpoint, n int) {
	t.Helper()
	for i := range n {
		f := a.TxFrame()
		require.NotNil(t, f)
		f = f[:100]
		clear(f)
		f[0], f[1] = byte(i), byte(i>>8)
		a.Send(f)
	}
	require.NoError(t, a.Flush())
}

// drain receives everything b gets within d.
func drain(b *Endpoint, d time.Duration) [][]byte {
	var got [][]byte
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		b.Receive(func(f []byte) {
			if f != nil {
				got = append(got, append([]byte(nil), f...))
			}
		}, 64)
		b.Wait(time.Millisecond)
	}
	return got
}

// drainN receives until b has got want frames, and then for settle more
// in case others follow, or until 10 s have passed. Delayed and reordered
// frames arrive on timers, so a fixed window would lose some of them when
// the machine is loaded.
func drainN(b *Endpoint, want int, settle time.Duration) [][]byte {
	var got [][]byte
	limit := time.Now().Add(10 * time.Second)
	for len(got) < want && time.Now().Before(limit) {
		b.Receive(func(f []byte) {
			if f != nil {
				got = append(got, append([]byte(nil), f...))
			}
		}, 64)
		b.Wait(time.Millisecond)
	}
	return append(got, drain(b, settle)...)
}

func TestDeliveryInOrderWithoutFaults(t *testing.T) {
	a, b := Pair(Config{Buffers: 64})
	sendN(t, a, 50)
	got := drainN(b, 50, 5*time.Millisecond)
	require.Len(t, got, 50)
	for i, f := range got {
		require.Equal(t, byte(i), f[0])
		require.Len(t, f, 100)
	}
	// Every buffer came back to the sender.
	require.Equal(t, 64, a.pool.len())
	require.Equal(t, uint64(50), a.Stats().Delivered.Load())
}

func TestFaultsAreSeededAndDeterministic(t *testing.T) {
	run := func(seed uint64) ([][]byte, [5]uint64) {
		f := Faults{Loss: 0.1, Duplicate: 0.1, Reorder: 0.1, Corrupt: 0.1, Delay: 0.05, CorruptFrom: 2}
		a, b := Pair(Config{Buffers: 512, Seed: seed, AtoB: f})
		sendN(t, a, 300)
		s := a.Stats()
		got := drainN(b, 300-int(s.Lost.Load())+int(s.Duplicated.Load()), 10*time.Millisecond)
		return got, [5]uint64{s.Lost.Load(), s.Duplicated.Load(), s.Reordered.Load(), s.Corrupted.Load(), s.Delayed.Load()}
	}
	got1, st1 := run(7)
	got2, st2 := run(7)
	_, st3 := run(8)
	require.Equal(t, st1, st2, "same seed, same faults")
	require.NotEqual(t, st1, st3, "another seed, other faults")
	for i, c := range st1 {
		require.NotZero(t, c, "fault %d never happened", i)
	}
	// Same frames, same content (corruption included); delivery order may
	// differ only through timing, so compare as sets.
	require.Len(t, got2, len(got1))
	require.Equal(t, 300-int(st1[0])+int(st1[1]), len(got1))
	count := func(g [][]byte) map[string]int {
		m := map[string]int{}
		for _, f := range g {
			m[string(f)]++
		}
		return m
	}
	require.Equal(t, count(got1), count(got2))
	// Corruption flips exactly one bit at or after CorruptFrom.
	flipped := 0
	for _, f := range got1 {
		if !bytes.Equal(f[2:], make([]byte, 98)) {
			flipped++
		}
	}
	require.NotZero(t, flipped)
}

func TestReorderLetsLaterFramesOvertake(t *testing.T) {
	a, b := Pair(Config{Seed: 1, AtoB: Faults{Reorder: 0.3, ReorderDelay: 5 * time.Millisecond}})
	sendN(t, a, 100)
	got := drainN(b, 100, 10*time.Millisecond)
	require.Len(t, got, 100)
	inversions := 0
	for i := 1; i < len(got); i++ {
		if got[i][0] < got[i-1][0] {
			inversions++
		}
	}
	require.NotZero(t, inversions)
}

func TestDownAndTap(t *testing.T) {
	a, b := Pair(Config{})
	a.SetDown(true)
	sendN(t, a, 10)
	require.Empty(t, drain(b, 5*time.Millisecond))
	a.SetDown(false)
	a.SetTap(func(f []byte) bool { f[99] = 0xee; return f[0]%2 == 0 })
	sendN(t, a, 10)
	got := drain(b, 5*time.Millisecond)
	require.Len(t, got, 5)
	for _, f := range got {
		require.Equal(t, byte(0xee), f[99])
	}
}

func TestWaitAndClose(t *testing.T) {
	a, b := Pair(Config{})
	start := time.Now()
	require.NoError(t, b.Wait(5*time.Millisecond))
	require.GreaterOrEqual(t, time.Since(start), 5*time.Millisecond)
	// Wake interrupts a Wait without limit.
	go func() { time.Sleep(2 * time.Millisecond); b.Wake() }()
	require.NoError(t, b.Wait(-1))
	// A frame arriving wakes the receiver.
	go func() { time.Sleep(2 * time.Millisecond); sendN(t, a, 1) }()
	require.NoError(t, b.Wait(-1))
	require.NoError(t, b.Close())
	require.ErrorIs(t, b.Wait(-1), errClosedForTest())
}

func TestTxBuffersRunOutAndReturn(t *testing.T) {
	a, b := Pair(Config{Buffers: 4})
	var frames [][]byte
	for range 4 {
		f := a.TxFrame()
		require.NotNil(t, f)
		require.GreaterOrEqual(t, len(f), a.MTU()+22)
		frames = append(frames, f)
	}
	require.Nil(t, a.TxFrame())
	for _, f := range frames {
		a.Send(f[:60])
	}
	require.NoError(t, a.Flush())
	require.Equal(t, 4, b.Receive(func([]byte) {}, 10))
	// The sender was starved, so it is woken, and its buffers are back.
	require.NoError(t, a.Wait(0))
	require.NotNil(t, a.TxFrame())
}

// With the sender and the receiver on goroutines of their own, as two
// engines run, every frame arrives once, in order, with its bytes, and
// every buffer returns: the pool's lock-free side under the race
// detector, with the sender often out of buffers (a small pool) and
// waiting for the receiver to give some back.
func TestConcurrentSenderAndReceiver(t *testing.T) {
	const n = 5000
	a, b := Pair(Config{Buffers: 16})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; {
			f := a.TxFrame()
			if f == nil {
				a.Flush()
				a.Wait(time.Millisecond) // woken when buffers return
				continue
			}
			f = f[:64]
			for k := range f {
				f[k] = byte(i + k)
			}
			f[0], f[1], f[2] = byte(i), byte(i>>8), byte(i>>16)
			a.Send(f)
			if i++; i%5 == 0 {
				a.Flush()
			}
		}
		a.Flush()
	}()
	next := 0
	limit := time.Now().Add(20 * time.Second)
	for next < n && time.Now().Before(limit) {
		b.Receive(func(f []byte) {
			if f == nil {
				return
			}
			i := int(f[0]) | int(f[1])<<8 | int(f[2])<<16
			require.Equal(t, next, i)
			for k := 3; k < len(f); k++ {
				require.Equal(t, byte(i+k), f[k])
			}
			next++
		}, 7)
		b.Wait(time.Millisecond)
	}
	<-done
	require.Equal(t, n, next)
	require.Equal(t, 16, a.pool.len())
	require.Equal(t, uint64(n), a.Stats().Delivered.Load())
}
