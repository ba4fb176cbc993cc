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
	programs := map[string][]byte{}
	for path, bin := range map[string]string{"/usr/bin/softnic": s.softnic, "/usr/bin/vmqueues": o.queuesHelper} {
		b, err := requireStatic(bin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "suite -vm:", err)
			return 2
		}
		programs[path] = b
	}
	img, err := rxeguest.BuildRelease(ctx, o.cache, rxeguest.TrixieBackportsKernel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "suite -vm: guest image:", err)
		return 2
	}
	s.started, s.env = time.Now().UTC(), collectEnv()
	s.look = vmLook(o.configs)
	fmt.Printf("softnic (copy and zero-copy) vs rdma_rxe in qemu guests, %s; %s; guest kernel %s\n",
		s.started.Format("2006-01-02 15:04 UTC"), s.env.summary(), img.KernelVersion)
	var runs []*vmRun
	for _, c := range o.configs {
		if ctx.Err() != nil {
			break
		}
		fmt.Printf("== %s: two guests, %d rounds of %s taking turns\n", c.label(), o.rounds, vmImplNames(vmImpls))
		run := runVMConfig(ctx, img, programs, c, o)
		if run.err != nil {
			fmt.Printf("  guests: %v\n", run.err)
		}
		fmt.Printf("  took %v; guest output: %s\n", run.took.Round(time.Second), run.logs)
		for _, im := range vmSoftnics {
			fmt.Printf("  %s: XDP mode server %s, client %s; bind server %s, client %s\n", im.label,
				vmXDPModes(run.server, run.steps, im), vmXDPModes(run.client, run.steps, im),
				vmBinds(run.server, run.steps, im), vmBinds(run.client, run.steps, im))
		}
		s.vmFigures(run, o.rounds)
		runs = append(runs, run)
	}
	s.env.loadEnd = loadAverage()
	table := s.vmMarkdown(runs, o, img.KernelVersion, time.Since(s.started).Round(time.Second))
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

func vmImplNames(impls []*vmImpl) string {
	var names []string
	for _, im := range impls {
		names = append(names, im.label)
	}
	return strings.Join(names, ", ")
}

// vmLook names bench-vm's groups and sets the goals: softnic, in
// each bind mode, at least rxe's bandwidth and message rate and at most
// its latency, in every guest shape.
func vmLook(configs []vmConfig) look {
	l := look{title: "softnic (copy, zero-copy) vs rdma_rxe, two qemu TCG guests", kernelRef: "rxe",
		legend: []legendItem{{"Linux rdma_rxe", colKernel}, {"softnic", colSoftnic}, {"goal met", colMet}, {"goal missed", colMissed}}}
	l.targets = []Target{}
	for _, c := range configs {
		for _, t := range vmTests {
			word := "≥"
			if t.lower {
				word = "≤"
			}
			for _, im := range vmSoftnics {
				l.targets = append(l.targets, Target{Name: fmt.Sprintf("%s, %s %s 1.0 × rxe, %s", t.name, im.label, word, c.label()),
					Key: vmKey(im, c, t), Ref: vmKey(vmRxe, c, t), AtMost: t.lower, Bound: 1})
			}
		}
	}
	return l
}

// vmMarkdown is bench-vm's report: the side-by-side table, the XDP and
// bind modes, CPU split and counters of each guest shape, and the goals.
func (s *suite) vmMarkdown(runs []*vmRun, o vmOptions, guestKernel string, elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### softnic (AF_XDP copy and zero-copy) vs Linux rdma_rxe in two qemu guests, %s\n\n", s.started.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "`make bench-vm`: host %d CPUs, Linux %s, %s, commit %s; load average %s at the start, %s at the end; %v in all. "+
		"Two identical Debian 13 guests with trixie-backports' kernel (%s; qemu TCG, no KVM; %d MiB each; virtio-net with "+
		"VIRTIO_F_ACCESS_PLATFORM on a bridge, all its queue pairs in use (bench/vmqueues), IB MTU 1024), server %s and client %s; "+
		"rdma_rxe (perftest `ib_write_bw`/`ib_write_lat -d rxe0 -x 1`) and softnic (`softnic perf ... -d eth0 -x 1`, static build) "+
		"with its AF_XDP sockets bound in copy mode (`--softnic-xdp-bind copy`) and in zero-copy (`--softnic-xdp-bind zerocopy`, "+
		"which fails rather than fall back) take turns on the same guests, rxe0 removed for softnic's runs. "+
		"%d rounds, the blocks' order rotating by one each round (rxe, copy, zero-copy; then copy, zero-copy, rxe; ...); "+
		"write_bw 64 KiB %d iterations, write_lat 8 B %d, 64 B message rate %d. Values are medians; a ratio is the median of the "+
		"round-by-round ratios. Compare within this run only.\n\n",
		s.env.cpus, s.env.kernel, goVersion(), s.env.commit, s.env.loadStart, s.env.loadEnd, elapsed,
		guestKernel, o.memMiB, vmServerIP, vmClientIP, o.rounds, o.bwIters, o.latIters, o.rateIters)
	if o.kernelArgs != "" || o.softnicEnv != "" || strings.TrimSpace(o.softnicFlags) != "--softnic-stats" {
		fmt.Fprintf(&b, "Not the defaults: guest kernel arguments %q, softnic's environment %q and options %q.\n\n",
			o.kernelArgs, o.softnicEnv, o.softnicFlags)
	}
	s.vmFigureTable(&b, runs)
	vmModeTable(&b, runs)
	vmCPUTable(&b, runs)
	vmCounterTable(&b, runs)
	s.vmGoalTable(&b)
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

