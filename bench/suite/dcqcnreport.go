package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// dcqcnFigures are a run's results.
type dcqcnFigures struct {
	windows              int     // 1 s windows after dcqcnSkip
	gaps                 int     // windows without samples to bound them
	utilMean, utilMin    float64 // of the bottleneck, per window
	jainMean, jainMin    float64 // Jain's fairness of the two senders, per window
	drops                uint64  // at the bottleneck, whole run
	dropsLate            uint64  // after dcqcnSkip
	delayP50, delayP99   float64 // queueing delay at the bottleneck, ms, samples after dcqcnSkip
	delayMax             float64
	goodput              [2]float64 // the senders' own BW average, Gb/s
	timeouts, retransmit [2]uint64
	cnpHandled, cnpIgnor [2]uint64
	// timeoutsNoLoss are the timeouts in 1 s windows where nothing of
	// that sender was lost (no drop at the bottleneck or the receiver's
	// rings, no packet out of sequence): its ACKs came too late, not
	// never. starved is the windows where a sender's trace woke
	// starvedLate or more late: the host did not run it.
	timeoutsNoLoss uint64
	starved        int
}

// starvedLate is how late a sender's trace tick must wake for its window
// to count as one where the host starved it.
const starvedLate = 20 * time.Millisecond

// The marks (#16), as this benchmark checks them: after the first
// dcqcnSkip, no drop at the bottleneck, utilisation at least markUtil
// (mean of the 1 s windows), Jain's fairness at least markJain in every
// window, queueing delay p99 at most markDelayMs (half the default 1 MB
// queue: "bounded"); and no retransmit timeout in the whole run.
const (
	markUtil    = 0.9
	markJain    = 0.95
	markDelayMs = 4.0
)

// marks reports which of the marks the run met.
func (f dcqcnFigures) marks() (noDrop, noTimeout, util, jain, delay bool) {
	return f.dropsLate == 0, f.timeouts[0]+f.timeouts[1] == 0, f.utilMean >= markUtil,
		f.windows > 0 && f.jainMin >= markJain, f.delayP99 <= markDelayMs
}

// allMarks reports whether the run met every mark.
func (f dcqcnFigures) allMarks() bool {
	a, b, c, d, e := f.marks()
	return a && b && c && d && e
}

// marksLine is the run's marks in one line.
func (f dcqcnFigures) marksLine() string {
	yes := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	noDrop, noTimeout, util, jain, delay := f.marks()
	return fmt.Sprintf("drops after 2 s %d (%s), timeouts %d+%d (%s), utilisation %.3f min %.3f (%s), Jain min %.3f (%s), delay p99 %.2f ms (%s)",
		f.dropsLate, yes(noDrop), f.timeouts[0], f.timeouts[1], yes(noTimeout), f.utilMean, f.utilMin, yes(util),
		f.jainMin, yes(jain), f.delayP99, yes(delay))
}

// rateSeries returns each sender's rate in bits/s between consecutive
// samples, as the bottleneck carries it (frames, not just IB bytes), and
// the times at the end of each interval.
func (r *dcqcnRun) rateSeries() (at []float64, rate [2][]float64) {
	for k := 1; k < len(r.samples); k++ {
		a, b := r.samples[k-1], r.samples[k]
		dt := (b.at - a.at).Seconds()
		if dt <= 0 {
			continue
		}
		at = append(at, b.at.Seconds())
		for i := range 2 {
			bytes := float64(b.bytes[i]-a.bytes[i]) + frameOverhead*float64(b.pkts[i]-a.pkts[i])
			rate[i] = append(rate[i], bytes*8/dt)
		}
	}
	return at, rate
}

