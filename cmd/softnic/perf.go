package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/softnic/softnic/tools/oob"
	"github.com/softnic/softnic/tools/perftest"
)

func init() {
	register("perf", "perftest-compatible RDMA tests (write_bw, read_bw, send_bw, atomic_bw, *_lat)", runPerf)
}

const perfUsage = `usage: softnic perf TEST [flags] [host]

TEST is write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat or
send_lat (an "ib_" prefix is accepted). Without a host softnic is the
server; with one it connects to the server there. Either side may be
perftest 4.5's ib_* program, also in its rdma_cm mode (-R). -d names the
network interface softnic runs on (its RDMA device; with -R, by default the
interface that routes to the host); -x picks the GID index in that
interface's GID table.

flags:
`

// perfFlags are softnic perf's flags: perftest's, under their short and
// long names, and softnic's own.
type perfFlags struct {
	p                            perftest.Params // defaults of the test
	ifname, atomic, conn, output string
	ibPort, mtu, gidIndex, qps   int
	tclass, duration, margin     int
	txDepth, rxDepth, cqMod      int
	inline, qpTimeout, engines   int
	retryCount                   int
	size, iters                  uint64
	cpuFreq, rdmaCM, bidir       bool
	useOld, noPeak, runAll       bool
	gbits, server, reportBoth    bool
	ipv6, unsorted, histogram    bool
	stats                        bool
	connectWait                  time.Duration
	trace                        string
	traceEvery                   time.Duration
}

// definePerftest registers the flags perftest 4.5 has.
func (o *perfFlags) definePerftest(f flagSet) {
	p := &o.p
	f.stringVar(&o.ifname, "d", "ib-dev", "", "network interface softnic runs on (required without -R)")
	f.intVar(&o.ibPort, "i", "ib-port", 1, "port of the device (softnic devices have port 1)")
	f.intVar(&p.Port, "p", "port", p.Port, "port of the exchange: TCP, or with -R rdma_cm's")
	o.size = p.Size
	f.Var((*sizeFlag)(&o.size), "s", "message size (K and M suffixes allowed)")
	f.Var((*sizeFlag)(&o.size), "size", "same as -s")
	f.uint64Var(&o.iters, "n", "iters", p.Iters, "number of exchanges (at least 5)")
	f.boolVar(&o.runAll, "a", "all", "run sizes from 2 to 2^23")
	f.intVar(&o.mtu, "m", "mtu", 0, "path MTU (256..4096; default the port's active MTU)")
	f.intVar(&o.gidIndex, "x", "gid-index", -1, "GID index (default: the first IPv4 GID, as perftest picks)")
	f.intVar(&o.qps, "q", "qp", 1, "number of QPs (bandwidth tests)")
	f.intVar(&o.txDepth, "t", "tx-depth", 0, "size of the send queue (perftest's default: 128, latency tests 1)")
	f.intVar(&o.rxDepth, "r", "rx-depth", 0, "receives posted at a time (send tests; perftest's default: 512)")
	f.intVar(&o.cqMod, "Q", "cq-mod", 0, "generate a completion every N sends (perftest's default: 100)")
	f.intVar(&o.inline, "I", "inline_size", -1, "max size of inline sends (-1: perftest's default, 220 for write_lat, 236 for send_lat, else 0)")
	f.intVar(&p.OutReads, "o", "outs", p.OutReads, "outstanding reads/atomics (read and atomic tests)")
	f.stringVar(&o.atomic, "A", "atomic_type", "FETCH_AND_ADD", "atomic operation: FETCH_AND_ADD or CMP_AND_SWAP")
	f.stringVar(&o.conn, "c", "connection", "RC", "connection type (softnic: RC only)")
	f.boolVar(&o.cpuFreq, "F", "CPU-freq", "do not fail on CPU frequency warnings (softnic times with the monotonic clock)")
	f.boolVar(&o.noPeak, "N", "noPeak", "do not compute the peak bandwidth")
	f.boolVar(&o.rdmaCM, "R", "rdma_cm", "connect QPs with rdma_cm and run the test on them; the exchange goes over an rdma_cm QP too (-p: its port)")
	o.retryCount = int(p.RetryCount)
	f.IntVar(&o.retryCount, "retry_count", o.retryCount, "with -R, the retry and RNR retry count of the test QPs (0..7)")
	f.intVar(&o.duration, "D", "duration", 0, "run for this many seconds instead of -n iterations")
	f.intVar(&o.margin, "f", "margin", -1, "with -D, seconds left out of the measurement at each end (default duration/4)")
	f.boolVar(&o.bidir, "b", "bidirectional", "bidirectional test: both sides send (bandwidth tests)")
	f.BoolVar(&o.gbits, "report_gbits", false, "report bandwidth in Gb/sec instead of MB/sec")
	f.BoolVar(&o.useOld, "use_old_post_send", false, "print the ibv_wr* API line as OFF (softnic has one post path)")
	f.IntVar(&o.tclass, "tclass", 0, "GRH traffic class")
	f.BoolVar(&o.reportBoth, "report-both", false, "with -b, also print each side's own figures")
	f.BoolVar(&o.ipv6, "ipv6", false, "without -x, use the first IPv6 GID instead of the first IPv4 one")
	f.boolVar(&o.unsorted, "U", "report-unsorted", "print the latency samples in measured order (latency tests)")
	f.boolVar(&o.histogram, "H", "report-histogram", "print the sorted latency samples (latency tests)")
	f.StringVar(&o.output, "output", "", "print only one figure: bandwidth, message_rate (bw tests) or latency (lat tests)")
	f.intVar(&o.qpTimeout, "u", "qp-timeout", int(p.QPTimeout), "QP retransmit timeout exponent (4.096 us x 2^N)")
	f.BoolVar(&o.server, "server", false, "be the server (the default without a host)")
}

