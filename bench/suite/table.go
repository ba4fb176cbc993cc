package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// markdown renders the run as the table README.md shows.
func (s *suite) markdown(elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### softnic benchmark, %s\n\n", s.started.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "`make bench`: %d CPUs, Linux %s, %s, commit %s; load average %s at the start, %s at the end; %v in all. "+
		"Two network namespaces joined by a veth pair of %d queues a side (AF_XDP in copy mode); softnic runs `softnic perf` with the server in one "+
		"namespace and the client in the other, one engine per queue. Ratios compare figures of this run only.\n\n",
		s.env.cpus, s.env.kernel, goVersion(), s.env.commit, s.env.loadStart, s.env.loadEnd, elapsed, s.queues)
	b.WriteString("| | figure | value | × ceiling | × kernel | notes |\n|---|---|---:|---:|---:|---|\n")
	for _, f := range s.res.Figures {
		value := fmt.Sprintf("%s %s", fmtValue(f.Value), f.Unit)
		note := f.Note
		if f.Err != "" {
			value = "**not measured**"
			note = "error: " + f.Err
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", f.Group, mdEscape(f.Name), value,
			s.ratioCell(f, f.Ceiling), s.ratioCell(f, f.Kernel), mdEscape(note))
	}
	b.WriteString("\n| target | measured | met |\n|---|---:|---|\n")
	for _, t := range s.look.goals() {
		o := s.res.Evaluate(t)
		measured, met := "—", "not measured: "+o.Why
		if o.Measured {
			switch {
			case t.Ref == "":
				measured = fmtValue(o.Value)
			case t.Diff:
				measured = fmt.Sprintf("%+.2f", o.Value)
			default:
				measured = fmt.Sprintf("%.2f ×", o.Value)
			}
			met = "**no**"
			if o.Met {
				met = "yes"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", t.Name, measured, met)
	}
	b.WriteString("\nCeiling bandwidths are in RDMA payload bits: the blast's frames/s times the IB MTU, so that they compare " +
		"with perftest's payload figures at the same frame size. Kernel figures: iperf3 (one TCP stream, receiver's rate) and a " +
		"UDP ping-pong with blocking system calls (half the round trip, as perftest's write_lat and send_lat report; read_lat " +
		"reports whole READs). The latency ceiling is a ping-pong of write_lat's 82-byte frame between two AF_XDP sockets with " +
		"the steering program (xdpblast -pingpong), both sides polling with sched_yield between empty polls: what the raw path " +
		"gives before any transport work. Latency figures compare with the ceiling's and the kernel's median and p99 " +
		"respectively; read_lat has no ceiling ratio. What limits the missed " +
		"targets: docs/PERFORMANCE.md.\n")
	return b.String()
}

func (s *suite) ratioCell(f *Figure, ref string) string {
	if ref == "" || f.Err != "" {
		return ""
	}
	r, ok := s.res.Ratio(f.Key, ref)
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", r)
}

func fmtValue(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

// write stores the table and the chart as <name>.md and <name>.png
// (latest for make bench), in place of the last run's.
func (s *suite) write(dir, name, table string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	png, err := s.chart()
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	md := table + "\n![benchmark chart](" + name + ".png)\n"
	for file, data := range map[string][]byte{name + ".md": []byte(md), name + ".png": png} {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("\nwrote %s/%s.md and %s.png\n", dir, name, name)
	return nil
}