// figures computes the run's results from its samples and its senders'
// output.
func (r *dcqcnRun) figures() dcqcnFigures {
	var f dcqcnFigures
	f.utilMin, f.jainMin = math.Inf(1), math.Inf(1)
	// 1 s windows from dcqcnSkip, bounded by samples.
	at := func(t time.Duration) int {
		return slices.IndexFunc(r.samples, func(s dcqcnSampleAt) bool { return s.at >= t })
	}
	for w := dcqcnSkip; ; w += time.Second {
		a, b := at(w), at(w+time.Second)
		if a < 0 || b < 0 {
			break
		}
		sa, sb := r.samples[a], r.samples[b]
		dt := (sb.at - sa.at).Seconds()
		if dt < 0.5 {
			// The sampler stalled (a loaded machine): no window here.
			f.gaps++
			continue
		}
		var x [2]float64
		for i := range 2 {
			x[i] = (float64(sb.bytes[i]-sa.bytes[i]) + frameOverhead*float64(sb.pkts[i]-sa.pkts[i])) * 8 / dt
		}
		u := (x[0] + x[1]) / dcqcnBottleneck
		j := 0.0
		if sq := x[0]*x[0] + x[1]*x[1]; sq > 0 {
			j = (x[0] + x[1]) * (x[0] + x[1]) / (2 * sq)
		}
		f.windows++
		f.utilMean += u
		f.jainMean += j
		f.utilMin, f.jainMin = min(f.utilMin, u), min(f.jainMin, j)
	}
	if f.windows > 0 {
		f.utilMean /= float64(f.windows)
		f.jainMean /= float64(f.windows)
	}
	if n := len(r.samples); n > 0 {
		f.drops = r.samples[n-1].drops - r.dropsBefore
		if k := at(dcqcnSkip); k >= 0 {
			f.dropsLate = r.samples[n-1].drops - r.samples[k].drops
		}
	}
	var delays []float64
	for _, s := range r.samples {
		if s.at >= dcqcnSkip {
			delays = append(delays, float64(s.backlog)*8/dcqcnBottleneck*1e3)
		}
	}
	slices.Sort(delays)
	if n := len(delays); n > 0 {
		f.delayP50, f.delayP99, f.delayMax = delays[n/2], delays[min(n-1, n*99/100)], delays[n-1]
	}
	for _, w := range r.windows() {
		if max(w.late[0], w.late[1]) >= starvedLate {
			f.starved++
		}
		for i := range 2 {
			if w.drops == 0 && w.rxDrops == 0 && w.outOfSeq[i] == 0 {
				f.timeoutsNoLoss += w.timeouts[i]
			}
		}
	}
	for i, out := range r.client {
		f.goodput[i] = bwAverage(out)
		f.timeouts[i] = statValue(out, "Timeouts")
		f.retransmit[i] = statValue(out, "Retransmits")
		f.cnpHandled[i] = statValue(out, "RPCNPHandled")
		f.cnpIgnor[i] = statValue(out, "RPCNPIgnored")
	}
	return f
}

var bwLine = regexp.MustCompile(`(?m)^\s*65536\s+\d+\s+[\d.]+\s+([\d.]+)`)

