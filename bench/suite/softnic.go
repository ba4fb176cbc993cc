package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/softnic/softnic/internal/netnstest"
)

// perfRun is one `softnic perf` test: a server in namespace A, a client in
// namespace B, both on the pair's veth.
type perfRun struct {
	Test string // write_bw, write_lat, ...
	// Args are the flags of both sides; ifacePlaceholder in one becomes
	// the side's interface name (files of their own, such as --pcap's).
	Args []string
	// ClientArgs are flags of the client's side only.
	ClientArgs []string
}

// ifacePlaceholder stands for a side's interface name in perfRun.Args.
const ifacePlaceholder = "{iface}"

// perfOutput is what both sides printed.
type perfOutput struct {
	Client, Server string
	Elapsed        time.Duration // of the client, connection included
}

// runPerf runs r between the pair's ends and returns both outputs. A side
// that exits with an error fails the run, with the tail of its output.
func (s *suite) runPerf(ctx context.Context, p *netnstest.Pair, r perfRun) (perfOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, s.perfTimeout)
	defer cancel()
	var out perfOutput
	var serverOut, clientOut bytes.Buffer
	env := append(os.Environ(), "SOFTNIC_RUN_DIR="+s.runDir)
	server := exec.CommandContext(ctx, "ip", s.perfArgv(r, &p.A, false)...)
	server.Env = env
	server.Stdout, server.Stderr = &serverOut, &serverOut
	server.WaitDelay = time.Second
	if err := server.Start(); err != nil {
		return out, fmt.Errorf("start server: %w", err)
	}
	clientArgs, err := s.clientArgv(ctx, p, r)
	if err != nil {
		server.Process.Kill()
		server.Wait()
		return out, fmt.Errorf("server: %w: %s", err, lastLine(serverOut.String()))
	}
	client := exec.CommandContext(ctx, "ip", clientArgs...)
	client.Env = env
	client.Stdout, client.Stderr = &clientOut, &clientOut
	client.WaitDelay = time.Second
	start := time.Now()
	cerr := client.Run()
	out.Elapsed = time.Since(start)
	if cerr != nil {
		// The server cannot finish without its client.
		server.Process.Kill()
	}
	serr := server.Wait()
	out.Client, out.Server = clientOut.String(), serverOut.String()
	if ctx.Err() != nil {
		return out, fmt.Errorf("%w after %v: %s", errTimeout, s.perfTimeout, lastLine(out.Client))
	}
	if cerr != nil {
		return out, fmt.Errorf("client: %v: %s", cerr, lastLine(out.Client))
	}
	if serr != nil {
		return out, fmt.Errorf("server: %v: %s", serr, lastLine(out.Server))
	}
	return out, nil
}

// perfArgv is ip's arguments for one side of r: softnic perf, or with
// s.stock Debian's perftest through softnic exec.
func (s *suite) perfArgv(r perfRun, end *netnstest.End, client bool) []string {
	a := []string{"netns", "exec", end.Namespace, s.softnic, "perf", r.Test}
	if s.stock {
		a = []string{"netns", "exec", end.Namespace, s.softnic, "exec", "--run-dir", s.runDir, "-d", end.Ifname,
			"--", "ib_" + r.Test}
	}
	flags := r.Args
	if client {
		flags = append(slices.Clip(flags), r.ClientArgs...)
	}
	for _, arg := range flags {
		a = append(a, strings.ReplaceAll(arg, ifacePlaceholder, end.Ifname))
	}
	if s.stock {
		return a // softnic exec shows the program this one device
	}
	return append(a, "-d", end.Ifname)
}

// clientArgv is perfArgv for r's client, aimed at the server once it can
// take the connection.
func (s *suite) clientArgv(ctx context.Context, p *netnstest.Pair, r perfRun) ([]string, error) {
	a := s.perfArgv(r, &p.B, true)
	if !s.stock {
		return append(a, "-connect-wait", "10s", p.A.Addr4().String()), nil
	}
	// perftest's client does not retry its connection: wait for the
	// server's port instead.
	if err := waitListening(ctx, &p.A, perftestPort(r.Args)); err != nil {
		return nil, err
	}
	return append(a, p.A.Addr4().String()), nil
}

