package ibtransport

import (
	"math"
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport/header"
)

// reactionPoint is DCQCN's sender side for one QP (Zhu et al., SIGCOMM
// 2015, section 3.1, with ConnectX's parameters, CongestionConfig): the
// current rate Rc, the target rate Rt and the congestion estimate alpha,
// changed by CNPs and by the increase timer and byte counter, and the
// pacer that holds the requester to Rc.
//
// Nothing here arms a timer. The alpha timer's effect is computed when
// alpha is next needed (alpha keeps G/1024 of itself for every whole
// AlphaPeriod without a CNP); the increase timer is looked at once per
// engine pass of a paced QP (tick); the pacer is a time before which the
// QP's next packet may not leave (sendAt), which the engine's pass skips
// and its sleep ends at.
//
// A QP is paced (limited) from its first CNP until its rate climbs back
// to the line rate; until then it costs the requester one test per
// packet.
type reactionPoint struct {
	rate    float64 // Rc, bits/s
	target  float64 // Rt, bits/s
	alpha   float64 // 0..1, as the last cut left it (decayAlpha)
	cutAt   int64   // time of the last rate cut (engine clock, ns)
	timerAt int64   // next increase event of the timer
	// sendAt is when the QP's next packet may leave.
	sendAt int64
	// rateBits mirrors rate for readers on other goroutines (statistics);
	// 0 while not limited.
	rateBits atomic.Uint64
	// psPerByte is the pacing step at the current rate, in picoseconds
	// per byte (MinRate keeps it in 32 bits); bytes counts the bytes sent
	// since the last byte counter event. Small types keep the QP in its
	// allocation size class (footprint_test.go).
	psPerByte uint32
	bytes     uint32
	// timerEvents and byteEvents count the increase events since the last
	// cut (the paper's T and BC), saturating.
	timerEvents, byteEvents int16
	limited                 bool
	// heldBack: the pacer held a packet back since the last increase
	// event (increaseIfUsed).
	heldBack bool
	// cutsPending counts the CNPs that came within ReduceMonitorPeriod of
	// the last cut, up to maxPendingCuts: each is a cut due once the
	// period after the one before has passed (tick).
	cutsPending uint8
}

// maxPendingCuts bounds the cuts a QP owes. A NIC cuts at each CNP that
// comes at least a monitor period after the last cut, and the notification
// point sends at most one CNP per QP per interval (4 µs at ConnectX's
// defaults, as the period), so every CNP is a cut. A software engine takes
// the CNPs that arrived while it did not run in one pass; folding them
// into one cut let a starved sender's rate climb on its increase events
// while its CNPs said congestion. So they are
// owed and made, one per period, as the QP's passes come. Eight cuts at
// alpha 1 take the rate to 1/256.
const maxPendingCuts = 8

// pacingSlack is the least the pacer's schedule may fall behind the
// clock (ns): a QP that sent nothing for a while may catch up this much
// at once, or CongestionConfig.PacingBurst bytes at its rate if that is
// more. Engine passes come every few to tens of microseconds; a smaller
// slack loses rate to their granularity. A software engine also wakes
// late, by milliseconds on a busy host, and then loses the rate of the
// time it did not run, unless PacingBurst lets it catch up.
const pacingSlack = 50_000

// wireOverhead is what the network carries besides an IB packet's bytes:
// Ethernet header, IPv4, UDP and the ICRC. The pacer counts it, so that
// the rate is the rate of the Ethernet frames, as a bottleneck sees them.
const wireOverhead = 14 + 20 + 8 + header.ICRCLen

// onCNP handles a CNP that arrived at now: the first one starts pacing
// at the line rate; a cut happens at once, or at the end of the monitor
// period after the last one.
func (r *reactionPoint) onCNP(c *CongestionConfig, now int64) {
	if !r.limited {
		r.limited = true
		r.rate, r.target = float64(c.LineRate), float64(c.LineRate)
		r.alpha = float64(c.InitialAlpha) / 1023
		r.cutAt = now
		r.sendAt = now
		r.cut(c, now)
		return
	}
	if now-r.cutAt < int64(c.ReduceMonitorPeriod) {
		r.cutsPending = min(r.cutsPending+1, maxPendingCuts)
		return
	}
	r.cut(c, now)
}