// bwAverage is the BW average (Gb/s) a write_bw client printed.
func bwAverage(out string) float64 {
	m := bwLine.FindStringSubmatch(out)
	if m == nil {
		return math.NaN()
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// statValue is a counter --softnic-stats printed ("Name value").
func statValue(out, name string) uint64 {
	m := regexp.MustCompile(`(?m)^\s*` + name + `\s+(\d+)$`).FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseUint(m[1], 10, 64)
	return v
}

// dcqcnExtra is -dcqcn-flags: one more DCQCN setting whose senders have
// these flags too; dcqcnCases is -dcqcn-cases; dcqcnHog is -dcqcn-hog.
var (
	// dcqcnDaemonFlags is -dcqcn-daemon-flags: the receiver's daemon's
	// (the notification point's) flags.
	dcqcnDaemonFlags string
	// dcqcnMTUCNPInterval is -dcqcn-mtu-cnp-interval: when set, the mtu
	// case also runs with the receiver's CNP interval at this value.
	dcqcnMTUCNPInterval string
	dcqcnExtra          string
	dcqcnCases          = "even,shallow,mtu"
	dcqcnHog            int
	// dcqcnQueue is -dcqcn-queue: the bottleneck's buffer (tbf limit).
	dcqcnQueue = "1mb"
	// dcqcnDrain is -dcqcn-drain: the marker's phantom queue drains at
	// this fraction of the bottleneck (HULL's gamma).
	dcqcnDrain = 0.97
)

// dcqcnSetting is one setting the benchmark runs: each sender's flags,
// and the receiver's daemon's beyond -dcqcn-daemon-flags.
type dcqcnSetting struct {
	name   string
	flags  [2][]string
	daemon []string
	// queue is the bottleneck's buffer (tbf limit), "" for -dcqcn-queue.
	queue string
}

// shallowQueue is the "shallow" case's buffer: less than the two senders'
// windows (2 × 128 packets of 4154 bytes), so that without congestion
// control the queue overflows.
const shallowQueue = "512kb"

// dcqcnSettings returns the settings of -dcqcn-cases: "even" is two
// identical senders with DCQCN at its defaults, without it
// (--softnic-rp-off), and with each setting of -dcqcn-flags (settings
// separated by ";"); "dcqcn" the same without the run without DCQCN (for
// trying settings); "extra" only the -dcqcn-flags settings; "mtu" is
// sender 1 at IB MTU 1024 (rc_pingpong's default), sender 2 at 4096, in
// the same settings as "even" (of -dcqcn-flags, the first): without DCQCN each QP's window of 128
// unacknowledged packets holds a quarter of the bytes for sender 1, and
// the shared queue divides the bottleneck in that proportion; "shallow"
// is "even" without the -dcqcn-flags settings, on a queue of
// shallowQueue.
func dcqcnSettings() ([]dcqcnSetting, error) {
	both := func(f ...string) [2][]string { return [2][]string{f, f} }
	var extras [][]string
	for _, e := range strings.Split(dcqcnExtra, ";") {
		if f := strings.Fields(e); len(f) > 0 {
			extras = append(extras, f)
		}
	}
	withExtras := func(prefix string, out []dcqcnSetting, first []string, extras [][]string) []dcqcnSetting {
		for _, e := range extras {
			out = append(out, dcqcnSetting{name: prefix + "DCQCN " + strings.Join(e, " "), flags: [2][]string{append(slices.Clip(first), e...), e}})
		}
		return out
	}
	var out []dcqcnSetting
	for _, c := range strings.Split(dcqcnCases, ",") {
		switch c {
		case "even":
			out = append(out, dcqcnSetting{name: "with DCQCN", flags: both()}, dcqcnSetting{name: "without DCQCN", flags: both("--softnic-rp-off")})
			out = withExtras("", out, nil, extras)
		case "dcqcn":
			out = append(out, dcqcnSetting{name: "with DCQCN", flags: both()})
			out = withExtras("", out, nil, extras)
		case "shallow":
			q := "queue " + shallowQueue + ", "
			out = append(out, dcqcnSetting{name: q + "with DCQCN", flags: both(), queue: shallowQueue},
				dcqcnSetting{name: q + "without DCQCN", flags: both("--softnic-rp-off"), queue: shallowQueue})
		case "extra":
			if len(extras) == 0 {
				return nil, errors.New("-dcqcn-cases extra needs -dcqcn-flags")
			}
			out = withExtras("", out, nil, extras)
		case "mtu":
			m := []string{"-m", "1024"}
			out = append(out,
				dcqcnSetting{name: "MTU 1024 + 4096, with DCQCN", flags: [2][]string{m, nil}},
				dcqcnSetting{name: "MTU 1024 + 4096, without DCQCN", flags: [2][]string{append(slices.Clip(m), "--softnic-rp-off"), {"--softnic-rp-off"}}})
			// The first setting only: the case is the fairness, not the tuning.
			first := extras[:min(len(extras), 1)]
			out = withExtras("MTU 1024 + 4096, ", out, m, first)
			if dcqcnMTUCNPInterval != "" {
				// One CNP per interval rather than per marked packet: the
				// 1024-byte sender no longer draws four times the CNPs
				// per byte.
				rx := []string{"--cnp-interval=" + dcqcnMTUCNPInterval}
				prefix := "MTU 1024 + 4096, receiver's CNP interval " + dcqcnMTUCNPInterval + ", "
				for _, s := range withExtras(prefix, nil, m, first) {
					s.daemon = rx
					out = append(out, s)
				}
			}
		default:
			return nil, fmt.Errorf("-dcqcn-cases: %q is not even, dcqcn, extra, mtu or shallow", c)
		}
	}
	return out, nil
}

// startHogs starts n CPU-bound processes (sha256sum of an endless
// stream), the load of a busy host, and returns a function that stops
// them.
func startHogs(n int) (func(), error) {
	var hogs []*exec.Cmd
	stop := func() {
		for _, h := range hogs {
			h.Process.Kill()
			h.Wait()
		}
	}
	for range n {
		h := exec.Command("sha256sum", "/dev/zero")
		if err := h.Start(); err != nil {
			stop()
			return nil, err
		}
		hogs = append(hogs, h)
	}
	return stop, nil
}

// dcqcnMain runs the DCQCN benchmark, every setting s.repeat times
// (interleaved rounds), and writes dcqcn.md, dcqcn.svg (the first
// round) and dcqcn-windows.txt (every run's 1 s windows) into outDir
// (none if empty); it returns the exit status.
func dcqcnMain(ctx context.Context, s *suite, outDir string) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "suite: dcqcn needs root (namespaces, XDP, tc)")
		return 2
	}
	if abs, err := filepath.Abs(s.softnic); err == nil {
		s.softnic = abs
	}
	settings, err := dcqcnSettings()
	if err == nil && (dcqcnDrain <= 0 || dcqcnDrain > 1) {
		err = fmt.Errorf("-dcqcn-drain %g: want a fraction of the bottleneck in (0, 1]", dcqcnDrain)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "suite:", err)
		return 2
	}
	started := time.Now().UTC()
	env := collectEnv()
	fmt.Printf("softnic DCQCN benchmark, %s; %s; %d rounds, %d CPU hogs\n", started.Format("2006-01-02 15:04 UTC"), env.summary(), s.repeat, dcqcnHog)
	t, err := newDCQCNTopo(ctx, s.softnic)
	if err != nil {
		fmt.Fprintln(os.Stderr, "suite: dcqcn:", err)
		return 1
	}
	defer t.close()
	if dcqcnHog > 0 {
		stop, err := startHogs(dcqcnHog)
		if err != nil {
			fmt.Fprintln(os.Stderr, "suite: dcqcn: CPU hogs:", err)
			return 1
		}
		defer stop()
	}
	var runs []*dcqcnRun
	var windows strings.Builder
	for round := range max(s.repeat, 1) {
		for _, c := range settings {
			fmt.Printf("== round %d, %s, %d s, load average %s\n", round+1, c.name, dcqcnSeconds, loadAverage())
			if err := t.useDaemon(ctx, c.daemon); err != nil {
				fmt.Fprintf(os.Stderr, "suite: dcqcn: %s: %v\n", c.name, err)
				return 1
			}
			if err := t.useQueue(ctx, cmp.Or(c.queue, dcqcnQueue)); err != nil {
				fmt.Fprintf(os.Stderr, "suite: dcqcn: %s: %v\n", c.name, err)
				return 1
			}
			r, err := t.run(ctx, c.name, c.flags)
			if err != nil {
				fmt.Fprintf(os.Stderr, "suite: dcqcn: %s: %v\n", c.name, err)
				return 1
			}
			r.round, r.load = round+1, loadAverage()
			runs = append(runs, r)
			f := r.figures()
			fmt.Printf("   %s\n", f.marksLine())
			fmt.Fprintf(&windows, "== round %d, %s (load average after: %s): %s\n%s\n", r.round, r.name, r.load, f.marksLine(), r.windowTable())
		}
	}
	md := dcqcnMarkdown(runs, len(settings), started, env)
	fmt.Print("\n" + md)
	if outDir == "" {
		fmt.Print("\n" + windows.String())
		return 0
	}
	svg := dcqcnChart(runs[:len(settings)])
	for file, data := range map[string][]byte{"dcqcn.md": []byte(md + "\n![each sender's rate](dcqcn.svg)\n"), "dcqcn.svg": svg,
		"dcqcn-windows.txt": []byte(windows.String())} {
		if err := os.WriteFile(filepath.Join(outDir, file), data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "suite:", err)
			return 1
		}
	}
	fmt.Printf("\nwrote %s/dcqcn.md, dcqcn.svg and dcqcn-windows.txt\n", outDir)
	return 0
}

