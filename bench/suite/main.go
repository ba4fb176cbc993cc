package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/test/interop/rxeguest"
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
	queues            int // RX and TX queues of each veth end
	res               Results
	started           time.Time
	env               runEnv
	look              look // the table's and chart's words; zero: make bench's
	// runDir is the tools' $SOFTNIC_RUN_DIR: the daemon part's daemons put
	// their sockets there, and no daemon of the host's serves the tools.
	runDir string
	// stock has runPerf run Debian's perftest (ib_TEST) through `softnic
	// exec` and the C provider instead of `softnic perf TEST`: the daemon
	// part's third mode sets it for its own series.
	stock bool
}

// options are the command line's settings that are not the suite's own.
type options struct {
	qps, only, echo    string
	profileDir, outDir string
	memQPs             int
	vm                 bool // bench-vm instead
	vmShapes           string
	vmOpts             vmOptions
}

func main() {
	s, o := parseFlags()
	if o.echo != "" {
		if err := udpEcho(o.echo); err != nil {
			fmt.Fprintf(os.Stderr, "suite: udp echo: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if o.vm {
		ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer cancel()
		os.Exit(vmMain(ctx, s, o.vmOpts, o.outDir))
	}
	if o.only == "dcqcn" {
		// A topology of its own and files of its own (dcqcn.go).
		ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer cancel()
		os.Exit(dcqcnMain(ctx, s, o.outDir))
	}
	if err := s.setup(o); err != nil {
		fmt.Fprintln(os.Stderr, "suite:", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	s.started = time.Now().UTC()
	s.env = collectEnv()
	dir, err := os.MkdirTemp("", "softnic-bench-run")
	if err != nil {
		fmt.Fprintln(os.Stderr, "suite:", err)
		os.Exit(2)
	}
	defer os.RemoveAll(dir)
	s.runDir = dir
	fmt.Printf("softnic benchmark suite, %s; %s\n", s.started.Format("2006-01-02 15:04 UTC"), s.env.summary())
	s.run(ctx, parts(o.only), o)
	elapsed := time.Since(s.started).Round(time.Second)
	s.env.loadEnd = loadAverage()

	table := s.markdown(elapsed)
	fmt.Println()
	fmt.Print(table)
	if o.outDir != "" {
		if err := s.write(o.outDir, "latest", table); err != nil {
			fmt.Fprintf(os.Stderr, "suite: %v\n", err)
			os.Exit(1)
		}
	}
}

func parseFlags() (*suite, options) {
	s, o := &suite{}, options{}
	flag.StringVar(&s.softnic, "softnic", "bin/softnic", "softnic binary")
	flag.StringVar(&s.xdpblast, "xdpblast", "bin/xdpblast", "xdpblast binary")
	flag.DurationVar(&s.duration, "duration", 2*time.Second, "target duration of each bandwidth run")
	flag.IntVar(&s.repeat, "repeat", 5, "runs per bandwidth figure; the table shows the median")
	flag.BoolVar(&s.busyPoll, "inproc-busy-poll", false, "in-process part: open the AF_XDP sockets with preferred busy polling (an experiment)")
	flag.DurationVar(&s.perfTimeout, "perf-timeout", 60*time.Second, "limit of one softnic perf run")
	flag.IntVar(&s.maxIters, "max-iters", 200000, "most iterations of a bandwidth run")
	flag.IntVar(&s.latIters, "lat-iters", 2000, "round trips of a latency run")
	flag.StringVar(&o.qps, "qps", "1,16,256,1024", "QP counts of the aggregate write_bw figures")
	flag.IntVar(&s.queues, "queues", runtime.NumCPU(), "RX and TX queues of each veth end, as a NIC has one per CPU: softnic runs one engine per queue")
	flag.IntVar(&o.memQPs, "mem-qps", 1024, "QP pairs created to measure the memory of an idle QP")
	flag.IntVar(&s.memSQ, "mem-sq", 128, "send queue size of the idle QPs (perftest's tx depth)")
	flag.StringVar(&o.only, "only", "", "comma-separated parts to run (ceiling,tcp,udp,xdplat,bw9000,bw1500,qps,lat,msgrate,daemon,loaded,capture,middleware,rsockets,qpmem,allocs); default all; dcqcn alone runs the congestion control benchmark (dcqcn.md)")
	flag.StringVar(&o.profileDir, "profile-dir", filepath.Join(os.TempDir(), "softnic-bench-profiles"),
		"where the in-process runs write CPU profiles of write_bw (64 KiB, 64 B, 1024 QPs, IB MTU 1024) and write_lat, and a heap profile of idle QPs (empty: none)")
	flag.StringVar(&o.outDir, "out", "bench/results", "directory for latest.md and latest.png (empty: none)")
	flag.StringVar(&o.echo, "udp-echo", "", "internal: be the echo server of the UDP ping-pong at ADDR:PORT")
	flag.StringVar(&dcqcnExtra, "dcqcn-flags", "", "-only dcqcn: more DCQCN settings per case, separated by \";\", whose senders have these flags too (e.g. other DCQCN parameters)")
	flag.StringVar(&dcqcnCases, "dcqcn-cases", dcqcnCases, "-only dcqcn: cases to run: even (two identical senders, with DCQCN and without), shallow (the same on a 512 KB queue, which their windows overflow), dcqcn (even, only with), extra (only the -dcqcn-flags setting), mtu (sender 1 at IB MTU 1024, with and without)")
	flag.StringVar(&dcqcnDaemonFlags, "dcqcn-daemon-flags", "", "-only dcqcn: flags of the receiver's softnic daemon (the notification point), e.g. --cnp-interval=50us")
	flag.StringVar(&dcqcnQueue, "dcqcn-queue", dcqcnQueue, "-only dcqcn: the bottleneck's buffer, as tc's tbf limit (1mb: 8 ms at 1 Gb/s)")
	flag.Float64Var(&dcqcnDrain, "dcqcn-drain", dcqcnDrain, "-only dcqcn: the marker's phantom queue drains at this fraction of the bottleneck")
	flag.StringVar(&dcqcnMTUCNPInterval, "dcqcn-mtu-cnp-interval", "", "-only dcqcn: the mtu case also runs its -dcqcn-flags setting with the receiver's daemon at this --cnp-interval (e.g. 50us)")
	flag.IntVar(&dcqcnHog, "dcqcn-hog", 0, "-only dcqcn: CPU-bound processes to run alongside (a busy host)")
	vmFlags(&o)
	flag.Parse()
	if o.vm {
		shapes, err := parseVMConfigs(o.vmShapes)
		if err != nil {
			fmt.Fprintln(os.Stderr, "suite:", err)
			os.Exit(2)
		}
		o.vmOpts.configs = shapes
		if f := strings.TrimSpace(o.vmOpts.softnicFlags); f != "" {
			o.vmOpts.softnicFlags = " " + f
		}
	}
	return s, o
}

// vmFlags defines bench-vm's flags (-vm); TCG runs guests about 50 times
// slower than the host, so the iteration counts are small.
func vmFlags(o *options) {
	v := &o.vmOpts
	flag.BoolVar(&o.vm, "vm", false, "bench-vm: softnic against rdma_rxe in two qemu guests (writes vm.md and vm.png under -out; -softnic must be a static build)")
	flag.StringVar(&o.vmShapes, "vm-shapes", "1:1,1:2,2:1,2:4", "bench-vm: guest shapes, vCPUs:virtio-net queue pairs, comma-separated")
	flag.IntVar(&v.rounds, "vm-rounds", 3, "bench-vm: runs per figure (the median counts)")
	flag.IntVar(&v.bwIters, "vm-bw-iters", 800, "bench-vm: iterations of write_bw 64 KiB")
	flag.IntVar(&v.latIters, "vm-lat-iters", 1000, "bench-vm: iterations of write_lat 8 B")
	flag.IntVar(&v.rateIters, "vm-rate-iters", 8000, "bench-vm: iterations of write_bw 64 B")
	flag.DurationVar(&v.runTimeout, "vm-run-timeout", 90*time.Second, "bench-vm: limit of one tool run in a guest")
	flag.IntVar(&v.memMiB, "vm-mem", 1024, "bench-vm: MiB of RAM per guest")
	flag.StringVar(&v.cache, "vm-cache", rxeguest.DefaultCacheDir(), "bench-vm: guest image cache directory")
	flag.StringVar(&v.softnicFlags, "vm-softnic-flags", "--softnic-stats", "bench-vm: options added to softnic's runs (--softnic-stats: the counters the table sums)")
	flag.StringVar(&v.softnicEnv, "vm-softnic-env", "", "bench-vm: environment of softnic's runs, NAME=value separated by spaces (e.g. GOMAXPROCS=1)")
	flag.StringVar(&v.kernelArgs, "vm-kernel-args", "", "bench-vm: added to both guests' kernel command line (e.g. tsc=reliable: TCG guests of several vCPUs otherwise mark the TSC unstable and read the HPET)")
	flag.StringVar(&v.queuesHelper, "vm-queues-helper", "bin/vmqueues", "bench-vm: static build of bench/vmqueues, which puts all of eth0's queue pairs in use in the guests")
	flag.StringVar(&v.logDir, "vm-log-dir", filepath.Join(os.TempDir(), "softnic-bench-vm"), "bench-vm: where the guests' whole output and consoles go (empty: nowhere)")
}

// setup reads the QP counts, checks that the suite can run (root, both
// binaries present; their paths made absolute) and makes the profile
// directory.
func (s *suite) setup(o options) error {
	for _, f := range strings.Split(o.qps, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err != nil || n < 1 {
			return fmt.Errorf("bad QP count %q", f)
		}
		s.qpCounts = append(s.qpCounts, n)
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, veth, XDP and AF_XDP)")
	}
	for _, bin := range []*string{&s.softnic, &s.xdpblast} {
		abs, err := filepath.Abs(*bin)
		if err == nil {
			*bin = abs
		}
		if _, err := os.Stat(*bin); err != nil {
			return fmt.Errorf("%v (run make build, or make bench)", err)
		}
	}
	if o.profileDir != "" {
		return os.MkdirAll(o.profileDir, 0o755)
	}
	return nil
}

// parts turns -only into the test of whether to run a part.
func parts(only string) func(string) bool {
	set := map[string]bool{}
	for _, p := range strings.Split(only, ",") {
		if p = strings.TrimSpace(p); p != "" {
			set[p] = true
		}
	}
	return func(part string) bool { return len(set) == 0 || set[part] }
}

// run measures the parts want names: those on each veth, then the
// in-process ones.
func (s *suite) run(ctx context.Context, want func(string) bool, o options) {
	wantAny := func(parts ...string) bool { return slices.ContainsFunc(parts, want) }
	if wantAny("ceiling", "tcp", "bw9000", "qps") {
		s.withPair(ctx, 9000, s.link9000(ctx, want))
	}
	if wantAny("ceiling", "tcp", "bw1500", "udp", "xdplat", "lat", "msgrate") {
		s.withPair(ctx, 1500, s.link1500(ctx, want))
	}
	if want("daemon") {
		s.withPair(ctx, 9000, func(p *netnstest.Pair) { s.daemonRounds(ctx, p) })
	}
	if want("loaded") {
		s.withPair(ctx, 9000, func(p *netnstest.Pair) { s.loadedRounds(ctx, p) })
	}
	if want("capture") {
		s.withPair(ctx, 9000, func(p *netnstest.Pair) { s.captureRounds(ctx, p) })
	}
	if want("middleware") {
		s.withPair(ctx, 9000, func(p *netnstest.Pair) { s.middlewareRounds(ctx, p) })
	}
	if want("rsockets") {
		s.withPair(ctx, 9000, func(p *netnstest.Pair) { s.rsocketsRounds(ctx, p) })
	}
	if want("allocs") {
		s.allocs(ctx, o.profileDir)
	}
	if want("qpmem") {
		s.qpMem(o.memQPs, o.profileDir)
	}
}

// ceilingRounds measures the AF_XDP ceiling at IB MTU ibMTU, one kernel
// TCP stream and softnic's write_bw (the part named bwPart) on the
// linkMTU-byte veth, in interleaved rounds.
func (s *suite) ceilingRounds(ctx context.Context, p *netnstest.Pair, want func(string) bool, linkMTU, ibMTU int, bwPart string) {
	fmt.Printf("== %d-byte veth: AF_XDP ceiling, kernel TCP and softnic write_bw (IB MTU %d) in %d interleaved rounds\n",
		linkMTU, ibMTU, s.repeat)
	var list []*series
	if want("ceiling") {
		list = append(list, s.ceilingSeries(ctx, fmt.Sprintf("ceiling/%d", ibMTU), ibMTU, linkMTU))
	}
	if want("tcp") {
		list = append(list, s.tcpSeries(ctx, p))
	}
	if want(bwPart) {
		list = append(list, s.bwSeries(ctx, p, "write_bw", ibMTU))
	}
	s.rounds(list...)
}

// link9000 measures on the 9000-byte veth: the ceiling, TCP and write_bw at
// IB MTU 4096 in interleaved rounds, then read_bw, send_bw and the QP
// scaling.
func (s *suite) link9000(ctx context.Context, want func(string) bool) func(*netnstest.Pair) {
	return func(p *netnstest.Pair) {
		s.ceilingRounds(ctx, p, want, 9000, 4096, "bw9000")
		if want("bw9000") {
			s.bandwidths(ctx, p, 4096)
		}
		if want("qps") {
			s.manyQPs(ctx, p)
		}
	}
}

// link1500 measures on the 1500-byte veth: the ceiling, TCP and write_bw at
// IB MTU 1024 in interleaved rounds, UDP ping-pong, the raw AF_XDP
// ping-pong, read_bw, send_bw, the latencies, and the small-frame ceiling with the 64-byte message rate in
// rounds.
func (s *suite) link1500(ctx context.Context, want func(string) bool) func(*netnstest.Pair) {
	return func(p *netnstest.Pair) {
		s.ceilingRounds(ctx, p, want, 1500, 1024, "bw1500")
		if want("udp") {
			s.udp(ctx, p)
		}
		if want("xdplat") {
			s.xdpLat(ctx, p.MTU)
		}
		if want("bw1500") {
			s.bandwidths(ctx, p, 1024)
		}
		if want("lat") {
			s.latencies(ctx, p)
		}
		var list []*series
		if want("ceiling") {
			list = append(list, s.smallCeilingSeries(ctx))
		}
		if want("msgrate") {
			list = append(list, s.msgRateSeries(ctx, p))
		}
		if len(list) > 0 {
			fmt.Printf("== 1500-byte veth: small-frame AF_XDP ceiling and softnic 64 B write message rate in %d interleaved rounds\n", s.repeat)
			s.rounds(list...)
		}
	}
}

// withPair runs fn with two fresh namespaces joined by a veth pair of the
// given MTU, IPv4 only so that GID index 1 is the IPv4 address.
func (s *suite) withPair(ctx context.Context, mtu int, fn func(*netnstest.Pair)) {
	if ctx.Err() != nil {
		return
	}
	p, err := netnstest.New(netnstest.Config{MTU: mtu, Queues: s.queues,
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

// xdpLat measures the latency ceiling: the raw AF_XDP ping-pong of
// write_lat's frame (xdpblast -pingpong, its own namespaces and veth).
func (s *suite) xdpLat(ctx context.Context, mtu int) {
	fmt.Printf("== raw AF_XDP ping-pong, %d-byte frames (an 8 B WRITE), %d-byte veth\n", latWriteFrame, mtu)
	r, err := s.xdpPingPong(ctx, latWriteFrame, mtu, 5000)
	med := &Figure{Key: "ceiling/lat/median", Group: groupCeiling, Unit: unitUsec, LowerIsBetter: true, Kernel: "kernel/udp/median",
		Name: "AF_XDP ping-pong, 8 B WRITE-sized frame, half round trip, median"}
	p99 := &Figure{Key: "ceiling/lat/p99", Group: groupCeiling, Unit: unitUsec, LowerIsBetter: true, Kernel: "kernel/udp/p99",
		Name: "AF_XDP ping-pong, 8 B WRITE-sized frame, half round trip, p99"}
	if err != nil {
		med.Err, p99.Err = err.Error(), err.Error()
	} else {
		med.Value, p99.Value = r.Median, r.P99
		med.Note = fmt.Sprintf("%d round trips of %d-byte frames, %d lost; min %.2f, avg %.2f; both sides poll, sched_yield between empty polls",
			r.Rounds, r.Size, r.Lost, r.Min, r.Avg)
	}
	s.report(med)
	s.report(p99)
}

// ceilingSeries blasts the bulk frames of IB MTU ibMTU on a link of mtu
// bytes. Its value is in RDMA payload bits: what softnic could carry at
// that frame rate with full IB MTU packets.
func (s *suite) ceilingSeries(ctx context.Context, key string, ibMTU, mtu int) *series {
	frame := bulkFrame(ibMTU)
	f := &Figure{Key: key, Group: groupCeiling, Unit: unitGbps, Kernel: fmt.Sprintf("kernel/tcp/%d", mtu),
		Name: fmt.Sprintf("AF_XDP blast, %d-byte frames, %d-byte link", frame, mtu)}
	return &series{fig: f, measure: func() (float64, string, error) {
		r, err := s.blast(ctx, frame, mtu)
		if err != nil {
			return 0, "", err
		}
		return r.FramesPerSecond * float64(ibMTU) * 8 / 1e9,
			fmt.Sprintf("%.0f frames/s, %.2f Gb/s of whole frames; value = frames/s × %d payload bytes", r.FramesPerSecond, r.Gbps, ibMTU), nil
	}}
}

// smallCeilingSeries blasts frames of a 64-byte RDMA WRITE.
func (s *suite) smallCeilingSeries(ctx context.Context) *series {
	f := &Figure{Key: "ceiling/small", Group: groupCeiling, Unit: unitMpps,
		Name: fmt.Sprintf("AF_XDP blast, %d-byte frames (a 64 B WRITE), 1500-byte link", smallWriteFrame)}
	return &series{fig: f, measure: func() (float64, string, error) {
		r, err := s.blast(ctx, smallWriteFrame, 1500)
		if err != nil {
			return 0, "", err
		}
		return r.FramesPerSecond / 1e6, fmt.Sprintf("%.2f Gb/s of whole frames", r.Gbps), nil
	}}
}

func (s *suite) tcpSeries(ctx context.Context, p *netnstest.Pair) *series {
	f := &Figure{Key: fmt.Sprintf("kernel/tcp/%d", p.MTU), Group: groupKernel, Unit: unitGbps,
		Name: fmt.Sprintf("TCP, one stream (iperf3), %d-byte link", p.MTU)}
	return &series{fig: f, measure: func() (float64, string, error) {
		v, err := s.tcpStream(ctx, p)
		return v, "", err
	}}
}

// perfSeries runs `softnic perf test` with qps QPs; the probe that sizes
// it runs before its first round. value picks the figure from the report.
func (s *suite) perfSeries(ctx context.Context, p *netnstest.Pair, f *Figure, test string, size, ibMTU, qps int,
	value func(bwResult) float64, extra ...string) *series {
	iters := 0
	return &series{fig: f, measure: func() (float64, string, error) {
		if iters == 0 {
			n, err := s.bwIters(ctx, p, test, size, ibMTU, qps, extra...)
			if err != nil {
				return 0, "", err
			}
			iters = n
		}
		r, err := s.bwRun(ctx, p, test, size, ibMTU, qps, iters, extra...)
		if err != nil {
			return 0, "", err
		}
		return value(r), fmt.Sprintf("%d messages a run", r.Iters), nil
	}}
}

func gbps(r bwResult) float64    { return r.Avg }
func msgRate(r bwResult) float64 { return r.MsgRate }

// bwSeries measures a 64 KiB bandwidth test at IB MTU ibMTU.
func (s *suite) bwSeries(ctx context.Context, p *netnstest.Pair, test string, ibMTU int) *series {
	f := &Figure{Key: fmt.Sprintf("softnic/%s/%d", test, ibMTU), Group: groupSoftnic, Unit: unitGbps,
		Name:    fmt.Sprintf("%s 64 KiB, IB MTU %d, %d-byte link", test, ibMTU, p.MTU),
		Ceiling: fmt.Sprintf("ceiling/%d", ibMTU), Kernel: fmt.Sprintf("kernel/tcp/%d", p.MTU)}
	return s.perfSeries(ctx, p, f, test, 64<<10, ibMTU, 1, gbps)
}

func (s *suite) msgRateSeries(ctx context.Context, p *netnstest.Pair) *series {
	f := &Figure{Key: "softnic/msgrate", Group: groupSoftnic, Unit: unitMpps,
		Name: "write_bw 64 B message rate, 128 outstanding", Ceiling: "ceiling/small"}
	return s.perfSeries(ctx, p, f, "write_bw", 64, 1024, 1, msgRate, "-t", "128")
}

// bandwidths measures read_bw and send_bw of 64 KiB messages at the IB MTU
// (write_bw runs in rounds with the ceiling and TCP).
func (s *suite) bandwidths(ctx context.Context, p *netnstest.Pair, ibMTU int) {
	fmt.Printf("== softnic read_bw and send_bw, 64 KiB messages, IB MTU %d, %d-byte veth\n", ibMTU, p.MTU)
	for _, test := range []string{"read_bw", "send_bw"} {
		f := &Figure{Key: fmt.Sprintf("softnic/%s/%d", test, ibMTU), Group: groupSoftnic, Unit: unitGbps,
			Name:    fmt.Sprintf("%s 64 KiB, IB MTU %d, %d-byte link", test, ibMTU, p.MTU),
			Ceiling: fmt.Sprintf("ceiling/%d", ibMTU), Kernel: fmt.Sprintf("kernel/tcp/%d", p.MTU)}
		r, note, err := s.bandwidth(ctx, p, test, 64<<10, ibMTU, 1)
		if err != nil {
			f.Err = err.Error()
		} else {
			f.Value, f.Note = r.Avg, note
		}
		s.report(f)
	}
}

// manyQPs measures the aggregate write_bw over many QPs, the QP counts in
// interleaved rounds.
func (s *suite) manyQPs(ctx context.Context, p *netnstest.Pair) {
	fmt.Printf("== softnic write_bw over many QPs, 64 KiB, IB MTU 4096, 9000-byte veth, in %d interleaved rounds\n", s.repeat)
	var list []*series
	for _, n := range s.qpCounts {
		f := &Figure{Key: fmt.Sprintf("softnic/qps/%d", n), Group: groupSoftnic, Unit: unitGbps,
			Name: fmt.Sprintf("write_bw 64 KiB over %d QPs (aggregate)", n), Ceiling: "ceiling/4096", Kernel: "kernel/tcp/9000"}
		list = append(list, s.perfSeries(ctx, p, f, "write_bw", 64<<10, 4096, n, gbps))
	}
	s.rounds(list...)
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
		if test != "read_lat" { // a whole READ is a round trip: no half to compare
			med.Ceiling, p99.Ceiling = "ceiling/lat/median", "ceiling/lat/p99"
		}
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