// cut is the paper's reaction to congestion: Rt = Rc, Rc = Rc(1 - alpha/2)
// (ConnectX: alpha×1024/2^GD, at most MinDecFac percent, not below
// MinRate), then alpha = (1 - g)alpha + g. Both increase counters and
// the alpha timer start again.
func (r *reactionPoint) cut(c *CongestionConfig, now int64) {
	r.decayAlpha(c, now)
	dec := r.alpha * 1024 / float64(uint64(1)<<c.GD)
	dec = min(dec, float64(c.MinDecFac)/100)
	r.target = r.rate
	r.setRate(c, max(r.rate*(1-dec), float64(c.MinRate)))
	g := float64(1024-int(c.G)) / 1024
	r.alpha = (1-g)*r.alpha + g
	r.cutAt = now
	r.timerAt = now + int64(c.TimeReset)
	r.bytes = 0
	r.timerEvents, r.byteEvents = 0, 0
}

// decayAlpha applies the alpha timer's updates since the last cut, which
// restarted it: alpha = (1 - g)alpha for every whole AlphaPeriod without
// a CNP. Only a cut reads alpha, and only a cut changes it otherwise.
func (r *reactionPoint) decayAlpha(c *CongestionConfig, now int64) {
	period := int64(c.AlphaPeriod)
	if period <= 0 || now <= r.cutAt {
		return
	}
	if n := (now - r.cutAt) / period; n > 0 {
		r.alpha *= math.Pow(float64(c.G)/1024, float64(n))
	}
}

// maxEvents is where the counts of increase events stop.
const maxEvents = math.MaxInt16

// maxTimerEvents bounds the increase events one tick runs after the
// engine did not run for many timer periods; the timer restarts after
// them. The timer stands for time the QP sent without a CNP; an engine
// that did not run (a host busy with other work starves a software NIC
// for tens of milliseconds) sent nothing and saw no CNP, which says
// nothing of the path. Catching up 64 events let the rate jump by 64
// hyper increases (3.2 Gb/s with ConnectX's R_HAI) after such a stall,
// and the QP flooded the bottleneck.
const maxTimerEvents = 1

// tick runs the cuts owed for CNPs that came within a monitor period of
// the cut before, and the increase timer's events due by now. The engine calls it once per pass
// of a limited QP, before the QP sends.
func (r *reactionPoint) tick(c *CongestionConfig, now int64) {
	if period := int64(c.ReduceMonitorPeriod); r.cutsPending > 0 && now-r.cutAt >= period {
		// The cuts owed that fit in the time since the last, one per
		// period, each as early as it was due (alpha as it was then);
		// the increase timer and counters start again from now.
		for ; r.cutsPending > 0 && now-r.cutAt >= period; r.cutsPending-- {
			r.cut(c, r.cutAt+period)
		}
		r.cutAt = now
		r.timerAt = now + int64(c.TimeReset)
	}
	for k := 0; r.limited && now >= r.timerAt; k++ {
		if k == maxTimerEvents {
			r.timerAt = now + int64(c.TimeReset)
			break
		}
		r.timerAt += int64(c.TimeReset)
		r.increaseIfUsed(c, &r.timerEvents)
	}
}

// sent accounts for a packet of n IB bytes the QP sent: the pacer's next
// time and the byte counter.
func (r *reactionPoint) sent(c *CongestionConfig, n int) {
	b := uint32(n + wireOverhead)
	r.sendAt += int64(b) * int64(r.psPerByte) / 1000
	r.bytes += b
	if uint64(r.bytes) >= c.ByteReset {
		r.bytes = 0
		r.increaseIfUsed(c, &r.byteEvents)
	}
}

