package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/softnic/softnic/internal/netnstest"
)

// suite holds the run's settings.
type suite struct {
	softnic, xdpblast string
	duration          time.Duration // per bandwidth run
	repeat            int           // runs per bandwidth figure (the median counts)
	busyPoll          bool          // in-process part: AF_XDP sockets with preferred busy polling
	memSQ             int           // send queue of the idle QPs
	perfTimeout       time.Duration
	maxIters          int
	latIters          int
	qpCounts          []int
	res               Results
	started           time.Time
	env               runEnv
}

func main() {
	s := &suite{}
	flag.StringVar(&s.softnic, "softnic", "bin/softnic", "softnic binary")
	flag.StringVar(&s.xdpblast, "xdpblast", "bin/xdpblast", "xdpblast binary")
	flag.DurationVar(&s.duration, "duration", 2*time.Second, "target duration of each bandwidth run")
	flag.IntVar(&s.repeat, "repeat", 3, "runs per bandwidth figure; the table shows the median")
	flag.BoolVar(&s.busyPoll, "inproc-busy-poll", false, "in-process part: open the AF_XDP sockets with preferred busy polling (an experiment)")
	flag.DurationVar(&s.perfTimeout, "perf-timeout", 60*time.Second, "limit of one softnic perf run")
	flag.IntVar(&s.maxIters, "max-iters", 200000, "most iterations of a bandwidth run")
	flag.IntVar(&s.latIters, "lat-iters", 2000, "round trips of a latency run")
	qps := flag.String("qps", "1,16,256,1024", "QP counts of the aggregate write_bw figures")
	memQPs := flag.Int("mem-qps", 1024, "QP pairs created to measure the memory of an idle QP")
	flag.IntVar(&s.memSQ, "mem-sq", 128, "send queue size of the idle QPs (perftest's tx depth)")
	only := flag.String("only", "", "comma-separated parts to run (ceiling,tcp,udp,bw9000,bw1500,qps,lat,msgrate,qpmem,allocs); default all")
	profileDir := flag.String("profile-dir", "bench/results", "where the in-process runs write CPU profiles of write_bw (64 KiB, 64 B) and write_lat, and a heap profile of idle QPs (empty: none)")
	outDir := flag.String("out", "bench/results", "directory for latest.md, latest.png and dated copies (empty: none)")
	echo := flag.String("udp-echo", "", "internal: be the echo server of the UDP ping-pong at ADDR:PORT")
	flag.Parse()
	if *echo != "" {
		if err := udpEcho(*echo); err != nil {
			fmt.Fprintf(os.Stderr, "suite: udp echo: %v\n", err)
			os.Exit(1)
		}
		return
	}
	for _, f := range strings.Split(*qps, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "suite: bad QP count %q\n", f)
			os.Exit(2)
		}
		s.qpCounts = append(s.qpCounts, n)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "suite: needs root (network namespaces, veth, XDP and AF_XDP)")
		os.Exit(2)
	}
	for _, bin := range []*string{&s.softnic, &s.xdpblast} {
		abs, err := filepath.Abs(*bin)
		if err == nil {
			*bin = abs
		}
		if _, err := os.Stat(*bin); err != nil {
			fmt.Fprintf(os.Stderr, "suite: %v (run make build, or make bench)\n", err)
			os.Exit(2)
		}
	}
	parts := map[string]bool{}
	for _, p := range strings.Split(*only, ",") {
		if p = strings.TrimSpace(p); p != "" {
			parts[p] = true
		}
	}
	want := func(part string) bool { return len(parts) == 0 || parts[part] }

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	s.started = time.Now().UTC()
	s.env = collectEnv()
	fmt.Printf("softnic benchmark suite, %s; %s\n", s.started.Format("2006-01-02 15:04 UTC"), s.env.summary())

	if want("ceiling") {
		s.ceilings(ctx)
	}
	if want("tcp") || want("bw9000") || want("qps") {
		s.withPair(ctx, 9000, func(p *netnstest.Pair) {
			if want("tcp") {
				s.tcp(ctx, p, 9000)
			}
			if want("bw9000") || want("qps") {
				s.bandwidths(ctx, p, 4096, want("bw9000"))
			}
			if want("qps") {
				s.manyQPs(ctx, p)
			}
		})
	}
	if want("tcp") || want("udp") || want("bw1500") || want("lat") || want("msgrate") {
		s.withPair(ctx, 1500, func(p *netnstest.Pair) {
			if want("tcp") {
				s.tcp(ctx, p, 1500)
			}
			if want("udp") {
				s.udp(ctx, p)
			}
			if want("bw1500") {
				s.bandwidths(ctx, p, 1024, true)
			}
			if want("lat") {
				s.latencies(ctx, p)
			}
			if want("msgrate") {
				s.msgRate(ctx, p)
			}
		})
	}
	if want("allocs") {
		s.allocs(ctx, *profileDir)
	}
	if want("qpmem") {
		s.qpMem(*memQPs, *profileDir)
	}
	elapsed := time.Since(s.started).Round(time.Second)
	s.env.loadEnd = loadAverage()

	table := s.markdown(elapsed)
	fmt.Println()
	fmt.Print(table)
	if *outDir != "" {
		if err := s.write(*outDir, table); err != nil {
			fmt.Fprintf(os.Stderr, "suite: %v\n", err)
			os.Exit(1)
		}
	}
}

