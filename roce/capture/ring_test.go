package capture

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// ringRecord is one pcap record of a run.
type ringRecord struct {
	unixNano int64
	origLen  int
	data     []byte
}

// splitRun parses a run of records, which must hold exactly n whole
// records.
func splitRun(t *testing.T, run []byte, n int) []ringRecord {
	t.Helper()
	var recs []ringRecord
	for len(run) > 0 {
		require.GreaterOrEqual(t, len(run), recordHeader)
		capLen := int(binary.LittleEndian.Uint32(run[8:]))
		require.GreaterOrEqual(t, len(run), recordHeader+capLen)
		recs = append(recs, ringRecord{
			unixNano: int64(binary.LittleEndian.Uint32(run[0:]))*1e9 + int64(binary.LittleEndian.Uint32(run[4:])),
			origLen:  int(binary.LittleEndian.Uint32(run[12:])),
			data:     run[recordHeader : recordHeader+capLen],
		})
		run = run[recordHeader+capLen:]
	}
	require.Len(t, recs, n)
	return recs
}

// TestCaptureRingWrapsAndDrops puts frames of many sizes through a small
// ring, taking them out in runs of various bounds, so records wrap at
// every offset, with and without room for a skip mark; every frame comes
// out whole, in order, or is counted as dropped.
func TestCaptureRingWrapsAndDrops(t *testing.T) {
	r := newCaptureRing(1000, 100)
	require.Equal(t, 100, r.snaplen)
	frame := make([]byte, 300)
	for i := range frame {
		frame[i] = byte(i)
	}
	type rec struct {
		data []byte
		at   int64
	}
	var want []rec
	got, dropped, wraps := 0, uint64(0), 0
	take := func(runs int, room int64) {
		for k := 0; k < runs; k++ {
			run, n := r.records(room)
			if n == 0 {
				require.Empty(t, run)
				return
			}
			if room >= 0 {
				require.LessOrEqual(t, int64(len(run)), room)
			}
			for _, f := range splitRun(t, run, n) {
				require.NotEmpty(t, want)
				require.Equal(t, want[0].data, f.data, "record %d", got)
				require.Equal(t, want[0].at, f.unixNano)
				want = want[1:]
				got++
			}
			r.release(run)
		}
	}
	for i := 0; i < 5000; i++ {
		n := (i * 37) % 150 // some longer than the snap length
		before, tail := r.dropped.Load(), r.tail.Load()
		at := int64(i)*1_000_000_007 + 3
		r.put(frame[:n], at)
		if r.tail.Load()-tail > uint64(recordHeader+min(n, 100)) {
			wraps++ // skipped the end of buf
		}
		if r.dropped.Load() != before {
			dropped++
		} else {
			want = append(want, rec{frame[:min(n, 100)], at})
		}
		switch {
		case i%400 < 200:
			take(2, -1)
		case i%3 == 0:
			take(1, int64(i%300)) // slower than the producer, runs cut short
		}
	}
	take(1<<30, -1)
	require.Empty(t, want)
	require.NotZero(t, dropped, "the producer outran the consumer at times")
	require.Equal(t, dropped, r.dropped.Load())
	require.Greater(t, got, 1000)
	require.NotZero(t, wraps)
}

func TestCaptureRingShortensSnaplenToFit(t *testing.T) {
	r := newCaptureRing(1024, 1<<20)
	require.Equal(t, 1024/minRingRecords-recordHeader, r.snaplen)
	r.put(bytes.Repeat([]byte{1}, 5000), 7)
	run, n := r.records(-1)
	f := splitRun(t, run, n)[0]
	require.Len(t, f.data, r.snaplen)
	require.Equal(t, 5000, f.origLen)
	require.Equal(t, int64(7), f.unixNano)
}

func TestCaptureRingPutAllocatesNothing(t *testing.T) {
	r := newCaptureRing(1<<16, 1<<16)
	frame := make([]byte, 4200)
	allocs := testing.AllocsPerRun(1000, func() {
		r.put(frame, 1)
		run, _ := r.records(-1)
		r.release(run)
	})
	require.Zero(t, allocs)
}

// TestCaptureShare: a lane's copying may take its share (5 %) of the time
// on average, in bursts of up to shareBurst; past that the lane leaves
// frames out until its allowance has grown again.
func TestCaptureShare(t *testing.T) {
	const engineShare = 100 / DefaultShare
	c := &laneCapture{allowance: shareBurst, last: 1e9, sharePct: DefaultShare}
	now := int64(1e9)
	// Copies of 19 µs, one every 20 µs, until refused: the burst, and the
	// share of the time they took.
	copies := int64(0)
	for c.withinShare(now) {
		c.charge(19_000)
		now += 20_000
		copies++
	}
	require.InDelta(t, float64(shareBurst+(now-1e9)/engineShare), float64(copies*19_000), 40_000)
	require.Greater(t, copies, shareBurst/19_000)

	c.allowance = 0
	now += 1_000_000
	require.True(t, c.withinShare(now))
	require.Equal(t, int64(1_000_000/engineShare), c.allowance, "a share of 1 ms")
	c.charge(5_000_000) // the lane's thread lost its CPU in a copy
	require.Equal(t, int64(1_000_000/engineShare)-maxCopyCharge, c.allowance, "charged 20 µs")
	for c.allowance > 0 {
		c.charge(maxCopyCharge)
	}
	require.False(t, c.withinShare(now))
	now += 10_000_000_000
	require.True(t, c.withinShare(now), "after idle time")
	require.Equal(t, shareBurst, c.allowance, "no more than a burst")
}

// TestCaptureWholeShare: with a share of 100 % a lane copying 19 µs of
// every 20 µs, far past the default share, leaves nothing out.
func TestCaptureWholeShare(t *testing.T) {
	c := &laneCapture{allowance: shareBurst, last: 1e9, sharePct: 100}
	now := int64(1e9)
	for i := range 100_000 {
		require.True(t, c.withinShare(now), "copy %d refused", i)
		c.charge(19_000)
		now += 20_000
	}
}
