package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/internal/syncbuf"
)

// The DCQCN benchmark (-only dcqcn, make bench-dcqcn): two senders into one
// receiver through a router namespace whose link to the receiver is a
// 1 Gb/s tbf bottleneck, with an ECN marker in front of it, for
// dcqcnSeconds: with DCQCN (the senders' defaults, and any -dcqcn-flags
// settings) and with the senders' reaction point off (--softnic-rp-off:
// CNPs arrive and are ignored), on the same topology, in -repeat
// interleaved rounds; the "mtu" case does the same with sender 1 at IB
// MTU 1024 (dcqcnSettings). Each run is checked against the issue's
// marks (dcqcnreport.go) and its 1 s windows, with the senders'
// --softnic-trace, explain its misses (dcqcntrace.go).
//
//	s1 (10.61.1.2) ─┐
//	                 router ── tbf 1 Gb/s + marker ── d0 (10.61.3.2, softnic daemon)
//	s2 (10.61.2.2) ─┘
//
// The marker is phantom/phantom.c, a tc BPF program on the bottleneck's
// egress: a phantom queue drained at 97 % of the bottleneck
// (-dcqcn-drain) marks CE while it holds more than 30 KB (HULL); like a
// real queue it holds at most 1 MiB. DCQCN's sawtooth runs a few percent
// under the drain, so HULL's 95 % left utilisation on the 0.9
// mark; 97 % leaves a margin and keeps the real queue as short.
// The first try, nftables `limit rate over ... ip ecn set
// ce` (marking the packets beyond a token bucket at 95 %), marked only
// the excess packets, too few and too late: the real queue stayed full
// and dropped under both settings (bench/results/dcqcn.md).
//
// Each sender is `softnic perf write_bw` (64 KiB WRITEs, IB MTU 4096, its
// own device on its own veth); the receiver's two servers share the
// daemon's device. Every 100 ms the suite reads each receiving QP's
// counters from the daemon (what crossed the bottleneck per sender) and
// the tbf's drops and backlog (the queueing delay at 1 Gb/s).

const (
	dcqcnSeconds    = 20
	dcqcnBottleneck = 1e9 // bits/s
	dcqcnSample     = 100 * time.Millisecond
	// dcqcnSkip is the start left out of utilisation and fairness: the
	// flows start at the line rate.
	dcqcnSkip = 2 * time.Second
	// frameOverhead is what a frame carries besides the IB packet the
	// QP counters count (Ethernet, IPv4, UDP, ICRC), as the tbf counts it.
	frameOverhead = 14 + 20 + 8 + 4
)

//go:embed phantom/phantom.c
var phantomSource []byte

// dcqcnTopo is the four namespaces, the receiver's daemon and the
// marker.
type dcqcnTopo struct {
	prefix  string // of the namespaces' names
	dir     string // scratch: marker object, the daemon's run directory
	runDir  string
	empty   string // a run directory without daemons: the senders open their own devices
	softnic string
	daemon  *exec.Cmd
	dlog    bytes.Buffer
	// daemonExtra are the receiver's flags of the current setting, queue
	// the bottleneck's buffer.
	daemonExtra []string
	queue       string
	runs        int // runs so far: names the senders' trace files
}

func (t *dcqcnTopo) ns(name string) string { return t.prefix + name }