// dcqcnMarkdown is the results: the first round's table (one column per
// setting), then every run's marks.
func dcqcnMarkdown(all []*dcqcnRun, settings int, started time.Time, env runEnv) string {
	runs := all[:settings]
	var b strings.Builder
	fmt.Fprintf(&b, "# DCQCN: two senders into one 1 Gb/s bottleneck\n\n%s; %s. `make bench-dcqcn` (bench/suite/dcqcn.go), %d rounds, %d CPU hogs.\n\n",
		started.Format("2006-01-02 15:04 UTC"), env.summary(), len(all)/settings, dcqcnHog)
	if dcqcnDaemonFlags != "" {
		fmt.Fprintf(&b, "The receiver's daemon ran with `%s`.\n\n", dcqcnDaemonFlags)
	}
	b.WriteString("Two `softnic perf write_bw` senders (64 KiB WRITEs, IB MTU 4096 unless said, 9000-byte veths, in-process devices) into\n" +
		"one receiver (a `softnic daemon`, both servers on its device) through a router namespace: tbf 1 Gb/s (64 KB bucket,\n" +
		"queue limit " + dcqcnQueue + ") on the link to the receiver, and in front of it a tc BPF phantom queue (bench/suite/phantom/phantom.c) drained\n" +
		fmt.Sprintf("at %.3g Gb/s (its backlog capped at 1 MiB) that marks CE above 30 KB.", dcqcnDrain*dcqcnBottleneck/1e9) +
		" Senders' congestion control at its defaults (line rate the\n" +
		"veth's 10 Gb/s), or with the reaction point off (`--softnic-rp-off`: CNPs arrive and are ignored). Rates are\n" +
		"frames through the bottleneck per receiving QP (the daemon's counters every 100 ms); utilisation and Jain's\n" +
		"fairness over 1 s windows after the first 2 s; queueing delay = tbf backlog at 1 Gb/s, sampled.\n" +
		"\"MTU 1024 + 4096\": sender 1 at IB MTU 1024, sender 2 at 4096 (without DCQCN each QP's window decides its share: 256 packets at 1024, 128 at 4096).\n" +
		"`--softnic-rpg-hai-rate=5`: hyper increase 5 Mb/s per event instead of ConnectX's 50.\n" +
		"The table is the first round; every run's marks follow, and each run's 1 s windows (with the senders' --softnic-trace:\n" +
		"DCQCN rate, timeouts, CPU starvation; the bottleneck's own output rate) are in dcqcn-windows.txt.\n\n")
	figs := make([]dcqcnFigures, len(runs))
	b.WriteString("| | ")
	for i, r := range runs {
		figs[i] = r.figures()
		b.WriteString(r.name + " | ")
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat("---|", len(runs)) + "\n")
	row := func(name string, cell func(f dcqcnFigures, r *dcqcnRun) string) {
		b.WriteString("| " + name + " | ")
		for i, r := range runs {
			b.WriteString(cell(figs[i], r) + " | ")
		}
		b.WriteString("\n")
	}
	row("utilisation, mean (min) of 1 s windows", func(f dcqcnFigures, _ *dcqcnRun) string {
		s := fmt.Sprintf("%.3f (%.3f), %d windows", f.utilMean, f.utilMin, f.windows)
		if f.gaps > 0 {
			s += fmt.Sprintf(", %d without samples", f.gaps)
		}
		return s
	})
	row("Jain's fairness, mean (min)", func(f dcqcnFigures, _ *dcqcnRun) string {
		return fmt.Sprintf("%.3f (%.3f)", f.jainMean, f.jainMin)
	})
	row("drops at the bottleneck (after the first 2 s)", func(f dcqcnFigures, _ *dcqcnRun) string {
		return fmt.Sprintf("%d (%d)", f.drops, f.dropsLate)
	})
	row("queueing delay p50 / p99 / max, ms", func(f dcqcnFigures, _ *dcqcnRun) string {
		return fmt.Sprintf("%.2f / %.2f / %.2f", f.delayP50, f.delayP99, f.delayMax)
	})
	row("senders' goodput (perf BW average), Gb/s", func(f dcqcnFigures, _ *dcqcnRun) string {
		return fmt.Sprintf("%.2f + %.2f", f.goodput[0], f.goodput[1])
	})
	row("retransmit timeouts (go-back-N restarts)", func(f dcqcnFigures, _ *dcqcnRun) string {
		return fmt.Sprintf("%d + %d (%d + %d)", f.timeouts[0], f.timeouts[1], f.retransmit[0], f.retransmit[1])
	})
	row("receiver: CE-marked packets, CNPs sent", func(_ dcqcnFigures, r *dcqcnRun) string {
		return fmt.Sprintf("%d, %d", r.marked, r.cnpSent)
	})
	row("senders: CNPs handled (ignored)", func(f dcqcnFigures, _ *dcqcnRun) string {
		return fmt.Sprintf("%d + %d (%d + %d)", f.cnpHandled[0], f.cnpHandled[1], f.cnpIgnor[0], f.cnpIgnor[1])
	})
	b.WriteString(marksTable(all))
	return b.String()
}

// marksTable lists every run with the marks it met (#16; marks()).
func marksTable(all []*dcqcnRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nEvery run against the issue's marks (no drop after 2 s; no retransmit timeout; utilisation >= %.2f, mean of 1 s windows; "+
		"Jain >= %.2f in every window; queueing delay p99 <= %.0f ms):\n\n", markUtil, markJain, markDelayMs)
	b.WriteString("| round | setting | load avg after | drops after 2 s | timeouts (of them without loss) | utilisation (min) | Jain min | delay p99, ms | goodput, Gb/s | every mark | windows with a sender starved >= 20 ms |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range all {
		f := r.figures()
		every := "no"
		if f.allMarks() {
			every = "yes"
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %d | %d + %d (%d) | %.3f (%.3f) | %.3f | %.2f | %.2f + %.2f | %s | %d |\n", r.round, r.name, r.load,
			f.dropsLate, f.timeouts[0], f.timeouts[1], f.timeoutsNoLoss, f.utilMean, f.utilMin, f.jainMin, f.delayP99, f.goodput[0], f.goodput[1], every, f.starved)
	}
	return b.String()
}