// withPair runs fn with two fresh namespaces joined by a veth pair of the
// given MTU, IPv4 only so that GID index 1 is the IPv4 address.
func (s *suite) withPair(ctx context.Context, mtu int, fn func(*netnstest.Pair)) {
	if ctx.Err() != nil {
		return
	}
	p, err := netnstest.New(netnstest.Config{MTU: mtu,
		AddrsA: []netip.Prefix{netip.MustParsePrefix("10.48.0.1/24")},
		AddrsB: []netip.Prefix{netip.MustParsePrefix("10.48.0.2/24")}})
	if err != nil {
		s.failAll(fmt.Sprintf("namespaces with a %d-byte veth: %v", mtu, err))
		return
	}
	defer p.Close()
	fn(p)
}

// failAll records err for the figures that needed a topology.
func (s *suite) failAll(err string) {
	fmt.Fprintln(os.Stderr, "suite:", err)
	s.res.add(&Figure{Key: "setup", Group: groupSoftnic, Name: "topology", Err: err})
}

// report prints a figure as soon as it is measured, and records it.
func (s *suite) report(f *Figure) {
	s.res.add(f)
	if f.Err != "" {
		fmt.Printf("  %-58s FAILED: %s\n", f.Name, f.Err)
		return
	}
	fmt.Printf("  %-58s %10.3f %-6s %s\n", f.Name, f.Value, f.Unit, f.Note)
}

func (s *suite) ceilings(ctx context.Context) {
	fmt.Println("== ceiling: raw AF_XDP blast (xdpblast)")
	for _, c := range []struct {
		key      string
		ibMTU    int
		frame    int
		mtu      int
		payloadB int
	}{
		{"ceiling/4096", 4096, bulkFrame(4096), 9000, 4096},
		{"ceiling/1024", 1024, bulkFrame(1024), 1500, 1024},
	} {
		f := &Figure{Key: c.key, Group: groupCeiling, Unit: unitGbps, Kernel: fmt.Sprintf("kernel/tcp/%d", c.mtu),
			Name: fmt.Sprintf("AF_XDP blast, %d-byte frames, %d-byte link", c.frame, c.mtu)}
		r, runs, err := s.blasts(ctx, c.frame, c.mtu)
		if err != nil {
			f.Err = err.Error()
		} else {
			// In RDMA payload bits: what softnic could carry at that
			// frame rate with full IB MTU packets.
			f.Value = r.FramesPerSecond * float64(c.payloadB) * 8 / 1e9
			f.Note = fmt.Sprintf("%.0f frames/s (median of %s); %.2f Gb/s of whole frames; value = frames/s × %d payload bytes",
				r.FramesPerSecond, runs, r.Gbps, c.payloadB)
		}
		s.report(f)
	}
	f := &Figure{Key: "ceiling/small", Group: groupCeiling, Unit: unitMpps,
		Name: fmt.Sprintf("AF_XDP blast, %d-byte frames (a 64 B WRITE), 1500-byte link", smallWriteFrame)}
	r, runs, err := s.blasts(ctx, smallWriteFrame, 1500)
	if err != nil {
		f.Err = err.Error()
	} else {
		f.Value = r.FramesPerSecond / 1e6
		f.Note = fmt.Sprintf("median of %s frames/s; %.2f Gb/s of whole frames", runs, r.Gbps)
	}
	s.report(f)
}