// sh runs a command in namespace ns ("" for the host's).
func (t *dcqcnTopo) sh(ctx context.Context, ns string, args ...string) (string, error) {
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", t.ns(ns)}, args...)
	}
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// newDCQCNTopo builds the topology, the marker and the bottleneck, and
// starts the receiver's daemon.
func newDCQCNTopo(ctx context.Context, softnic string) (t *dcqcnTopo, err error) {
	t = &dcqcnTopo{prefix: fmt.Sprintf("sdc%d", os.Getpid()), softnic: softnic}
	if t.dir, err = os.MkdirTemp("", "softnic-dcqcn"); err != nil {
		return nil, err
	}
	t.runDir, t.empty = filepath.Join(t.dir, "run"), filepath.Join(t.dir, "empty")
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	for _, d := range []string{t.runDir, t.empty} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	marker, err := t.buildMarker(ctx)
	if err != nil {
		return nil, err
	}
	steps := [][]string{}
	for _, n := range []string{"s1", "s2", "r", "d"} {
		steps = append(steps, []string{"", "ip", "netns", "add", t.ns(n)}, []string{n, "ip", "link", "set", "lo", "up"})
	}
	for _, l := range [][2]string{{"s1", "r1"}, {"s2", "r2"}, {"d0", "r3"}} {
		host := strings.TrimSuffix(l[0], "0")
		steps = append(steps, []string{"", "ip", "link", "add", l[0], "netns", t.ns(host), "type", "veth", "peer", "name", l[1], "netns", t.ns("r")})
	}
	for _, a := range [][3]string{{"s1", "s1", "10.61.1.2/24"}, {"s2", "s2", "10.61.2.2/24"}, {"d", "d0", "10.61.3.2/24"},
		{"r", "r1", "10.61.1.1/24"}, {"r", "r2", "10.61.2.1/24"}, {"r", "r3", "10.61.3.1/24"}} {
		steps = append(steps, []string{a[0], "ip", "link", "set", a[1], "mtu", "9000", "up"}, []string{a[0], "ip", "addr", "add", a[2], "dev", a[1]})
	}
	steps = append(steps,
		[]string{"s1", "ip", "route", "add", "default", "via", "10.61.1.1"},
		[]string{"s2", "ip", "route", "add", "default", "via", "10.61.2.1"},
		[]string{"d", "ip", "route", "add", "default", "via", "10.61.3.1"},
		[]string{"r", "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		append([]string{"r", "tc", "qdisc", "add"}, bottleneck(dcqcnQueue)...),
		[]string{"r", "tc", "qdisc", "add", "dev", "r3", "clsact"},
		[]string{"r", "tc", "filter", "add", "dev", "r3", "egress", "bpf", "direct-action", "obj", marker, "sec", "tc"},
	)
	for _, st := range steps {
		if _, err := t.sh(ctx, st[0], st[1:]...); err != nil {
			return nil, err
		}
	}
	t.queue = dcqcnQueue
	return t, t.startDaemon(ctx)
}

// buildMarker compiles phantom.c with clang into the scratch directory.
func (t *dcqcnTopo) buildMarker(ctx context.Context) (string, error) {
	src, obj := filepath.Join(t.dir, "phantom.c"), filepath.Join(t.dir, "phantom.o")
	if err := os.WriteFile(src, phantomSource, 0o644); err != nil {
		return "", err
	}
	drain := strconv.Itoa(int(dcqcnDrain * dcqcnBottleneck / 8))
	_, err := t.sh(ctx, "", "clang", "-O2", "-g", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu",
		"-DDRAIN_BYTES_PER_SEC="+drain+"ULL", "-DMARK_BYTES=30000ULL", "-c", src, "-o", obj)
	if err != nil {
		return "", fmt.Errorf("the marker needs clang and libbpf-dev: %w", err)
	}
	return obj, nil
}

// bottleneck is the router's qdisc on the link to the receiver, after
// tc qdisc add or change: 1 Gb/s, a 64 KB bucket (several jumbo frames),
// and a switch port's queue of limit bytes (-dcqcn-queue, or the shallow
// case's).
func bottleneck(limit string) []string {
	return []string{"dev", "r3", "root", "tbf", "rate", "1gbit", "burst", "64kb", "limit", limit}
}

// useQueue sets the bottleneck's buffer (its tbf limit), unless it has
// it already.
func (t *dcqcnTopo) useQueue(ctx context.Context, limit string) error {
	if limit == t.queue {
		return nil
	}
	if _, err := t.sh(ctx, "r", append([]string{"tc", "qdisc", "change"}, bottleneck(limit)...)...); err != nil {
		return err
	}
	t.queue = limit
	return nil
}

// useDaemon restarts the receiver's daemon with extra after
// -dcqcn-daemon-flags, unless it already runs with them.
func (t *dcqcnTopo) useDaemon(ctx context.Context, extra []string) error {
	if slices.Equal(extra, t.daemonExtra) {
		return nil
	}
	t.stopDaemon()
	t.daemonExtra = extra
	return t.startDaemon(ctx)
}

// startDaemon starts the receiver's daemon and waits for its socket.
func (t *dcqcnTopo) startDaemon(ctx context.Context) error {
	args := append([]string{"netns", "exec", t.ns("d"), t.softnic, "daemon", "-d", "d0", "--run-dir", t.runDir}, strings.Fields(dcqcnDaemonFlags)...)
	args = append(args, t.daemonExtra...)
	t.daemon = exec.Command("ip", args...)
	t.daemon.Stdout, t.daemon.Stderr = &t.dlog, &t.dlog
	if err := t.daemon.Start(); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(t.socket()); err == nil {
			return nil
		}
	}
	return fmt.Errorf("the receiver's daemon did not start: %s", t.dlog.String())
}

func (t *dcqcnTopo) socket() string { return filepath.Join(t.runDir, "softnic_d0.sock") }

// stopDaemon stops the receiver's daemon, which removes its socket.
func (t *dcqcnTopo) stopDaemon() {
	if t.daemon == nil || t.daemon.Process == nil {
		return
	}
	t.daemon.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { t.daemon.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.daemon.Process.Kill()
		<-done
	}
	t.daemon = nil
	os.Remove(t.socket())
}