// defineSoftnic registers the flags softnic adds.
func (o *perfFlags) defineSoftnic(f flagSet) {
	f.DurationVar(&o.connectWait, "connect-wait", dialWait, "softnic: how long a client retries while the server is not listening")
	f.IntVar(&o.engines, "softnic-engines", 0, "softnic: engines (goroutines) that run the device's QPs; 0: one per receive queue of the interface, up to the number of CPUs")
	f.BoolVar(&o.stats, "softnic-stats", false, "softnic: after the run, print the engine's counters (retransmissions, timeouts, sequence NAKs...) and the XDP link's ring statistics")
	f.StringVar(&o.trace, "softnic-trace", "", "softnic: while the test runs, write the congestion and loss counters and each QP's DCQCN rate to this file every --softnic-trace-every")
	f.DurationVar(&o.traceEvery, "softnic-trace-every", 100*time.Millisecond, "softnic: interval of --softnic-trace")
	f.BoolVar(&keepIRQs, "softnic-keep-irqs", false, keepIRQsUsage)
	defineBindMode(f.FlagSet, "softnic-xdp-bind")
	congestion.define(f.FlagSet, "softnic-")
	capture.define(f.FlagSet)
}

// check refuses what softnic perf cannot run, in perftest's order.
func (o *perfFlags) check(pos []string) error {
	switch {
	case len(pos) > 1:
		return fmt.Errorf("one host at most, got %q", pos)
	case o.ifname == "" && !o.rdmaCM:
		return errors.New("-d INTERFACE is required (with -R softnic can find it by route)")
	case o.ibPort != 1:
		return fmt.Errorf("softnic devices have one port (1), not %d", o.ibPort)
	case o.conn != "RC":
		return fmt.Errorf("connection type %q not supported: softnic speaks RC", o.conn)
	case o.retryCount < 0 || o.retryCount > 7:
		return fmt.Errorf("--retry_count %d out of range 0..7", o.retryCount)
	case o.duration < 0:
		return fmt.Errorf("duration %d must be positive", o.duration)
	case o.trace != "" && o.traceEvery <= 0:
		return fmt.Errorf("--softnic-trace-every %v must be positive", o.traceEvery)
	case o.tclass < 0 || o.tclass > 255:
		return fmt.Errorf("--tclass %d out of range", o.tclass)
	case o.qpTimeout < 0 || o.qpTimeout > 31:
		return fmt.Errorf("QP timeout %d out of range 0..31", o.qpTimeout)
	}
	return capture.check()
}

// params turns the flags into the run's parameters.
func (o *perfFlags) params(pos []string) (perftest.Params, error) {
	p := o.p
	p.QPTimeout = uint8(o.qpTimeout)
	p.RDMACM, p.RetryCount = o.rdmaCM, uint8(o.retryCount)
	var err error
	if o.output != "" {
		if p.Output, err = perftest.ParseOutput(o.output); err != nil {
			return p, err
		}
	}
	switch o.atomic {
	case "FETCH_AND_ADD":
		p.Atomic = perftest.FetchAndAdd
	case "CMP_AND_SWAP":
		p.Atomic = perftest.CmpAndSwap
	default:
		return p, fmt.Errorf("unknown atomic type %q", o.atomic)
	}
	p.Server = len(pos) == 0 || o.server
	p.Size, p.Iters, p.RunAll, p.MTU, p.GIDIndex = o.size, o.iters, o.runAll, o.mtu, o.gidIndex
	p.NumQPs, p.ReportGbits, p.NoPeak, p.UseOldPostSend = o.qps, o.gbits, o.noPeak, o.useOld
	p.TrafficClass = uint8(o.tclass)
	p.ReportUnsorted, p.ReportHistogram = o.unsorted, o.histogram
	p.Duplex = o.bidir
	p.Duration = time.Duration(o.duration) * time.Second
	if o.margin >= 0 {
		p.Margin = time.Duration(o.margin) * time.Second
	}
	p.IPv6, p.ReportBoth = o.ipv6, o.reportBoth
	return p, o.depths(&p)
}

