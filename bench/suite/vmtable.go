package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/softnic/softnic/test/interop/rxeguest"
)

// vmMain runs bench-vm (-vm) and returns the exit status.
func vmMain(ctx context.Context, s *suite, o vmOptions, outDir string) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "suite -vm: needs root (network namespaces, taps, qemu)")
		return 2
	}
	bin, err := requireStatic(s.softnic)
	if err != nil {
		fmt.Fprintln(os.Stderr, "suite -vm:", err)
		return 2
	}
	img, err := rxeguest.Build(ctx, o.cache)
	if err != nil {
		fmt.Fprintln(os.Stderr, "suite -vm: guest image:", err)
		return 2
	}
	s.started, s.env = time.Now().UTC(), collectEnv()
	s.look = vmLook(o.configs)
	steps := vmSteps(vmTests, o.rounds)
	fmt.Printf("softnic vs rdma_rxe in qemu guests, %s; %s; guest kernel %s\n", s.started.Format("2006-01-02 15:04 UTC"),
		s.env.summary(), img.KernelVersion)
	var runs []*vmRun
	for _, c := range o.configs {
		if ctx.Err() != nil {
			break
		}
		fmt.Printf("== %s: two guests, %d steps (%d rounds, rxe and softnic alternating)\n", c.label(), len(steps), o.rounds)
		run := runVMConfig(ctx, img, bin, c, steps, o)
		if run.err != nil {
			fmt.Printf("  guests: %v\n", run.err)
		}
		fmt.Printf("  took %v; softnic's XDP mode: server %s, client %s; guest output: %s\n", run.took.Round(time.Second),
			vmXDPModes(run.server, steps), vmXDPModes(run.client, steps), run.logs)
		s.vmFigures(run, steps, o.rounds)
		runs = append(runs, run)
	}
	s.env.loadEnd = loadAverage()
	table := s.vmMarkdown(runs, steps, o, time.Since(s.started).Round(time.Second))
	fmt.Println()
	fmt.Print(table)
	if outDir != "" {
		if err := s.write(outDir, "vm", table); err != nil {
			fmt.Fprintln(os.Stderr, "suite -vm:", err)
			return 1
		}
	}
	return 0
}

// vmLook names bench-vm's groups and sets the goals: softnic at
// least rxe's bandwidth and message rate, at most its latency, in every
// guest shape.
func vmLook(configs []vmConfig) look {
	l := look{title: "softnic vs rdma_rxe, two qemu TCG guests", kernelRef: "rxe",
		legend: []legendItem{{"Linux rdma_rxe", colKernel}, {"softnic", colSoftnic}, {"goal met", colMet}, {"goal missed", colMissed}}}
	l.targets = []Target{}
	for _, c := range configs {
		for _, t := range vmTests {
			word := "≥"
			if t.lower {
				word = "≤"
			}
			l.targets = append(l.targets, Target{Name: fmt.Sprintf("%s %s 1.0 × rxe, %s", t.name, word, c.label()),
				Key: vmKey("softnic", c, t), Ref: vmKey("rxe", c, t), AtMost: t.lower, Bound: 1})
		}
	}
	return l
}