// close stops the daemon and deletes the namespaces and the scratch files.
func (t *dcqcnTopo) close() {
	t.stopDaemon()
	for _, n := range []string{"s1", "s2", "r", "d"} {
		exec.Command("ip", "netns", "del", t.ns(n)).Run()
	}
	os.RemoveAll(t.dir)
}

// dcqcnSampleAt is one reading: per sender the bytes and packets the
// receiver's QP took in, and the bottleneck's drops and backlog.
type dcqcnSampleAt struct {
	at      time.Duration
	bytes   [2]uint64
	pkts    [2]uint64
	drops   uint64
	backlog uint64 // bytes
	// tbfSent is the bytes the bottleneck sent: its output rate, which
	// falls under 1 Gb/s when the host's load delays its timer.
	tbfSent uint64
	// Losses the receiver saw, per sender: packets ahead of the expected
	// PSN (one per gap, then NAKed) and retransmitted ones it already had.
	outOfSeq, dup [2]uint64
	// rxDrops are frames the receiver's AF_XDP rings dropped (ring full,
	// no fill buffer): a loss that is not the bottleneck's.
	rxDrops uint64
}

// dcqcnRun is one setting's run.
type dcqcnRun struct {
	name    string
	flags   [2][]string // each sender's extra flags
	samples []dcqcnSampleAt
	client  [2]string // the senders' output
	// trace is each sender's --softnic-trace, timed like samples.
	trace [2][]senderPoint
	// From the receiver's daemon, over the run.
	marked, cnpSent uint64
	// dropsBefore is the bottleneck's drop count before the run.
	dropsBefore uint64
	round       int    // of the benchmark's rounds, from 1
	load        string // load average after the run
}

var qpnLine = regexp.MustCompile(`local address: LID \S+ QPN (0x[0-9a-f]+)`)

// run runs the two senders with the senders' extra flags and samples
// until they are done.
func (t *dcqcnTopo) run(ctx context.Context, name string, flags [2][]string) (*dcqcnRun, error) {
	r := &dcqcnRun{name: name, flags: flags}
	t.runs++
	var traces [2]string
	mon, err := session.DialMonitor(t.socket())
	if err != nil {
		return nil, err
	}
	defer mon.Close()
	before, err := mon.DeviceCounters()
	if err != nil {
		return nil, err
	}
	tbf, err := t.tbfState(ctx)
	if err != nil {
		return nil, err
	}
	r.dropsBefore = tbf.drops
	ctx, cancel := context.WithTimeout(ctx, (dcqcnSeconds+60)*time.Second)
	defer cancel()
	dur := strconv.Itoa(dcqcnSeconds)
	var servers, clients [2]*exec.Cmd
	var sout, cout [2]syncbuf.Buffer
	for i := range 2 {
		port := strconv.Itoa(18700 + i)
		servers[i] = exec.CommandContext(ctx, "ip", "netns", "exec", t.ns("d"), t.softnic, "perf", "write_bw",
			"-d", "d0", "-s", "65536", "-D", dur, "-p", port, "--report_gbits")
		servers[i].Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+t.runDir)
		servers[i].Stdout, servers[i].Stderr = &sout[i], &sout[i]
		if err := servers[i].Start(); err != nil {
			return nil, err
		}
		defer servers[i].Wait()
	}
	for i := range 2 {
		args := []string{"netns", "exec", t.ns(fmt.Sprintf("s%d", i+1)), t.softnic, "perf", "write_bw", "-d", fmt.Sprintf("s%d", i+1),
			"-s", "65536", "-D", dur, "-p", strconv.Itoa(18700 + i), "--report_gbits", "--softnic-stats", "-connect-wait", "10s"}
		traces[i] = filepath.Join(t.dir, fmt.Sprintf("trace-%d-%d", t.runs, i+1))
		args = append(args, "--softnic-trace", traces[i])
		args = append(append(args, flags[i]...), "10.61.3.2")
		clients[i] = exec.CommandContext(ctx, "ip", args...)
		clients[i].Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+t.empty)
		clients[i].Stdout, clients[i].Stderr = &cout[i], &cout[i]
		if err := clients[i].Start(); err != nil {
			return nil, err
		}
	}
	done := make(chan error, 2)
	for i := range 2 {
		go func() { done <- clients[i].Wait() }()
	}
	qpns, err := waitQPNs(ctx, &sout)
	if err != nil {
		cancel()
		return nil, err
	}
	start := time.Now()
	finished := 0
	var cerr error
	sampling := true
	for tick := time.NewTicker(dcqcnSample); finished < 2; {
		select {
		case err := <-done:
			finished++
			cerr = errors.Join(cerr, err)
			continue
		case <-tick.C:
		}
		if !sampling {
			continue
		}
		s, err := t.sample(ctx, mon, qpns, start)
		var ce *session.Error
		switch {
		case errors.As(err, &ce) && ce.Errno == unix.ENOENT && len(r.samples) == 0:
			continue // the server printed its QPN a moment before the QP was listed
		case errors.As(err, &ce) && ce.Errno == unix.ENOENT:
			sampling = false // a server finished and destroyed its QP: the run is over
			continue
		case err != nil:
			return nil, fmt.Errorf("%w; server outputs: %s / %s", err, lastLine(sout[0].String()), lastLine(sout[1].String()))
		}
		r.samples = append(r.samples, s)
	}
	for i := range 2 {
		r.client[i] = cout[i].String()
		r.trace[i] = readSenderTrace(traces[i], start)
	}
	if cerr != nil {
		return r, fmt.Errorf("a sender failed: %v: %s / %s", cerr, lastLine(r.client[0]), lastLine(r.client[1]))
	}
	after, err := mon.DeviceCounters()
	if err != nil {
		return nil, err
	}
	r.marked = counterOf(after, "np_ecn_marked_roce_packets") - counterOf(before, "np_ecn_marked_roce_packets")
	r.cnpSent = counterOf(after, "np_cnp_sent") - counterOf(before, "np_cnp_sent")
	return r, nil
}