// depths applies -t, -r, -Q and -I where given, then perftest's rules.
func (o *perfFlags) depths(p *perftest.Params) error {
	if o.txDepth < 0 || o.rxDepth < 0 || o.cqMod < 0 {
		return errors.New("-t, -r and -Q must be positive")
	}
	if o.txDepth > 0 {
		p.TxDepth = o.txDepth
	}
	if o.rxDepth > 0 {
		p.RxDepth = o.rxDepth
	}
	if o.cqMod > 0 {
		p.CQMod, p.ReqCQMod = o.cqMod, true
	}
	if o.inline >= 0 {
		p.InlineSize = o.inline
	}
	return p.Finish()
}

func runPerf(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		// The flags are the same for every test: show write_bw's.
		return runPerf([]string{"write_bw", "-h"}, stdout, stderr)
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(stderr, perfUsage)
		fmt.Fprintln(stderr, "  (run 'softnic perf -h' for the flags)")
		return 2
	}
	test, err := oob.ParseTest(args[0])
	if err != nil && wantsHelp(args) {
		return runPerf([]string{"-h"}, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "softnic perf: %v\n", err)
		fmt.Fprintln(stderr, "  (run 'softnic perf -h' for the flags)")
		return 2
	}
	fs := flag.NewFlagSet("perf "+test.String(), flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := perfFlags{p: perftest.NewParams(test)}
	o.definePerftest(flagSet{fs})
	o.defineSoftnic(flagSet{fs})
	fs.Usage = func() {
		fmt.Fprint(stderr, perfUsage)
		printFlags(stderr, fs)
	}
	pos, status, ok := parseArgs(fs, args[1:], 2)
	if !ok {
		return status
	}
	fail := failer(stderr, "perf")
	if err := o.check(pos); err != nil {
		return fail("%v", err)
	}
	p, err := o.params(pos)
	if err != nil {
		return fail("%v", err)
	}
	host := ""
	if len(pos) > 0 {
		host = pos[0]
	}
	ctx, stop := signalContext()
	defer stop()
	return endStatus(ctx, peerGone(o.run(ctx, p, host, stdout, stderr), p.Server), stderr, "perf")
}

// peerGone rewords the end of the exchange connection in the middle of a
// run (a peer interrupted or killed) as what happened to the user's peer.
func peerGone(err error, server bool) error {
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, syscall.ECONNRESET) {
		return err
	}
	peer := "server"
	if server {
		peer = "client"
	}
	return fmt.Errorf("the %s went away before the test ended (was it interrupted?): %w", peer, err)
}

// run opens the device and runs the test on it until done or ctx ends.
// How the sockets bound goes to stderr, where it cannot split the report
// that scripts parse.
func (o *perfFlags) run(ctx context.Context, p perftest.Params, host string, stdout, stderr io.Writer) error {
	if o.rdmaCM {
		return o.runCM(ctx, p, host, stdout, stderr)
	}
	dev, closeDev, err := openDevice(o.ifname, o.engines)
	if err != nil {
		return err
	}
	defer closeDev()
	printBind(stderr, o.ifname, dev.Verbs)
	p.Device = o.ifname
	// Before waiting for a peer: a GID index that holds no GID fails now.
	if err := perftest.CheckGIDIndex(dev, p.Device, p.GIDIndex); p.GIDIndex >= 0 && err != nil {
		return err
	}
	if o.trace != "" && !dev.Verbs.Remote() {
		tr, err := startPerfTrace(o.trace, o.traceEvery, dev.Verbs)
		if err != nil {
			return err
		}
		defer tr.close()
	}
	conn, err := perftest.Connect(ctx, &p, host, o.connectWait, stdout)
	if err != nil {
		return err
	}
	err = perftest.Run(ctx, dev, conn, p, stdout)
	conn.Close()
	if o.stats {
		// Also after a failed run: the counters tell how it failed.
		printSoftnicStats(stdout, dev.Verbs)
	}
	return err
}
