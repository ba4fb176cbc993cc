package ibtransport

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// paperConfig is the DCQCN paper's parameters (Zhu et al. 2015, section
// 5): g = 1/256, F = 5 stages of fast recovery, R_AI 40 Mb/s, R_HAI
// 200 Mb/s, K = 55 µs, a 40 Gb/s line; the cut is alpha/2 (GD 11) with
// no floor from MinDecFac; hyper increase i·R_HAI.
func paperConfig() CongestionConfig {
	c := CongestionConfig{MultipliedHAI: true, LineRate: 40e9, MinRate: 1e6, AIRate: 40e6, HAIRate: 200e6, G: 1020,
		AlphaPeriod: 55 * time.Microsecond, InitialAlpha: 1023, GD: 11, MinDecFac: 100,
		ReduceMonitorPeriod: time.Nanosecond, TimeReset: 1500 * time.Microsecond, ByteReset: 10 << 20, Threshold: 5}
	c.fill()
	return c
}

const µs = int64(time.Microsecond)

// TestDCQCNCut checks the reaction to CNPs against the paper's equations:
// Rt = Rc, Rc = Rc(1 - alpha/2), alpha = (1 - g)alpha + g, and alpha =
// (1 - g)alpha for each period K without a CNP.
func TestDCQCNCut(t *testing.T) {
	c := paperConfig()
	g := 1 - float64(c.G)/1024
	var r reactionPoint
	r.onCNP(&c, 0)
	require.True(t, r.limited)
	alpha := 1.0 // InitialAlpha 1023/1023
	rc, rt := 40e9*(1-alpha/2), 40e9
	alpha = (1-g)*alpha + g
	assert.InDelta(t, rt, r.target, 1)
	assert.InDelta(t, rc, r.rate, 1)
	assert.InDelta(t, alpha, r.alpha, 1e-12)
	assert.Equal(t, uint64(rc), r.rateBits.Load())

	// 3 periods of K and a bit without CNP, then a CNP.
	now := 3*55*µs + 10*µs
	alpha *= math.Pow(1-g, 3)
	r.onCNP(&c, now)
	rt, rc = rc, rc*(1-alpha/2)
	alpha = (1-g)*alpha + g
	assert.InDelta(t, rt, r.target, 1)
	assert.InDelta(t, rc, r.rate, 1)
	assert.InDelta(t, alpha, r.alpha, 1e-12)

	// Many cuts in a row reach the floor and stay there.
	for i := range 200 {
		r.onCNP(&c, now+int64(i+1)*µs)
	}
	assert.Equal(t, float64(c.MinRate), r.rate)
}

// TestDCQCNIncrease walks the increase stages: F events of fast recovery
// (Rc = (Rt + Rc)/2), additive increase once one counter passes F (Rt +=
// R_AI), hyper increase once both do (Rt += i·R_HAI, i = min(T, BC) - F),
// then release at the line rate.
func TestDCQCNIncrease(t *testing.T) {
	c := paperConfig()
	var r reactionPoint
	// Four cuts bring Rt well under the line rate, which caps it.
	const t0 = 3
	for i := range int64(t0 + 1) {
		r.onCNP(&c, i)
	}
	rt, rc := r.target, r.rate
	require.Less(t, rt, 10e9)
	// Timer events only: 5 of fast recovery. The QP uses its rate: the
	// pacer holds it back before every event (increaseIfUsed).
	for k := 1; k <= 5; k++ {
		r.heldBack = true
		r.tick(&c, t0+int64(k)*int64(c.TimeReset))
		rc = (rt + rc) / 2
		require.InDelta(t, rc, r.rate, 1, "fast recovery %d", k)
		require.InDelta(t, rt, r.target, 1)
	}
	// The sixth timer event: additive increase.
	r.heldBack = true
	r.tick(&c, t0+6*int64(c.TimeReset))
	rt += 40e6
	rc = (rt + rc) / 2
	assert.InDelta(t, rt, r.target, 1)
	assert.InDelta(t, rc, r.rate, 1)
	// Byte counter events: BC reaches 6 too, each event additive until
	// BC > F, then hyper with i = min(T, BC) - F.
	for k := 1; k <= 7; k++ {
		for sent := uint64(0); sent < c.ByteReset; sent += 4096 + wireOverhead {
			r.heldBack = true
			r.sent(&c, 4096)
		}
		bc, tc := int16(k), int16(6)
		switch {
		case min(bc, tc) > 5:
			rt += float64(min(bc, tc)-5) * 200e6
		case max(bc, tc) > 5:
			rt += 40e6
		}
		rc = (rt + rc) / 2
		require.InDelta(t, rt, r.target, 1e3, "byte event %d", k)
		require.InDelta(t, rc, r.rate, 1e3, "byte event %d", k)
	}
	// Enough increase events bring it back to the line rate: no pacing.
	for k := 7; r.limited && k < 10000; k++ {
		r.heldBack = true
		r.tick(&c, t0+int64(k)*int64(c.TimeReset))
	}
	assert.False(t, r.limited)
	assert.Zero(t, r.rateBits.Load())
}