// waitQPNs reads the receiving QPs' numbers from the servers' output.
func waitQPNs(ctx context.Context, sout *[2]syncbuf.Buffer) ([2]uint32, error) {
	var qpns [2]uint32
	for found := 0; found < 2; {
		found = 0
		for i := range 2 {
			m := qpnLine.FindStringSubmatch(sout[i].String())
			if m == nil {
				continue
			}
			n, _ := strconv.ParseUint(m[1], 0, 32)
			qpns[i] = uint32(n)
			found++
		}
		select {
		case <-ctx.Done():
			return qpns, fmt.Errorf("the servers printed no QPN: %s / %s", sout[0].String(), sout[1].String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return qpns, nil
}

// sample reads the receiving QPs' counters, timed since start between
// the two reads (the rates come from them), and the bottleneck's state,
// whose tc command may take long on a loaded machine.
func (t *dcqcnTopo) sample(ctx context.Context, mon *session.Monitor, qpns [2]uint32, start time.Time) (dcqcnSampleAt, error) {
	var s dcqcnSampleAt
	t0 := time.Since(start)
	for i, qpn := range qpns {
		cs, err := mon.QPCounters(qpn)
		if err != nil {
			return s, fmt.Errorf("QP %#x: %w", qpn, err)
		}
		s.bytes[i], s.pkts[i] = counterOf(cs, "rcvd_bytes"), counterOf(cs, "rcvd_pkts")
		s.outOfSeq[i], s.dup[i] = counterOf(cs, "out_of_seq_request"), counterOf(cs, "duplicate_request")
	}
	s.at = (t0 + time.Since(start)) / 2
	dev, err := mon.DeviceCounters()
	if err != nil {
		return s, err
	}
	s.rxDrops = counterOf(dev, "xsk_rx_dropped") + counterOf(dev, "xsk_rx_ring_full") + counterOf(dev, "xsk_rx_fill_ring_empty_descs")
	tbf, err := t.tbfState(ctx)
	s.drops, s.backlog, s.tbfSent = tbf.drops, tbf.backlog, tbf.sent
	return s, err
}

// tbfCounts is the bottleneck's state: its drop count, backlog and the
// bytes it sent (frames as tc counts them).
type tbfCounts struct {
	drops, backlog, sent uint64
}

// tbfState reads the bottleneck's counters.
func (t *dcqcnTopo) tbfState(ctx context.Context) (tbfCounts, error) {
	out, err := t.sh(ctx, "r", "tc", "-s", "-j", "qdisc", "show", "dev", "r3")
	if err != nil {
		return tbfCounts{}, err
	}
	var qs []struct {
		Kind    string `json:"kind"`
		Bytes   uint64 `json:"bytes"`
		Drops   uint64 `json:"drops"`
		Backlog uint64 `json:"backlog"`
	}
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		return tbfCounts{}, fmt.Errorf("tc -j: %w", err)
	}
	for _, q := range qs {
		if q.Kind == "tbf" {
			return tbfCounts{drops: q.Drops, backlog: q.Backlog, sent: q.Bytes}, nil
		}
	}
	return tbfCounts{}, errors.New("no tbf on the bottleneck")
}

func counterOf(cs []counters.Counter, name string) uint64 {
	for _, c := range cs {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}
