package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"os/signal"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softnic/softnic/bench/perftest"
	"github.com/softnic/softnic/internal/oob"
	"github.com/softnic/softnic/roce/xdplink"
	"github.com/softnic/softnic/verbs"
)

func init() {
	register("perf", "perftest-compatible RDMA tests (write_bw, read_bw, send_bw, atomic_bw, *_lat)", runPerf)
}

// openDevice opens softnic on the interface named ifname: the AF_XDP link
// with softnic's XDP program, and a verbs device whose GID table is the
// interface's addresses (xdplink.GIDTable order), run by engines engines (0:
// one per receive queue, up to the number of CPUs). Tests replace it to
// run over an in-memory link.
var openDevice = func(ifname string, engines int) (perftest.Device, func(), error) {
	nd, err := xdplink.LookupNetdev(ifname)
	if err != nil {
		return perftest.Device{}, nil, err
	}
	link, err := xdplink.Open(ifname, xdplink.Config{Addrs: nd.GIDs})
	if err != nil {
		return perftest.Device{}, nil, fmt.Errorf("open AF_XDP link on %s: %w", ifname, err)
	}
	dev, err := verbs.Open(link, verbs.Config{Addrs: nd.GIDs, Engines: engines})
	if err != nil {
		link.Close()
		return perftest.Device{}, nil, err
	}
	resolve := func(peer netip.Addr) error {
		mac, err := xdplink.ResolveNeighbor(nd.Index, peer, 3*time.Second)
		if err != nil {
			return err
		}
		dev.RoCE().SetNeighbor(peer, mac)
		return nil
	}
	closer := func() { dev.Close(); link.Close() }
	return perftest.Device{Verbs: dev, Name: ifname, LinkMTU: nd.MTU, Resolve: resolve}, closer, nil
}

// dialWait is how long a client retries while the server is not yet
// listening (perftest gives up at once; a short grace helps scripts).
var dialWait = 2 * time.Second

// flagSet registers each option under its short and its long perftest
// name, so both "-s 4096" and "--size=4096" work.
type flagSet struct{ *flag.FlagSet }

func (f flagSet) intVar(p *int, short, long string, v int, usage string) {
	f.IntVar(p, short, v, usage)
	f.IntVar(p, long, v, "same as -"+short)
}

func (f flagSet) uint64Var(p *uint64, short, long string, v uint64, usage string) {
	f.Uint64Var(p, short, v, usage)
	f.Uint64Var(p, long, v, "same as -"+short)
}

func (f flagSet) stringVar(p *string, short, long string, v string, usage string) {
	f.StringVar(p, short, v, usage)
	f.StringVar(p, long, v, "same as -"+short)
}

func (f flagSet) boolVar(p *bool, short, long string, usage string) {
	f.BoolVar(p, short, false, usage)
	f.BoolVar(p, long, false, "same as -"+short)
}

// sizeFlag is perftest's -s: a number (strtol base 0) with an optional K
// or M suffix, between 1 and UINT_MAX/2.
type sizeFlag uint64

func (s *sizeFlag) String() string { return strconv.FormatUint(uint64(*s), 10) }

func (s *sizeFlag) Set(v string) error {
	factor := uint64(1)
	switch {
	case strings.HasSuffix(v, "K"):
		v, factor = strings.TrimSuffix(v, "K"), 1024
	case strings.HasSuffix(v, "M"):
		v, factor = strings.TrimSuffix(v, "M"), 1024*1024
	}
	n, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		return err
	}
	if n < 1 || n > math.MaxUint32/2/factor {
		return fmt.Errorf("message size should be between 1 and %d", uint64(math.MaxUint32/2))
	}
	*s = sizeFlag(n * factor)
	return nil
}

// parseInterleaved parses flags given before and after the positional
// host, as getopt does for the C tools.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