// TestDCQCNConstantHAI checks the default, ConnectX-style hyper
// increase: once both counters pass F, every event adds R_HAI, not
// i·R_HAI.
func TestDCQCNConstantHAI(t *testing.T) {
	c := paperConfig()
	c.MultipliedHAI = false
	c.Threshold = 1
	c.ByteReset = 1 << 40 // timer events only...
	var r reactionPoint
	for i := range int64(4) {
		r.onCNP(&c, i)
	}
	r.byteEvents = 5 // ...with the byte counter past F already
	rt, rc := r.target, r.rate
	for k := 1; k <= 6; k++ {
		r.heldBack = true
		r.tick(&c, 3+int64(k)*int64(c.TimeReset))
		switch {
		case k > 1: // T > F: hyper increase, one R_HAI per event
			rt += 200e6
		case k == 1: // T = F: additive
			rt += 40e6
		}
		rc = (rt + rc) / 2
		require.InDelta(t, rt, r.target, 1, "event %d", k)
		require.InDelta(t, rc, r.rate, 1, "event %d", k)
	}
}

// TestDCQCNStall checks that an engine that did not run for many timer
// periods runs one increase event, not one per period, and restarts the
// timer.
func TestDCQCNStall(t *testing.T) {
	c := DefaultCongestionConfig()
	c.LineRate = 10e9
	var r reactionPoint
	r.onCNP(&c, 0)
	r.onCNP(&c, 10*µs)
	rt, rc := r.target, r.rate
	stall := 10*µs + 100*int64(time.Millisecond)
	r.heldBack = true
	r.tick(&c, stall)
	assert.InDelta(t, (rt+rc)/2, r.rate, 1, "one event of fast recovery")
	assert.Equal(t, stall+int64(c.TimeReset), r.timerAt)
	assert.Equal(t, int16(1), r.timerEvents)
}

// TestDCQCNUnusedRate: increase events raise only a rate the QP uses. A
// QP the pacer never held back (it sends below its rate) keeps its rate
// through timer and byte counter events; one held back gets the next
// event's increase, and only that one.
func TestDCQCNUnusedRate(t *testing.T) {
	c := DefaultCongestionConfig()
	c.LineRate = 10e9
	var r reactionPoint
	r.onCNP(&c, 0)
	rt, rc := r.target, r.rate
	for k := int64(1); k <= 10; k++ {
		r.tick(&c, k*int64(c.TimeReset))
		r.sent(&c, int(c.ByteReset))
	}
	assert.Equal(t, rc, r.rate, "no increase for a rate the QP did not use")
	assert.Zero(t, r.timerEvents+r.byteEvents)
	require.False(t, r.maySend(&c, r.sendAt-1), "the pacer holds a packet back")
	r.tick(&c, 11*int64(c.TimeReset))
	assert.InDelta(t, (rt+rc)/2, r.rate, 1, "one event of fast recovery")
	rc = r.rate
	r.tick(&c, 12*int64(c.TimeReset))
	assert.Equal(t, rc, r.rate, "not the event after")

	c.IncreaseUnused = true // ConnectX's way: every event
	r.tick(&c, 13*int64(c.TimeReset))
	assert.Greater(t, r.rate, rc, "IncreaseUnused")
}

// TestDCQCNMonitorPeriod checks ConnectX's rate_reduce_monitor_period:
// a CNP within it after a cut is a cut owed, made once the period after
// the cut before has passed, one per period.
func TestDCQCNMonitorPeriod(t *testing.T) {
	c := DefaultCongestionConfig()
	var r reactionPoint
	r.onCNP(&c, 0)
	first := r.rate
	assert.InDelta(t, float64(c.LineRate)/2, first, 1, "alpha starts at 1: half the line rate")
	r.onCNP(&c, 1*µs)
	r.onCNP(&c, 2*µs)
	assert.Equal(t, first, r.rate, "no cut within the monitor period")
	r.tick(&c, 3*µs)
	assert.Equal(t, first, r.rate)
	r.tick(&c, 4*µs)
	assert.Less(t, r.rate, first, "the first cut owed at the period's end")
	second := r.rate
	r.tick(&c, 7*µs)
	assert.Equal(t, second, r.rate, "not within the next period")
	r.tick(&c, 8*µs)
	assert.Less(t, r.rate, second, "the second cut owed")
	third := r.rate
	r.tick(&c, 20*µs)
	assert.Equal(t, third, r.rate, "no cut owed any more")
}