// vmFigureTable is the side-by-side table: each implementation's figure,
// each softnic mode's ratio to rxe, and zero-copy's to copy.
func (s *suite) vmFigureTable(b *strings.Builder, runs []*vmRun) {
	b.WriteString("| guests | test | rdma_rxe | softnic copy | softnic zero-copy | copy ÷ rxe | zero-copy ÷ rxe | zero-copy ÷ copy | runs (rxe; copy; zero-copy) |\n" +
		"|---|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range runs {
		for _, t := range vmTests {
			rxe, cp, zc := s.res.Get(vmKey(vmRxe, r.cfg, t)), s.res.Get(vmKey(vmCopy, r.cfg, t)), s.res.Get(vmKey(vmZeroCopy, r.cfg, t))
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s; %s; %s |\n", r.cfg.label(), t.name,
				vmCell(rxe), vmCell(cp), vmCell(zc), s.vmRatio(cp, rxe), s.vmRatio(zc, rxe), s.vmRatio(zc, cp),
				mdEscape(vmRunsNote(rxe)), mdEscape(vmRunsNote(cp)), mdEscape(vmRunsNote(zc)))
		}
	}
}

// vmRatio is the cell of a ÷ b: "—" where either was not measured.
func (s *suite) vmRatio(a, b *Figure) string {
	if a == nil || b == nil || a.Err != "" || b.Err != "" {
		return "—"
	}
	return s.ratioCell(a, b.Key)
}

// vmModeTable gives, per shape and softnic mode, the XDP mode eth0 showed
// and the bind mode softnic reported, counted over the runs.
func vmModeTable(b *strings.Builder, runs []*vmRun) {
	b.WriteString("\nWhat the kernel granted softnic's runs: eth0's XDP mode (`ip link`) and the AF_XDP sockets' bind mode " +
		"(softnic perf's bind line, read back from the kernel), counted over the runs; \"none\": the run printed none.\n\n" +
		"| guests | softnic | XDP mode (server guest) | (client guest) | AF_XDP bind (server guest) | (client guest) | guests' wall time |\n" +
		"|---|---|---|---|---|---|---:|\n")
	for _, r := range runs {
		took := fmt.Sprint(r.took.Round(time.Second))
		for _, im := range vmSoftnics {
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s |\n", r.cfg.label(), im.label,
				vmXDPModes(r.server, r.steps, im), vmXDPModes(r.client, r.steps, im),
				vmBinds(r.server, r.steps, im), vmBinds(r.client, r.steps, im), took)
			took = ""
		}
	}
}

// vmCPUTable is where each guest's CPU time went, per implementation.
func vmCPUTable(b *strings.Builder, runs []*vmRun) {
	b.WriteString("\nWhere each guest's CPU time went during the runs (/proc/stat, summed over the rounds, connection setup included):\n\n" +
		"| guests | test | run | server | client |\n|---|---|---|---|---|\n")
	for _, r := range runs {
		for _, t := range vmTests {
			for _, im := range vmImpls {
				fmt.Fprintf(b, "| %s | %s | %s | %v | %v |\n", r.cfg.label(), t.name, im.label,
					vmCPU(r.server, r.steps, im, t), vmCPU(r.client, r.steps, im, t))
			}
		}
	}
}

// vmCounterTable sums softnic's engine counters per mode.
func vmCounterTable(b *strings.Builder, runs []*vmRun) {
	b.WriteString("\nsoftnic's engine counters (`--softnic-stats`), both guests, all rounds: retransmit timeouts (4.096 µs × 2^14 ≈ 67 ms each), " +
		"packets that arrived on another queue's engine than their QP's and were handed over, and packets received:\n\n" +
		"| guests | test | softnic | timeouts | handed over | received |\n|---|---|---|---:|---:|---:|\n")
	for _, r := range runs {
		for _, t := range vmTests {
			for _, im := range vmSoftnics {
				if to, fw, rx, ok := vmCounters(r, im, t); ok {
					fmt.Fprintf(b, "| %s | %s | %s | %d | %d | %d |\n", r.cfg.label(), t.name, im.label, to, fw, rx)
				} else {
					fmt.Fprintf(b, "| %s | %s | %s | — | — | — |\n", r.cfg.label(), t.name, im.label)
				}
			}
		}
	}
}

// vmGoalTable evaluates the goals (vmLook).
func (s *suite) vmGoalTable(b *strings.Builder) {
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
		fmt.Fprintf(b, "| %s | %s | %s |\n", t.Name, measured, met)
	}
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
