package main

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// vmKey is the figure key of impl's test in a guest shape.
func vmKey(impl *vmImpl, c vmConfig, t *vmTest) string {
	return impl.key + "/" + c.key() + "/" + t.key
}

// vmFigures turns a guest shape's run into its figures: per test, one
// series per implementation (the median of the rounds; the ratio of two
// the median of the round-by-round ratios), through settle like make
// bench's rounds.
func (s *suite) vmFigures(run *vmRun, rounds int) {
	for _, t := range vmTests {
		var list []*series
		for _, impl := range vmImpls {
			f := &Figure{Key: vmKey(impl, run.cfg, t), Group: groupKernel, Unit: t.unit, LowerIsBetter: t.lower,
				Name: fmt.Sprintf("%s %s, %s", impl.label, t.name, run.cfg.label())}
			if impl.softnic() {
				f.Group, f.Kernel = groupSoftnic, vmKey(vmRxe, run.cfg, t)
			}
			list = append(list, s.vmSeries(f, run, impl, t, rounds))
		}
		s.settle(list...)
	}
}

// vmSeries is impl's values of test t in run, one a round.
func (s *suite) vmSeries(f *Figure, run *vmRun, impl *vmImpl, t *vmTest, rounds int) *series {
	se := &series{fig: f, vals: make([]float64, rounds), notes: make([]string, rounds)}
	for i := range se.vals {
		se.vals[i] = math.NaN()
	}
	for _, st := range run.steps {
		if st.impl != impl || st.test != t {
			continue
		}
		v, err := vmStepValue(run, st)
		if err != nil {
			se.errs = append(se.errs, fmt.Sprintf("round %d: %v", st.round, err))
			continue
		}
		se.vals[st.round-1] = v
	}
	return se
}

// vmStepValue is the figure the client printed in step st, or why there
// is none.
func vmStepValue(run *vmRun, st vmStep) (float64, error) {
	client, ok := run.client[st.index]
	if !ok {
		if run.err != nil {
			return 0, run.err
		}
		return 0, fmt.Errorf("the client guest never reached step %d", st.index)
	}
	server := run.server[st.index]
	if strings.Contains(client, "!! FAILED") || strings.Contains(server, "!! FAILED") {
		return 0, fmt.Errorf("client: %s; server: %s", lastLine(vmTrim(client)), lastLine(vmTrim(server)))
	}
	return st.test.resultFrom(client)
}

// vmTrim drops the harness's own lines, leaving the tool's output.
func vmTrim(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "CPU-") && !strings.HasPrefix(l, "XDP-MODE:") && !strings.HasPrefix(l, "!! FAILED") && strings.TrimSpace(l) != "" {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		return "(no output)"
	}
	return strings.Join(keep, "\n")
}

var (
	xdpModeRE = regexp.MustCompile(`(?m)^XDP-MODE: ?(\S+)$`)
	// vmBindRE is the line softnic perf prints once its sockets are bound
	// (cmd/softnic's bindLine): the mode the kernel granted, read back.
	vmBindRE = regexp.MustCompile(`(?m)^softnic: \S+: AF_XDP bind (.+), XDP \S+, \d+ queues$`)
)

// vmXDPModes counts the XDP modes one side's runs of impl got, e.g.
// "xdp (native) ×9" or "xdpgeneric ×9"; runs that never showed a
// program count as "none".
func vmXDPModes(secs map[int]string, steps []vmStep, impl *vmImpl) string {
	return vmCount(secs, steps, impl, xdpModeRE, func(m string) string {
		if m == "xdp" {
			return "xdp (native)"
		}
		return m
	})
}

// vmBinds counts the AF_XDP bind modes one side's runs of impl reported,
// e.g. "zero-copy ×9"; runs that printed none (softnic failed before its
// sockets bound, as --softnic-xdp-bind zerocopy does where the driver
// refuses) count as "none".
func vmBinds(secs map[int]string, steps []vmStep, impl *vmImpl) string {
	return vmCount(secs, steps, impl, vmBindRE, func(m string) string { return m })
}

