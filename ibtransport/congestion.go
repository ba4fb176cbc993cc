package ibtransport

import (
	"fmt"
	"time"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// CongestionConfig configures RoCEv2 congestion control (DCQCN, Zhu et al.,
// SIGCOMM 2015) on both sides of a connection, as ConnectX does it:
//
//   - the notification point (NP) is the receiver: for a packet that
//     arrived marked Congestion Experienced (RecvInfo.CE) it sends the
//     sender a CNP, at most one per QP per CNPInterval;
//   - the reaction point (RP) is the sender: a CNP cuts the QP's rate, which
//     then climbs back by timer and byte counter (dcqcn.go), and a per-QP
//     pacer holds the requester to it.
//
// The zero value is ConnectX's defaults with both sides on. Fields named
// after ConnectX's parameters (mlxreg / DOCA names in brackets) take the
// same units, rates in bits per second instead of Mb/s.
type CongestionConfig struct {
	// NPOff stops sending CNPs; RPOff ignores received CNPs (no rate
	// limit, ever). Both off is congestion control switched off.
	NPOff, RPOff bool
	// CNPInterval is the least time between two CNPs for one QP
	// [min_time_between_cnps]; default 4 µs.
	CNPInterval time.Duration
	// LineRate is where a QP's rate starts and the most it climbs back
	// to, in bits per second; default 100 Gb/s (a link's real speed is
	// the better value: once the rate climbs back to it, the QP is no
	// longer paced).
	LineRate uint64
	// MinRate is the floor of the rate [rpg_min_rate]; default 1 Mb/s,
	// at least 2 kb/s.
	MinRate uint64
	// AIRate and HAIRate are the additive and hyper increase steps
	// [rpg_ai_rate, rpg_hai_rate]; defaults 5 and 50 Mb/s.
	AIRate, HAIRate uint64
	// G is the gain of the congestion estimate alpha in 1/1024: alpha
	// keeps G/1024 of itself each AlphaPeriod, and a CNP adds
	// (1024-G)/1024 [dce_tcp_g]; default 1019 (a gain of 5/1024, the
	// paper's g is 4/1024).
	G uint16
	// AlphaPeriod is the alpha timer K [dce_tcp_rtt]; default 1 µs.
	AlphaPeriod time.Duration
	// InitialAlpha is alpha after the first CNP, in 1/1023
	// [initial_alpha_value]; default 1023 (1.0).
	InitialAlpha uint16
	// GD is log2 of the decrease divisor: a cut takes alpha×1024/2^GD of
	// the rate [rpg_gd]; default 11 (alpha/2, as in the paper).
	GD uint8
	// MinDecFac is the largest cut, in percent of the rate
	// [rpg_min_dec_fac]; default 50.
	MinDecFac uint8
	// ReduceMonitorPeriod is the least time between two cuts; CNPs within
	// it are folded into the next [rate_reduce_monitor_period]; default
	// 4 µs.
	ReduceMonitorPeriod time.Duration
	// TimeReset is the rate increase timer [rpg_time_reset]; default
	// 300 µs.
	TimeReset time.Duration
	// ByteReset is the rate increase byte counter in bytes sent
	// [rpg_byte_reset]; default 32767.
	ByteReset uint64
	// Threshold is the number of increase events of fast recovery
	// [rpg_threshold]; the paper's F; default 1.
	Threshold int
	// PacingBurst is the most a paced QP may send at once to catch up
	// with its rate after the engine could not send for a while, in
	// bytes; by default (0) what the rate gives in 50 µs. Not a ConnectX
	// parameter: a NIC's rate limiter does not sleep, a software engine
	// does, and wakes late on a busy host. 64 KiB measured no better on a
	// loaded 1 Gb/s bottleneck: bursts after
	// a stall dropped, where losing the stalled time did not.
	PacingBurst uint32
	// MultipliedHAI makes a hyper increase add i·HAIRate, i the events
	// since hyper increase began, as the paper says (after QCN). By
	// default it adds HAIRate once per event, as HPCC's simulator models
	// ConnectX ("Mellanox's version of DCQCN"); on a 1 Gb/s bottleneck
	// the paper's overshoots more.
	MultipliedHAI bool
	// IncreaseUnused makes every increase event raise the rate, as
	// ConnectX does, also when the QP did not use its rate (the pacer
	// held nothing back since the last event). By default such a QP's
	// rate stays (reactionPoint.increaseIfUsed).
	IncreaseUnused bool
}

// minMinRate is the lowest MinRate: the pacer's step at the rate fits
// 32 bits of picoseconds per byte.
const minMinRate = 2000

// DefaultCongestionConfig returns ConnectX's defaults: the zero value with
// every default filled in.
func DefaultCongestionConfig() CongestionConfig {
	var c CongestionConfig
	c.fill()
	return c
}

// fill replaces the zero fields with their defaults.
func (c *CongestionConfig) fill() {
	setDur := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	setU64 := func(d *uint64, v uint64) {
		if *d == 0 {
			*d = v
		}
	}
	setDur(&c.CNPInterval, 4*time.Microsecond)
	setU64(&c.LineRate, 100e9)
	setU64(&c.MinRate, 1e6)
	setU64(&c.AIRate, 5e6)
	setU64(&c.HAIRate, 50e6)
	if c.G == 0 {
		c.G = 1019
	}
	setDur(&c.AlphaPeriod, time.Microsecond)
	if c.InitialAlpha == 0 {
		c.InitialAlpha = 1023
	}
	if c.GD == 0 {
		c.GD = 11
	}
	if c.MinDecFac == 0 {
		c.MinDecFac = 50
	}
	setDur(&c.ReduceMonitorPeriod, 4*time.Microsecond)
	setDur(&c.TimeReset, 300*time.Microsecond)
	setU64(&c.ByteReset, 32767)
	if c.Threshold == 0 {
		c.Threshold = 1
	}
}

// Check reports the first field out of range, with defaults filled in.
func (c CongestionConfig) Check() error {
	c.fill()
	bad := func(what string, v any) error {
		return fmt.Errorf("congestion control: %s %v out of range: %w", what, v, ibv.ErrInvalidArgument)
	}
	switch {
	case c.CNPInterval < 0:
		return bad("CNP interval", c.CNPInterval)
	case c.MinRate > c.LineRate || c.MinRate < minMinRate:
		return bad("minimum rate", c.MinRate)
	case c.G > 1024:
		return bad("alpha gain G", c.G)
	case c.AlphaPeriod < 0:
		return bad("alpha period", c.AlphaPeriod)
	case c.InitialAlpha > 1023:
		return bad("initial alpha", c.InitialAlpha)
	case c.GD > 20:
		return bad("GD", c.GD)
	case c.MinDecFac > 100:
		return bad("minimum decrease factor", c.MinDecFac)
	case c.ReduceMonitorPeriod < 0 || c.TimeReset <= 0:
		return bad("timer", fmt.Sprint(c.ReduceMonitorPeriod, c.TimeReset))
	case c.Threshold < 0:
		return bad("threshold", c.Threshold)
	}
	return nil
}

// SetCongestion sets the group's congestion control. Call it before the
// group's first QP connects: QPs read it as they enter RTR.
func (g *Group) SetCongestion(c CongestionConfig) error {
	if err := c.Check(); err != nil {
		return err
	}
	c.fill()
	g.cc = c
	return nil
}

// Congestion returns the group's congestion control settings.
func (g *Group) Congestion() CongestionConfig { return g.cc }