// blasts runs xdpblast s.repeat times and returns the run with the median
// frame rate and every run's rate.
func (s *suite) blasts(ctx context.Context, size, mtu int) (blastResult, string, error) {
	var runs []blastResult
	var figs, errs []string
	for range s.repeat {
		r, err := s.blast(ctx, size, mtu)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		runs = append(runs, r)
		figs = append(figs, fmt.Sprintf("%.0f", r.FramesPerSecond))
	}
	if len(runs) == 0 {
		return blastResult{}, "", fmt.Errorf("%d runs failed: %s", len(errs), strings.Join(errs, "; "))
	}
	note := strings.Join(figs, ", ")
	if len(errs) > 0 {
		note += fmt.Sprintf("; %d runs failed: %s", len(errs), strings.Join(errs, "; "))
	}
	return medianBy(runs, func(r blastResult) float64 { return r.FramesPerSecond }), note, nil
}

func (s *suite) tcp(ctx context.Context, p *netnstest.Pair, mtu int) {
	fmt.Printf("== kernel TCP, one stream (iperf3), %d-byte veth\n", mtu)
	f := &Figure{Key: fmt.Sprintf("kernel/tcp/%d", mtu), Group: groupKernel, Unit: unitGbps,
		Name: fmt.Sprintf("TCP, one stream, %d-byte link", mtu)}
	var runs []float64
	var figs, errs []string
	for range s.repeat {
		v, err := s.tcpStream(ctx, p)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		runs = append(runs, v)
		figs = append(figs, fmt.Sprintf("%.2f", v))
	}
	if len(runs) == 0 {
		f.Err = fmt.Sprintf("%d runs failed: %s", len(errs), strings.Join(errs, "; "))
	} else {
		f.Value = medianBy(runs, func(v float64) float64 { return v })
		f.Note = "median of " + strings.Join(figs, ", ")
		if len(errs) > 0 {
			f.Note += fmt.Sprintf("; %d runs failed: %s", len(errs), strings.Join(errs, "; "))
		}
	}
	s.report(f)
}

func (s *suite) udp(ctx context.Context, p *netnstest.Pair) {
	fmt.Println("== kernel UDP ping-pong, 8 bytes, 1500-byte veth")
	r, err := s.udpPingPong(ctx, p, 8, 5000)
	med := &Figure{Key: "kernel/udp/median", Group: groupKernel, Unit: unitUsec, LowerIsBetter: true,
		Name: "UDP ping-pong 8 B, half round trip, median"}
	p99 := &Figure{Key: "kernel/udp/p99", Group: groupKernel, Unit: unitUsec, LowerIsBetter: true,
		Name: "UDP ping-pong 8 B, half round trip, p99"}
	if err != nil {
		med.Err, p99.Err = err.Error(), err.Error()
	} else {
		med.Value, p99.Value = r.Median, r.P99
		med.Note = fmt.Sprintf("%d round trips", r.Rounds)
	}
	s.report(med)
	s.report(p99)

}

// bandwidths measures write_bw, read_bw and send_bw of 64 KiB messages at
// the IB MTU (the only 1-QP write_bw figure is needed for the QP scaling
// when all is false).
func (s *suite) bandwidths(ctx context.Context, p *netnstest.Pair, ibMTU int, all bool) {
	fmt.Printf("== softnic bandwidth, 64 KiB messages, IB MTU %d, %d-byte veth\n", ibMTU, p.MTU)
	tests := []string{"write_bw", "read_bw", "send_bw"}
	if !all {
		tests = tests[:1]
	}
	tcpKey := fmt.Sprintf("kernel/tcp/%d", p.MTU)
	for _, test := range tests {
		f := &Figure{Key: fmt.Sprintf("softnic/%s/%d", test, ibMTU), Group: groupSoftnic, Unit: unitGbps,
			Name:    fmt.Sprintf("%s 64 KiB, IB MTU %d, %d-byte link", test, ibMTU, p.MTU),
			Ceiling: fmt.Sprintf("ceiling/%d", ibMTU), Kernel: tcpKey}
		r, note, err := s.bandwidth(ctx, p, test, 64<<10, ibMTU, 1)
		if err != nil {
			f.Err = err.Error()
		} else {
			f.Value, f.Note = r.Avg, note
		}
		s.report(f)
	}
}