// perftestPort is the TCP port of perftest's exchange: -p's, or its default.
func perftestPort(args []string) string {
	for i, a := range args {
		if a == "-p" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return "18515"
}

// waitListening waits until something listens on TCP port in end's namespace.
func waitListening(ctx context.Context, end *netnstest.End, port string) error {
	for {
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", end.Namespace, "ss", "-Hltn", "sport = :"+port).Output()
		if err == nil && strings.TrimSpace(string(out)) != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nothing listens on port %s: %w", port, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lastLine is the last non-empty line of out: where the tools put their error.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// bwResult is a perftest bandwidth line.
type bwResult struct {
	Size, Iters uint64
	Peak, Avg   float64 // in the report's unit (Gb/s with --report_gbits)
	MsgRate     float64 // Mpps
	Client      string  // the client's output (bwRun)
}

// latResult is a perftest latency line, in microseconds.
type latResult struct {
	Size, Iters                              uint64
	Min, Max, Typical, Avg, Stdev, P99, P999 float64
}

var (
	errNoReport = errors.New("no result line in the output")
	errTimeout  = errors.New("timed out")
)

// reportFields returns the fields of the line after the header containing
// marker.
func reportFields(out, marker string) ([]string, error) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, marker) && i+1 < len(lines) {
			return strings.Fields(lines[i+1]), nil
		}
	}
	return nil, errNoReport
}

// reportValues returns the fields of the result line under marker's
// header and the first n of them as numbers.
func reportValues(out, marker string, n int) ([]string, []float64, error) {
	f, err := reportFields(out, marker)
	if err != nil {
		return nil, nil, err
	}
	v, err := parseFloats(f, n)
	return f, v, err
}

func parseFloats(f []string, n int) ([]float64, error) {
	if len(f) < n {
		return nil, fmt.Errorf("result line %q: %d fields, want %d", strings.Join(f, " "), len(f), n)
	}
	v := make([]float64, n)
	for i := range v {
		// perftest prints a standard deviation it could not compute
		// (a sum that overflowed) as glibc's "-nan".
		s := f[i]
		if s == "-nan" {
			s = "NaN"
		}
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("result line %q: %w", strings.Join(f, " "), err)
		}
		v[i] = x
	}
	return v, nil
}

// parseBW reads the bandwidth line of a perftest report.
func parseBW(out string) (bwResult, error) {
	_, v, err := reportValues(out, "BW average", 5)
	if err != nil {
		return bwResult{}, err
	}
	return bwResult{Size: uint64(v[0]), Iters: uint64(v[1]), Peak: v[2], Avg: v[3], MsgRate: v[4]}, nil
}

// parseLat reads the latency line of a perftest report.
func parseLat(out string) (latResult, error) {
	_, v, err := reportValues(out, "t_typical", 9)
	if err != nil {
		return latResult{}, err
	}
	return latResult{Size: uint64(v[0]), Iters: uint64(v[1]), Min: v[2], Max: v[3], Typical: v[4], Avg: v[5],
		Stdev: v[6], P99: v[7], P999: v[8]}, nil
}

// bwRun runs a bandwidth test once with iters iterations per QP.
func (s *suite) bwRun(ctx context.Context, p *netnstest.Pair, test string, size, mtu, qps, iters int, extra ...string) (bwResult, error) {
	return s.bwRunSides(ctx, p, test, size, mtu, qps, iters, extra, nil)
}