const perfUsage = `usage: softnic perf TEST [flags] [host]

TEST is write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat or
send_lat (an "ib_" prefix is accepted). Without a host softnic is the
server; with one it connects to the server there. Either side may be
perftest 4.5's ib_* program. -d names the network interface softnic runs
on (its RDMA device); -x picks the GID index in that interface's GID table.

flags:
`

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
	if err != nil {
		fmt.Fprintf(stderr, "softnic perf: %v\n", err)
		return 2
	}
	p := perftest.NewParams(test)
	fs := flag.NewFlagSet("perf "+test.String(), flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := flagSet{fs}
	var (
		ibPort    = 1
		atomic    string
		conn      = "RC"
		cpuFreq   bool
		rdmaCM    bool
		duration  int
		bidir     bool
		size      = p.Size
		mtu       int
		outReads  = p.OutReads
		gidIndex  = -1
		useOld    bool
		tclass    int
		txDepth   = 0
		rxDepth   = 0
		cqMod     = 0
		inline    = -1
		noPeak    bool
		ifname    string
		iters     = p.Iters
		runAll    bool
		qps       = 1
		port      = p.Port
		gbits     bool
		serverArg bool
	)
	f.stringVar(&ifname, "d", "ib-dev", "", "network interface softnic runs on (required)")
	f.intVar(&ibPort, "i", "ib-port", 1, "port of the device (softnic devices have port 1)")
	f.intVar(&port, "p", "port", port, "TCP port of the out-of-band exchange")
	fs.Var((*sizeFlag)(&size), "s", "message size (K and M suffixes allowed)")
	fs.Var((*sizeFlag)(&size), "size", "same as -s")
	f.uint64Var(&iters, "n", "iters", iters, "number of exchanges (at least 5)")
	f.boolVar(&runAll, "a", "all", "run sizes from 2 to 2^23")
	f.intVar(&mtu, "m", "mtu", 0, "path MTU (256..4096; default the port's active MTU)")
	f.intVar(&gidIndex, "x", "gid-index", -1, "GID index (default: the first IPv4 GID, as perftest picks)")
	f.intVar(&qps, "q", "qp", 1, "number of QPs (bandwidth tests)")
	f.intVar(&txDepth, "t", "tx-depth", 0, "size of the send queue (perftest's default: 128, latency tests 1)")
	f.intVar(&rxDepth, "r", "rx-depth", 0, "receives posted at a time (send tests; perftest's default: 512)")
	f.intVar(&cqMod, "Q", "cq-mod", 0, "generate a completion every N sends (perftest's default: 100)")
	f.intVar(&inline, "I", "inline_size", -1, "max size of inline sends (-1: perftest's default, 220 for write_lat, 236 for send_lat, else 0)")
	f.intVar(&outReads, "o", "outs", outReads, "outstanding reads/atomics (read and atomic tests)")
	f.stringVar(&atomic, "A", "atomic_type", "FETCH_AND_ADD", "atomic operation: FETCH_AND_ADD or CMP_AND_SWAP")
	f.stringVar(&conn, "c", "connection", "RC", "connection type (softnic: RC only)")
	f.boolVar(&cpuFreq, "F", "CPU-freq", "do not fail on CPU frequency warnings (softnic times with the monotonic clock)")
	f.boolVar(&noPeak, "N", "noPeak", "do not compute the peak bandwidth")
	f.boolVar(&rdmaCM, "R", "rdma_cm", "connect QPs with RDMA CM (not supported)")
	f.intVar(&duration, "D", "duration", 0, "run for this many seconds instead of -n iterations")
	margin := -1
	f.intVar(&margin, "f", "margin", -1, "with -D, seconds left out of the measurement at each end (default duration/4)")
	f.boolVar(&bidir, "b", "bidirectional", "bidirectional test: both sides send (bandwidth tests)")
	f.BoolVar(&gbits, "report_gbits", false, "report bandwidth in Gb/sec instead of MB/sec")
	f.BoolVar(&useOld, "use_old_post_send", false, "print the ibv_wr* API line as OFF (softnic has one post path)")
	f.IntVar(&tclass, "tclass", 0, "GRH traffic class")
	var reportBoth bool
	f.BoolVar(&reportBoth, "report-both", false, "with -b, also print each side's own figures")
	var ipv6 bool
	f.BoolVar(&ipv6, "ipv6", false, "without -x, use the first IPv6 GID instead of the first IPv4 one")
	var unsorted, histogram bool
	f.boolVar(&unsorted, "U", "report-unsorted", "print the latency samples in measured order (latency tests)")
	f.boolVar(&histogram, "H", "report-histogram", "print the sorted latency samples (latency tests)")
	var output string
	f.StringVar(&output, "output", "", "print only one figure: bandwidth, message_rate (bw tests) or latency (lat tests)")
	qpTimeout := int(p.QPTimeout)
	f.intVar(&qpTimeout, "u", "qp-timeout", qpTimeout, "QP retransmit timeout exponent (4.096 us x 2^N)")
	f.BoolVar(&serverArg, "server", false, "be the server (the default without a host)")
	connectWait := dialWait
	f.DurationVar(&connectWait, "connect-wait", dialWait, "softnic: how long a client retries while the server is not listening")
	var softnicStats bool
	var engines int
	f.IntVar(&engines, "softnic-engines", 0, "softnic: engines (goroutines) that run the device's QPs; 0: one per receive queue of the interface, up to the number of CPUs")
	f.BoolVar(&softnicStats, "softnic-stats", false, "softnic: after the run, print the engine's counters (retransmissions, timeouts, sequence NAKs...) and the XDP link's ring statistics")
	fs.Usage = func() {
		fmt.Fprint(stderr, perfUsage)
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "softnic perf: "+format+"\n", a...)
		return 1
	}
	switch {
	case len(pos) > 1:
		return fail("one host at most, got %q", pos)
	case ifname == "":
		return fail("-d INTERFACE is required")
	case ibPort != 1:
		return fail("softnic devices have one port (1), not %d", ibPort)
	case conn != "RC":
		return fail("connection type %q not supported: softnic speaks RC", conn)
	case rdmaCM:
		return fail("-R (RDMA CM) is not supported; use the default Ethernet exchange")
	case duration < 0:
		return fail("duration %d must be positive", duration)
	case tclass < 0 || tclass > 255:
		return fail("--tclass %d out of range", tclass)
	}
	if qpTimeout < 0 || qpTimeout > 31 {
		return fail("QP timeout %d out of range 0..31", qpTimeout)
	}
	p.QPTimeout = uint8(qpTimeout)
	if output != "" {
		if p.Output, err = perftest.ParseOutput(output); err != nil {
			return fail("%v", err)
		}
	}
	switch atomic {
	case "FETCH_AND_ADD":
		p.Atomic = perftest.FetchAndAdd
	case "CMP_AND_SWAP":
		p.Atomic = perftest.CmpAndSwap
	default:
		return fail("unknown atomic type %q", atomic)
	}
	p.Server = len(pos) == 0 || serverArg
	p.Port, p.Size, p.Iters, p.RunAll, p.MTU, p.GIDIndex = port, size, iters, runAll, mtu, gidIndex
	p.NumQPs, p.OutReads, p.ReportGbits, p.NoPeak, p.UseOldPostSend = qps, outReads, gbits, noPeak, useOld
	p.TrafficClass = uint8(tclass)
	p.ReportUnsorted, p.ReportHistogram = unsorted, histogram
	p.Duplex = bidir
	p.Duration = time.Duration(duration) * time.Second
	if margin >= 0 {
		p.Margin = time.Duration(margin) * time.Second
	}
	p.IPv6 = ipv6
	p.ReportBoth = reportBoth
	if txDepth < 0 || rxDepth < 0 || cqMod < 0 {
		return fail("-t, -r and -Q must be positive")
	}
	if txDepth > 0 {
		p.TxDepth = txDepth
	}
	if rxDepth > 0 {
		p.RxDepth = rxDepth
	}
	if cqMod > 0 {
		p.CQMod, p.ReqCQMod = cqMod, true
	}
	if inline >= 0 {
		p.InlineSize = inline
	}
	if err := p.Finish(); err != nil {
		return fail("%v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dev, closeDev, err := openDevice(ifname, engines)
	if err != nil {
		return fail("%v", err)
	}
	defer closeDev()
	p.Device = ifname

	var c interface{ Close() error }
	var runErr error
	if p.Server {
		perftest.PrintWaiting(stdout, &p)
		conn, err := perftest.Accept(ctx, p.Port, nil)
		if err != nil {
			return fail("%v", err)
		}
		c = conn
		runErr = perftest.Run(ctx, dev, conn, p, stdout)
	} else {
		conn, err := perftest.Dial(ctx, pos[0], p.Port, connectWait)
		if err != nil {
			return fail("%v", err)
		}
		c = conn
		runErr = perftest.Run(ctx, dev, conn, p, stdout)
	}
	c.Close()
	if softnicStats {
		// Also after a failed run: the counters tell how it failed.
		printSoftnicStats(stdout, dev.Verbs)
	}
	if runErr != nil {
		return fail("%v", runErr)
	}
	return 0
}

// printSoftnicStats prints, one "name value" line each, the transport
// engine's counters, the RoCE device's frame counters and, on an AF_XDP
// link, the XDP program's and each socket's ring statistics: the losses a
// run met and how the engine recovered, next to its figures.
func printSoftnicStats(w io.Writer, dev *verbs.Device) {
	fmt.Fprintln(w, " softnic engine counters:")
	writeCounters(w, "", reflect.ValueOf(dev.Counters()).Elem())
	fmt.Fprintln(w, " softnic RoCE device counters:")
	fmt.Fprintf(w, "engines %d\n", dev.RoCE().Engines())
	writeCounters(w, "", reflect.ValueOf(dev.RoCE().Counters()).Elem())
	type statser interface {
		Stats() (xdplink.Stats, error)
	}
	if l, ok := dev.RoCE().Link().(statser); ok {
		fmt.Fprintln(w, " softnic XDP link statistics:")
		st, err := l.Stats()
		writeCounters(w, "", reflect.ValueOf(&st).Elem())
		if err != nil {
			fmt.Fprintf(w, " (incomplete: %v)\n", err)
		}
	}
}

var atomicUint64Type = reflect.TypeFor[atomic.Uint64]()

// writeCounters prints every exported integer (or atomic.Uint64) field of
// the struct v, descending into nested structs and slices of them with
// dotted names, so that counters added later show without changes here.
func writeCounters(w io.Writer, prefix string, v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := prefix + f.Name
		if f.Anonymous {
			name = prefix
		}
		writeCounter(w, name, v.Field(i))
	}
}

func writeCounter(w io.Writer, name string, fv reflect.Value) {
	switch {
	case fv.Type() == atomicUint64Type:
		fmt.Fprintf(w, "  %-28s %d\n", name, fv.Addr().Interface().(*atomic.Uint64).Load())
	case fv.CanUint():
		fmt.Fprintf(w, "  %-28s %d\n", name, fv.Uint())
	case fv.CanInt():
		fmt.Fprintf(w, "  %-28s %d\n", name, fv.Int())
	case fv.Kind() == reflect.Struct:
		if name != "" && !strings.HasSuffix(name, ".") {
			name += "."
		}
		writeCounters(w, name, fv)
	case fv.Kind() == reflect.Slice:
		for j := range fv.Len() {
			writeCounter(w, fmt.Sprintf("%s[%d]", name, j), fv.Index(j))
		}
	}
}