// increaseIfUsed is an increase event of the timer or the byte counter
// (its count in events), taken only if the QP used its rate: the pacer
// held a packet back since the last event. A QP that sends below its rate
// is limited by something else (its window, waiting for ACKs that a busy
// host's engines turn around late, or its application), and raising a
// rate it does not use only lets it send its whole window at the line
// rate once the ACKs come: on a 512 KB bottleneck queue such bursts
// dropped hundreds of packets a run. TCP
// validates its window for the same reason (RFC 7661); ConnectX, whose
// QPs turn ACKs around at wire speed, does not need to.
func (r *reactionPoint) increaseIfUsed(c *CongestionConfig, events *int16) {
	if !r.heldBack && !c.IncreaseUnused {
		return
	}
	r.heldBack = false
	*events = min(*events+1, maxEvents)
	r.increase(c)
}

// maySend reports whether the pacer lets a packet leave at now; it keeps
// the schedule within pacingSlack, or c.PacingBurst bytes at the rate, of
// the clock.
func (r *reactionPoint) maySend(c *CongestionConfig, now int64) bool {
	if now < r.sendAt {
		r.heldBack = true
		return false
	}
	slack := max(pacingSlack, int64(c.PacingBurst)*int64(r.psPerByte)/1000)
	if r.sendAt < now-slack {
		r.sendAt = now - slack
	}
	return true
}

// increase is one increase event of the timer or the byte counter, with
// F = Threshold, T and BC the two counts of events since the last cut:
//
//	fast recovery   max(T, BC) <= F:  Rc = (Rt + Rc)/2
//	additive        otherwise:        Rt = Rt + R_AI;           Rc = (Rt + Rc)/2
//	hyper           min(T, BC) > F:   Rt = Rt + i·R_HAI (i = min(T, BC) - F with MultipliedHAI, else 1); Rc = (Rt + Rc)/2
//
// Once Rc is back at the line rate the QP is no longer paced.
func (r *reactionPoint) increase(c *CongestionConfig) {
	f := int16(min(c.Threshold, maxEvents))
	lo, hi := min(r.timerEvents, r.byteEvents), max(r.timerEvents, r.byteEvents)
	switch {
	case hi <= f:
	case lo > f && c.MultipliedHAI:
		r.target += float64(lo-f) * float64(c.HAIRate)
	case lo > f:
		r.target += float64(c.HAIRate)
	default:
		r.target += float64(c.AIRate)
	}
	line := float64(c.LineRate)
	r.target = min(r.target, line)
	rate := (r.target + r.rate) / 2
	if rate >= line*(1-1.0/1024) {
		r.limited = false
		r.cutsPending = 0
		r.rateBits.Store(0)
		r.rate = line
		return
	}
	r.setRate(c, rate)
}

// setRate makes rate the current rate and the pacer's.
func (r *reactionPoint) setRate(c *CongestionConfig, rate float64) {
	r.rate = min(rate, float64(c.LineRate))
	r.psPerByte = uint32(min(8e12/r.rate, math.MaxUint32))
	r.rateBits.Store(uint64(r.rate))
}

// CongestionRate returns the QP's current DCQCN rate in bits per second,
// or 0 when the QP is not rate limited (no CNP since it last ran at the
// line rate). Any goroutine may call it.
func (q *QP) CongestionRate() uint64 { return q.rp.rateBits.Load() }

// resetCongestion forgets the QP's congestion state (the QP went back to
// RESET).
func (q *QP) resetCongestion() {
	q.rp.limited, q.rp.cutsPending = false, 0
	q.rp.rateBits.Store(0)
	q.cnpPending, q.cnpSent = 0, false
}

// pacedUntil returns when the pacer lets the QP send next, 0 if it does
// not hold back a request at now: the engine sleeps no longer than that.
func (q *QP) pacedUntil(now int64) int64 {
	if !q.rp.limited || q.rp.sendAt <= now || q.req.reqIdx == q.sq.tail.Load() {
		return 0
	}
	return q.rp.sendAt
}
