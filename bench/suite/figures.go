package main

import (
	"fmt"
	"math"
)

// Figure is one measured number of the table, or the error that kept it
// from being measured.
type Figure struct {
	Key   string  // stable identifier that ratios and targets refer to
	Group string  // groupCeiling, groupKernel or groupSoftnic
	Name  string  // what was measured, for the table
	Value float64 // in Unit
	Unit  string
	Note  string // secondary figures (frames/s, wire rate, ...)
	Err   string // not measured: why
	// Ceiling and Kernel name the figures this one is compared with
	// (empty: no comparison makes sense).
	Ceiling, Kernel string
	// LowerIsBetter marks latencies and memory.
	LowerIsBetter bool
	// paired holds ratios to figures measured in the same rounds (the
	// median of the round-by-round ratios), which Ratio prefers.
	paired map[string]float64
}

const (
	groupCeiling = "ceiling (raw AF_XDP)"
	groupKernel  = "kernel"
	groupSoftnic = "softnic"
)

const (
	unitGbps = "Gb/s"
	unitMpps = "Mpps"
	unitMBps = "MB/s"
	unitUsec = "µs"
	unitKiB  = "KiB"
	unitPkt  = "allocs/packet"
)

// Results is every figure of a run, in table order.
type Results struct {
	Figures []*Figure
	byKey   map[string]*Figure
}

func (r *Results) add(f *Figure) *Figure {
	if r.byKey == nil {
		r.byKey = map[string]*Figure{}
	}
	r.Figures = append(r.Figures, f)
	r.byKey[f.Key] = f
	return f
}

// Get returns the figure with key, or nil.
func (r *Results) Get(key string) *Figure { return r.byKey[key] }

// Ratio divides the figure a by the figure b; ok is false when either is
// missing, failed, or b is not positive.
func (r *Results) Ratio(a, b string) (float64, bool) {
	fa, fb := r.Get(a), r.Get(b)
	if fa == nil || fb == nil || fa.Err != "" || fb.Err != "" || fb.Value <= 0 || math.IsNaN(fa.Value) {
		return 0, false
	}
	if v, ok := fa.paired[b]; ok {
		return v, true
	}
	return fa.Value / fb.Value, true
}

// Target is one of the goals, a ratio (or an absolute bound when
// Ref is empty) measured in the same run.
type Target struct {
	Name   string
	Key    string // the figure
	Ref    string // the baseline figure; empty for an absolute bound
	AtMost bool   // the ratio (or value) must be at most Bound, not at least
	// Diff compares Key minus Ref, not their ratio, with Bound.
	Diff  bool
	Bound float64
}

// Outcome is a target's measured ratio and whether it is met.
type Outcome struct {
	Target
	Value    float64
	Measured bool
	Met      bool
	Why      string // when not measured
}

// Evaluate checks t against the results.
func (r *Results) Evaluate(t Target) Outcome {
	o := Outcome{Target: t}
	f := r.Get(t.Key)
	if o.Why = r.missing(t.Key); o.Why != "" {
		return o
	}
	if t.Ref == "" {
		o.Value, o.Measured = f.Value, true
	} else {
		ref := r.Get(t.Ref)
		if o.Why = r.missing(t.Ref); o.Why != "" {
			return o
		}
		v, ok := r.Ratio(t.Key, t.Ref)
		if t.Diff {
			v, ok = r.Get(t.Key).Value-ref.Value, true
		}
		if !ok {
			o.Why = fmt.Sprintf("%s is %v", t.Ref, ref.Value)
			return o
		}
		o.Value, o.Measured = v, true
	}
	if t.AtMost {
		o.Met = o.Value <= t.Bound
	} else {
		o.Met = o.Value >= t.Bound
	}
	return o
}

// missing says why the figure key has no value, or "" if it has one.
func (r *Results) missing(key string) string {
	switch f := r.Get(key); {
	case f == nil:
		return key + " not run"
	case f.Err != "":
		return key + " failed"
	}
	return ""
}