// vmCount counts what re's first group found in each section of impl's
// steps, named by name, "none" where it found nothing; "not run" if
// impl ran no step on that side.
func vmCount(secs map[int]string, steps []vmStep, impl *vmImpl, re *regexp.Regexp, name func(string) string) string {
	count := map[string]int{}
	for _, st := range steps {
		if st.impl != impl {
			continue
		}
		sec, ok := secs[st.index]
		if !ok {
			continue
		}
		m := re.FindStringSubmatch(sec)
		if m == nil {
			count["none"]++
			continue
		}
		count[name(m[1])]++
	}
	if len(count) == 0 {
		return "not run"
	}
	var parts []string
	for what, n := range count {
		parts = append(parts, fmt.Sprintf("%s ×%d", what, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// cpuSplit is where a guest's CPU time went during some runs, in jiffies
// of /proc/stat's aggregate line.
type cpuSplit struct {
	user, sys, softirq, idle, other float64
}

func (c cpuSplit) total() float64 { return c.user + c.sys + c.softirq + c.idle + c.other }

func (c *cpuSplit) add(o cpuSplit) {
	c.user, c.sys, c.softirq, c.idle, c.other = c.user+o.user, c.sys+o.sys, c.softirq+o.softirq, c.idle+o.idle, c.other+o.other
}

// String gives the shares of the busy categories and idle, in percent.
func (c cpuSplit) String() string {
	t := c.total()
	if t == 0 {
		return "—"
	}
	pct := func(v float64) float64 { return 100 * v / t }
	return fmt.Sprintf("user %.0f%%, sys %.0f%%, softirq %.0f%%, idle %.0f%%", pct(c.user), pct(c.sys), pct(c.softirq), pct(c.idle))
}

var cpuLineRE = regexp.MustCompile(`(?m)^CPU-(BEFORE|AFTER): cpu +(.*)$`)

// stepCPU is the CPU time the guest spent between a step's two CPU lines.
func stepCPU(sec string) (cpuSplit, bool) {
	var before, after []float64
	for _, m := range cpuLineRE.FindAllStringSubmatch(sec, -1) {
		var v []float64
		for _, f := range strings.Fields(m[2]) {
			x, err := strconv.ParseFloat(f, 64)
			if err != nil {
				return cpuSplit{}, false
			}
			v = append(v, x)
		}
		if len(v) < 7 {
			return cpuSplit{}, false
		}
		if m[1] == "BEFORE" {
			before = v
		} else {
			after = v
		}
	}
	if before == nil || after == nil {
		return cpuSplit{}, false
	}
	d := make([]float64, len(after))
	for i := range d {
		if i < len(before) {
			d[i] = after[i] - before[i]
		}
	}
	// user nice system idle iowait irq softirq [steal [guest guest_nice]]:
	// guest time is already counted in user and nice.
	c := cpuSplit{user: d[0] + d[1], sys: d[2], idle: d[3] + d[4], softirq: d[6], other: d[5]}
	if len(d) > 7 {
		c.other += d[7]
	}
	return c, true
}

// vmCPU sums the CPU split of impl's runs of test t on one side.
func vmCPU(secs map[int]string, steps []vmStep, impl *vmImpl, t *vmTest) cpuSplit {
	var sum cpuSplit
	for _, st := range steps {
		if st.impl == impl && st.test == t {
			if c, ok := stepCPU(secs[st.index]); ok {
				sum.add(c)
			}
		}
	}
	return sum
}

var vmCounterRE = regexp.MustCompile(`(?m)^  (Timeouts|Forwarded|RxPackets) +(\d+)$`)

// vmCounters sums the engine counters softnic printed (--softnic-stats)
// in impl's runs of test t, on both sides and over the rounds: timeouts
// (each costs a retransmit timeout), packets handed from the engine that
// received them to the one running their QP, and packets received.
func vmCounters(r *vmRun, impl *vmImpl, t *vmTest) (timeouts, forwarded, received int, ok bool) {
	for _, st := range r.steps {
		if st.impl != impl || st.test != t {
			continue
		}
		for _, sec := range []string{r.server[st.index], r.client[st.index]} {
			for _, m := range vmCounterRE.FindAllStringSubmatch(sec, -1) {
				n, _ := strconv.Atoi(m[2])
				ok = true
				switch m[1] {
				case "Timeouts":
					timeouts += n
				case "Forwarded":
					forwarded += n
				case "RxPackets":
					received += n
				}
			}
		}
	}
	return timeouts, forwarded, received, ok
}