// bwRunSides is bwRun with flags for both sides and for the client's only.
func (s *suite) bwRunSides(ctx context.Context, p *netnstest.Pair, test string, size, mtu, qps, iters int, both, client []string) (bwResult, error) {
	args := []string{"-x", "1", "-m", strconv.Itoa(mtu), "-s", strconv.Itoa(size), "-q", strconv.Itoa(qps),
		"-n", strconv.Itoa(iters), "--report_gbits", "-N"} // -N: the peak is quadratic in -n and not reported here
	out, err := s.runPerf(ctx, p, perfRun{Test: test, Args: append(args, both...), ClientArgs: client})
	if err != nil {
		return bwResult{}, err
	}
	r, err := parseBW(out.Client)
	if err != nil {
		return bwResult{}, fmt.Errorf("client: %w", err)
	}
	r.Client = out.Client
	return r, nil
}

// bwIters sizes a bandwidth test for about s.duration (softnic perf has no
// -D) with a short probe run, and returns the iterations per QP.
func (s *suite) bwIters(ctx context.Context, p *netnstest.Pair, test string, size, mtu, qps int, extra ...string) (int, error) {
	perQP := func(total int) int { return max(5, (total+qps-1)/qps) }
	probe := perQP(s.probeMessages(size))
	r, err := s.bwRun(ctx, p, test, size, mtu, qps, probe, extra...)
	if err != nil {
		return 0, fmt.Errorf("probe run: %w", err)
	}
	if r.MsgRate <= 0 {
		return 0, fmt.Errorf("probe run of %d iterations reported no message rate", probe)
	}
	return min(max(perQP(int(r.MsgRate*1e6*s.duration.Seconds())), probe), s.maxIters), nil
}

// bandwidth runs a bandwidth test: a probe run to size it, then s.repeat
// measured runs. qps > 1 splits the messages between the QPs. It returns
// the measured run with the median bandwidth, and a note with every run's
// figure and the errors of failed runs; err only when no run succeeded.
func (s *suite) bandwidth(ctx context.Context, p *netnstest.Pair, test string, size, mtu, qps int, extra ...string) (bwResult, string, error) {
	iters, err := s.bwIters(ctx, p, test, size, mtu, qps, extra...)
	if err != nil {
		return bwResult{}, "", err
	}
	var runs []bwResult
	var errs []string
	for range s.repeat {
		r, err := s.bwRun(ctx, p, test, size, mtu, qps, iters, extra...)
		if errors.Is(err, errTimeout) {
			errs = append(errs, err.Error())
			break // a hung test would hang again: keep make bench short
		}
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		runs = append(runs, r)
	}
	if len(runs) == 0 {
		return bwResult{}, "", fmt.Errorf("%d runs failed: %s", len(errs), strings.Join(errs, "; "))
	}
	med := medianBy(runs, func(r bwResult) float64 { return r.Avg })
	var figs []string
	for _, r := range runs {
		figs = append(figs, fmt.Sprintf("%.2f", r.Avg))
	}
	note := fmt.Sprintf("median of %s; %d messages each", strings.Join(figs, ", "), med.Iters)
	if len(errs) > 0 {
		note += fmt.Sprintf("; %d of %d runs failed: %s", len(errs), s.repeat, strings.Join(errs, "; "))
	}
	return med, note, nil
}

// medianBy returns the element of xs (not empty) with the median key (the
// lower middle one of an even count).
func medianBy[T any](xs []T, key func(T) float64) T {
	c := slices.Clone(xs)
	slices.SortFunc(c, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
	return c[(len(c)-1)/2]
}

// probeMessages is the message count of a probe run: about 64 MiB, at
// least 2000 and at most 100000 messages.
func (s *suite) probeMessages(size int) int { return min(100000, max(2000, (64<<20)/size)) }

// latency runs a latency test of iters round trips.
func (s *suite) latency(ctx context.Context, p *netnstest.Pair, test string, size, mtu, iters int) (latResult, error) {
	args := []string{"-x", "1", "-m", strconv.Itoa(mtu), "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters)}
	out, err := s.runPerf(ctx, p, perfRun{Test: test, Args: args})
	if err != nil {
		return latResult{}, err
	}
	r, err := parseLat(out.Client)
	if err != nil {
		return r, fmt.Errorf("client: %w", err)
	}
	return r, nil
}