// targets are the performance goals docs/PERFORMANCE.md states.
var targets = []Target{
	{Name: "write_bw 64 KiB ≥ 0.9 × AF_XDP ceiling (IB MTU 4096, 9000-byte link)", Key: "softnic/write_bw/4096", Ref: "ceiling/4096", Bound: 0.9},
	{Name: "write_bw 64 KiB ≥ 0.9 × AF_XDP ceiling (IB MTU 1024, 1500-byte link)", Key: "softnic/write_bw/1024", Ref: "ceiling/1024", Bound: 0.9},
	{Name: "write_bw 64 KiB ≥ 1.0 × one kernel TCP stream (9000-byte link)", Key: "softnic/write_bw/4096", Ref: "kernel/tcp/9000", Bound: 1.0},
	{Name: "write_bw 64 KiB ≥ 1.0 × one kernel TCP stream (1500-byte link)", Key: "softnic/write_bw/1024", Ref: "kernel/tcp/1500", Bound: 1.0},
	{Name: "write_lat 8 B median ≤ 0.5 × kernel UDP ping-pong", Key: "softnic/write_lat/median", Ref: "kernel/udp/median", AtMost: true, Bound: 0.5},
	{Name: "64 B write message rate ≥ 0.8 × AF_XDP small-frame rate", Key: "softnic/msgrate", Ref: "ceiling/small", Bound: 0.8},
	{Name: "write_bw over 1024 QPs ≥ 0.9 × one QP", Key: "softnic/qps/1024", Ref: "softnic/qps/1", Bound: 0.9},
	{Name: "no allocation per packet in steady state (≤ 0.01 per packet)", Key: "softnic/allocs", AtMost: true, Bound: 0.01},
	{Name: "memory per idle QP ≤ 16 KiB", Key: "softnic/qpmem", AtMost: true, Bound: 16},
	{Name: "through the daemon: write_bw 64 KiB ≥ 0.9 × in-process (9000-byte link)", Key: "daemon/daemon/write_bw",
		Ref: "daemon/inproc/write_bw", Bound: 0.9},
	{Name: "through the daemon: write_lat 8 B median ≤ in-process + 1 µs (9000-byte link)", Key: "daemon/daemon/write_lat",
		Ref: "daemon/inproc/write_lat", Diff: true, AtMost: true, Bound: 1},
	{Name: "through the daemon: 64 B message rate ≥ 0.8 × in-process (9000-byte link)", Key: "daemon/daemon/msgrate",
		Ref: "daemon/inproc/msgrate", Bound: 0.8},
	{Name: "through the daemon: 8 processes of one QP ≥ 0.9 × one in-process process of 8 QPs", Key: "daemon/daemon/procs8",
		Ref: "daemon/inproc/qps8", Bound: 0.9},
	{Name: "Debian's ib_write_bw 64 KiB through the provider ≥ 0.9 × softnic perf in-process (9000-byte link)",
		Key: "daemon/stock/write_bw", Ref: "daemon/inproc/write_bw", Bound: 0.9},
	{Name: "Debian's ib_write_lat 8 B median through the provider ≤ 1.3 × softnic perf in-process (9000-byte link)",
		Key: "daemon/stock/write_lat", Ref: "daemon/inproc/write_lat", AtMost: true, Bound: 1.3},
	{Name: "Debian's ib_write_bw 64 B message rate through the provider ≥ 0.8 × softnic perf in-process (9000-byte link)",
		Key: "daemon/stock/msgrate", Ref: "daemon/inproc/msgrate", Bound: 0.8},
	{Name: "write_bw 64 KiB with --pcap on both sides ≥ 0.75 × without (9000-byte link)", Key: "capture/pcap",
		Ref: "capture/none", Bound: 0.75},
	{Name: "write_bw 64 KiB with --pcap on the sender only ≥ 0.75 × without (9000-byte link)", Key: "capture/pcapsender",
		Ref: "capture/none", Bound: 0.75},
	{Name: "write_bw 64 KiB with --pcap --snaplen 128 on both sides ≥ 0.75 × without (9000-byte link)", Key: "capture/pcap128",
		Ref: "capture/none", Bound: 0.75},
	{Name: "Debian's ucx_perftest tag_bw 64 KiB over rc through the daemon ≥ 0.8 × softnic perf write_bw in-process (9000-byte link)",
		Key: "middleware/ucx/tag_bw", Ref: "middleware/write_bw", Bound: 0.8},
	{Name: "Debian's rstream 64 KiB over softnic's rsockets through the daemon ≥ 0.8 × softnic perf send_bw in-process (9000-byte link)",
		Key: "rsockets/rstream", Ref: "rsockets/send_bw", Bound: 0.8},
}