// manyQPs measures the aggregate write_bw over many QPs.
func (s *suite) manyQPs(ctx context.Context, p *netnstest.Pair) {
	fmt.Println("== softnic write_bw over many QPs, 64 KiB, IB MTU 4096, 9000-byte veth")
	for _, n := range s.qpCounts {
		f := &Figure{Key: fmt.Sprintf("softnic/qps/%d", n), Group: groupSoftnic, Unit: unitGbps,
			Name: fmt.Sprintf("write_bw 64 KiB over %d QPs (aggregate)", n), Ceiling: "ceiling/4096", Kernel: "kernel/tcp/9000"}
		if one := s.res.Get("softnic/write_bw/4096"); n == 1 && one != nil {
			f.Value, f.Err, f.Note = one.Value, one.Err, "the write_bw figure above"
			s.report(f)
			continue
		}
		r, note, err := s.bandwidth(ctx, p, "write_bw", 64<<10, 4096, n)
		if err != nil {
			f.Err = err.Error()
		} else {
			f.Value, f.Note = r.Avg, note
		}
		s.report(f)
	}
}

func (s *suite) latencies(ctx context.Context, p *netnstest.Pair) {
	fmt.Printf("== softnic latency, 8 bytes, IB MTU 1024, %d-byte veth (%d round trips)\n", p.MTU, s.latIters)
	for _, test := range []string{"write_lat", "read_lat", "send_lat"} {
		what := "half round trip"
		if test == "read_lat" {
			what = "whole READ"
		}
		med := &Figure{Key: "softnic/" + test + "/median", Group: groupSoftnic, Unit: unitUsec, LowerIsBetter: true,
			Name: fmt.Sprintf("%s 8 B, %s, median", test, what), Kernel: "kernel/udp/median"}
		p99 := &Figure{Key: "softnic/" + test + "/p99", Group: groupSoftnic, Unit: unitUsec, LowerIsBetter: true,
			Name: fmt.Sprintf("%s 8 B, %s, p99", test, what), Kernel: "kernel/udp/p99"}
		r, err := s.latency(ctx, p, test, 8, 1024, s.latIters)
		if err != nil {
			med.Err, p99.Err = err.Error(), err.Error()
		} else {
			med.Value, p99.Value = r.Typical, r.P99
			med.Note = fmt.Sprintf("min %.2f, avg %.2f", r.Min, r.Avg)
		}
		s.report(med)
		s.report(p99)
	}
}

func (s *suite) msgRate(ctx context.Context, p *netnstest.Pair) {
	fmt.Printf("== softnic message rate, 64-byte writes, 128 outstanding, IB MTU 1024, %d-byte veth\n", p.MTU)
	f := &Figure{Key: "softnic/msgrate", Group: groupSoftnic, Unit: unitMpps,
		Name: "write_bw 64 B message rate, 128 outstanding", Ceiling: "ceiling/small"}
	r, note, err := s.bandwidth(ctx, p, "write_bw", 64, 1024, 1, "-t", "128")
	if err != nil {
		f.Err = err.Error()
	} else {
		f.Value, f.Note = r.MsgRate, note
	}
	s.report(f)
}

func (s *suite) qpMem(n int, profileDir string) {
	fmt.Printf("== softnic memory per idle QP (%d connected pairs, in-process)\n", n)
	f := &Figure{Key: "softnic/qpmem", Group: groupSoftnic, Unit: unitKiB, LowerIsBetter: true,
		Name: fmt.Sprintf("memory per idle connected QP (SQ %d, RQ 1)", s.memSQ)}
	prof := ""
	if profileDir != "" {
		prof = filepath.Join(profileDir, "heap-idle-qps.pprof")
	}
	r, err := qpMemory(n, s.memSQ, prof)
	if err != nil {
		f.Err = err.Error()
	} else {
		f.Value = r.BytesPerQP / 1024
		f.Note = fmt.Sprintf("heap %.0f B + stacks %.0f B per QP, %.2f goroutines per QP, %d QPs", r.HeapPerQP, r.StackPerQP, r.GoroutinesPerQP, r.QPs)
	}
	s.report(f)
}