// vmMarkdown is bench-vm's report: the side-by-side table, the XDP mode
// and CPU split of each guest shape, and the goals.
func (s *suite) vmMarkdown(runs []*vmRun, steps []vmStep, o vmOptions, elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### softnic vs Linux rdma_rxe in two qemu guests, %s\n\n", s.started.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "`make bench-vm`: host %d CPUs, Linux %s, %s, commit %s; load average %s at the start, %s at the end; %v in all. "+
		"Two identical Debian 12 guests (qemu TCG, no KVM; %d MiB each; virtio-net on a bridge, IB MTU 1024), server %s and client %s; "+
		"rdma_rxe (perftest 4.5 `ib_write_bw`/`ib_write_lat -d rxe0 -x 1`) and softnic (`softnic perf ... -d eth0 -x 1`, static build) "+
		"take turns on the same guests, rxe0 removed for softnic's runs. %d rounds, rxe's block first in odd rounds and softnic's in even ones; "+
		"write_bw 64 KiB %d iterations, write_lat 8 B %d, 64 B message rate %d. Values are medians; the ratio is the median of the "+
		"round-by-round ratios. Compare within this run only.\n\n",
		s.env.cpus, s.env.kernel, goVersion(), s.env.commit, s.env.loadStart, s.env.loadEnd, elapsed,
		o.memMiB, vmServerIP, vmClientIP, o.rounds, o.bwIters, o.latIters, o.rateIters)
	if o.kernelArgs != "" || o.softnicEnv != "" || strings.TrimSpace(o.softnicFlags) != "--softnic-stats" {
		fmt.Fprintf(&b, "Not the defaults: guest kernel arguments %q, softnic's environment %q and options %q.\n\n",
			o.kernelArgs, o.softnicEnv, o.softnicFlags)
	}
	b.WriteString("| guests | test | rdma_rxe | softnic | softnic ÷ rxe | runs (rxe; softnic) |\n|---|---|---:|---:|---:|---|\n")
	for _, r := range runs {
		for _, t := range vmTests {
			rxe, sn := s.res.Get(vmKey("rxe", r.cfg, t)), s.res.Get(vmKey("softnic", r.cfg, t))
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s; %s |\n", r.cfg.label(), t.name, vmCell(rxe), vmCell(sn),
				s.ratioCell(sn, sn.Kernel), mdEscape(vmRunsNote(rxe)), mdEscape(vmRunsNote(sn)))
		}
	}
	b.WriteString("\n| guests | softnic's XDP mode (server guest) | (client guest) | guests' wall time |\n|---|---|---|---:|\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "| %s | %s | %s | %v |\n", r.cfg.label(), vmXDPModes(r.server, steps), vmXDPModes(r.client, steps), r.took.Round(time.Second))
	}
	b.WriteString("\nWhere each guest's CPU time went during the runs (/proc/stat, summed over the rounds, connection setup included):\n\n" +
		"| guests | test | rxe server | rxe client | softnic server | softnic client |\n|---|---|---|---|---|---|\n")
	for _, r := range runs {
		for _, t := range vmTests {
			fmt.Fprintf(&b, "| %s | %s | %v | %v | %v | %v |\n", r.cfg.label(), t.name, vmCPU(r.server, steps, "rxe", t),
				vmCPU(r.client, steps, "rxe", t), vmCPU(r.server, steps, "softnic", t), vmCPU(r.client, steps, "softnic", t))
		}
	}
	b.WriteString("\nsoftnic's engine counters (`--softnic-stats`), both guests, all rounds: retransmit timeouts (4.096 µs × 2^14 ≈ 67 ms each), " +
		"packets that arrived on another queue's engine than their QP's and were handed over, and packets received:\n\n" +
		"| guests | test | timeouts | handed over | received |\n|---|---|---:|---:|---:|\n")
	for _, r := range runs {
		for _, t := range vmTests {
			if to, fw, rx, ok := vmCounters(r, steps, t); ok {
				fmt.Fprintf(&b, "| %s | %s | %d | %d | %d |\n", r.cfg.label(), t.name, to, fw, rx)
			} else {
				fmt.Fprintf(&b, "| %s | %s | — | — | — |\n", r.cfg.label(), t.name)
			}
		}
	}
	b.WriteString("\n| goal | measured | met |\n|---|---:|---|\n")
	for _, t := range s.look.goals() {
		out := s.res.Evaluate(t)
		measured, met := "—", "not measured: "+out.Why
		if out.Measured {
			measured, met = fmt.Sprintf("%.2f ×", out.Value), "**no**"
			if out.Met {
				met = "yes"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", t.Name, measured, met)
	}
	for _, r := range runs {
		if r.err != nil {
			fmt.Fprintf(&b, "\n%s: %s\n", r.cfg.label(), mdEscape(r.err.Error()))
		}
		if msgs := vmKernelMessages(r); msgs != "" {
			fmt.Fprintf(&b, "\n%s, guest kernel messages about XDP, virtio_net and the clock: %s\n", r.cfg.label(), mdEscape(msgs))
		}
	}
	return b.String()
}

func vmCell(f *Figure) string {
	if f == nil || f.Err != "" {
		return "**not measured**"
	}
	return fmt.Sprintf("%s %s", fmtValue(f.Value), f.Unit)
}

// vmRunsNote is the figure's runs and errors (its note, or its error).
func vmRunsNote(f *Figure) string {
	if f == nil {
		return "not run"
	}
	if f.Err != "" {
		return "error: " + f.Err
	}
	note, _, _ := strings.Cut(f.Note, "; median run")
	return strings.TrimPrefix(note, "median of ")
}

// vmKernelMessages is what both guests' kernels said about XDP, once each.
func vmKernelMessages(r *vmRun) string {
	seen := map[string]bool{}
	var msgs []string
	for _, end := range []string{r.serverEnd, r.clientEnd} {
		for _, l := range strings.Split(end, "\n") {
			// Drop the timestamp: the same message from both guests counts once.
			if _, rest, ok := strings.Cut(l, "] "); ok {
				l = rest
			}
			if l = strings.TrimSpace(l); l != "" && !seen[l] {
				seen[l] = true
				msgs = append(msgs, l)
			}
		}
	}
	return strings.Join(msgs, " / ")
}