// TestDCQCNStarvedCNPs: CNPs an engine that did not run for a while takes
// in one pass each cut the rate, as a NIC that took them as they came
// would have, at most maxPendingCuts of them after the first.
func TestDCQCNStarvedCNPs(t *testing.T) {
	c := DefaultCongestionConfig()
	c.TimeReset = time.Second // no increase event in the comparison
	for _, cnps := range []int{1, 4, 20} {
		var one, many reactionPoint
		one.onCNP(&c, 0)
		many.onCNP(&c, 0)
		now := int64(time.Millisecond)
		for i := range cnps {
			many.onCNP(&c, now) // the first cuts at once, the rest are owed
			if i < 1+maxPendingCuts {
				one.onCNP(&c, now+int64(i)*int64(c.ReduceMonitorPeriod))
			}
		}
		later := now + int64(time.Millisecond)
		many.tick(&c, later)
		one.tick(&c, later)
		assert.InDelta(t, one.rate, many.rate, one.rate*1e-9, "%d CNPs in one pass", cnps)
		assert.Less(t, many.rate, float64(c.LineRate)/2, "%d CNPs in one pass", cnps)
		assert.Zero(t, many.cutsPending)
	}
}

// TestDCQCNPacing checks the pacer: at rate R a QP's packets leave
// (n + wireOverhead)·8/R apart, a QP may not bank more than PacingBurst
// bytes at its rate (here 64 KiB) or pacingSlack, if more, of idle
// time, and a limited QP's schedule holds it back.
func TestDCQCNPacing(t *testing.T) {
	c := DefaultCongestionConfig()
	c.LineRate = 2e9
	require.Zero(t, c.PacingBurst, "50 µs of catching up by default")
	c.PacingBurst = 64 << 10
	var r reactionPoint
	r.onCNP(&c, 1_000_000) // cuts to 1 Gb/s
	require.InDelta(t, 1e9, r.rate, 1)
	now := int64(1_000_000)
	require.True(t, r.maySend(&c, now))
	r.sent(&c, 1000-wireOverhead) // 1000 bytes on the wire: 8 µs at 1 Gb/s
	assert.False(t, r.maySend(&c, now+7999))
	assert.True(t, r.maySend(&c, now+8000))
	// After a long idle time only 64 KiB at 1 Gb/s of credit remains
	// (524 µs), and it lets that many bytes leave at once.
	later := now + int64(time.Second)
	require.True(t, r.maySend(&c, later))
	burst := int64(64<<10) * 8
	assert.Equal(t, later-burst, r.sendAt)
	sent := 0
	c.ByteReset = math.MaxUint64 // no increase (hence faster pacing) within the burst
	for r.maySend(&c, later) {
		r.sent(&c, 4096)
		sent += 4096 + wireOverhead
	}
	assert.InDelta(t, 64<<10, sent, 4096+wireOverhead)
	// A burst smaller than pacingSlack's worth leaves pacingSlack.
	c.PacingBurst = 1000
	require.True(t, r.maySend(&c, later+int64(time.Second)))
	assert.Equal(t, later+int64(time.Second)-pacingSlack, r.sendAt)
}

func TestCongestionConfigCheck(t *testing.T) {
	assert.NoError(t, CongestionConfig{}.Check())
	d := DefaultCongestionConfig()
	assert.Equal(t, 4*time.Microsecond, d.CNPInterval)
	assert.Equal(t, uint16(1019), d.G)
	assert.Equal(t, uint8(11), d.GD)
	assert.Equal(t, 300*time.Microsecond, d.TimeReset)
	assert.Equal(t, uint64(32767), d.ByteReset)
	assert.Equal(t, uint64(5e6), d.AIRate)
	assert.Equal(t, uint64(50e6), d.HAIRate)
	for _, bad := range []CongestionConfig{{G: 1025}, {InitialAlpha: 1024}, {MinDecFac: 101}, {GD: 21},
		{MinRate: 2e9, LineRate: 1e9}, {MinRate: 1000}, {CNPInterval: -1}, {Threshold: -1}} {
		assert.ErrorIs(t, bad.Check(), ibv.ErrInvalidArgument, "%+v", bad)
	}
}
