package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/softnic/softnic/internal/netnstest"
)

// The rsockets part measures softnic's rsockets (its librdmacm) through
// `softnic daemon` on the 9000-byte veth, in rounds interleaved with the
// figures they are compared with: Debian's rstream 64 KiB (rdmacm-utils)
// against softnic perf send_bw 64 KiB in-process, and iperf3's TCP under
// Debian's librspreload (TCP sockets made rsockets) against iperf3 over
// the kernel's TCP on the same link.

// rstreamMessages is how many 64 KiB transfers an rstream run makes.
const rstreamMessages = 5000

func (s *suite) rsocketsRounds(ctx context.Context, p *netnstest.Pair) {
	fmt.Printf("== 9000-byte veth: rsockets through softnic daemon beside softnic perf in-process and kernel TCP, in %d interleaved rounds\n",
		s.repeat)
	d := &daemonPair{s: s, p: p}
	defer d.down()
	// apart are the daemons with their engines kept on CPUs 0 and 1.
	apart := &daemonPair{s: s, p: p, endArgs: [2][]string{{"--engine-cpus", "0"}, {"--engine-cpus", "1"}}}
	defer apart.down()
	down := func() error { d.down(); apart.down(); return nil }
	up := func() error { apart.down(); return d.up(ctx) }
	upApart := func() error { d.down(); return apart.up(ctx) }
	fig := func(key, name, kernel string) *Figure {
		return &Figure{Key: "rsockets/" + key, Group: groupSoftnic, Unit: unitGbps, Name: name, Kernel: kernel}
	}
	tcp := &Figure{Key: "rsockets/tcp", Group: groupKernel, Unit: unitGbps, Name: "iperf3 over kernel TCP, one stream (beside rsockets)"}
	list := []*series{
		preparedBy(down, s.perfSeries(ctx, p, fig("send_bw", "send_bw 64 KiB, in-process (beside rsockets)", ""),
			"send_bw", 64<<10, 4096, 1, gbps)),
		preparedBy(up, &series{fig: fig("rstream", "rstream 64 KiB, through the daemon", ""),
			measure: func() (float64, string, error) { return s.rstream(ctx, p) }}),
		preparedBy(up, &series{fig: fig("rstream_blocking", "rstream 64 KiB -T b (blocking calls), through the daemon", ""),
			measure: func() (float64, string, error) { return s.rstream(ctx, p, "-T", "b") }}),
		preparedBy(up, &series{fig: fig("iperf3", "iperf3 under librspreload (rsockets), through the daemon", "rsockets/tcp"),
			measure: func() (float64, string, error) {
				v, err := s.rspreloadIperf3(ctx, p)
				return v, "", err
			}}),
		preparedBy(down, &series{fig: tcp, measure: func() (float64, string, error) {
			v, err := s.tcpStream(ctx, p)
			return v, "", err
		}}),
	}
	if runtime.NumCPU() >= 2 {
		list = append(list, preparedBy(upApart, &series{
			fig:     fig("rstream_apart", "rstream 64 KiB, through the daemons, their engines on CPUs 0 and 1 (--engine-cpus)", ""),
			measure: func() (float64, string, error) { return s.rstream(ctx, p) }}))
	}
	s.rounds(list...)
}

// rsocketSide is argv run on end's device through softnic exec, as root.
func (s *suite) rsocketSide(ctx context.Context, end *netnstest.End, argv ...string) *exec.Cmd {
	a := append([]string{"netns", "exec", end.Namespace, s.softnic, "exec", "--run-dir", s.runDir, "-d", end.Ifname, "--"}, argv...)
	cmd := exec.CommandContext(ctx, "ip", a...)
	cmd.WaitDelay = time.Second
	return cmd
}

// rsocketPair starts server on A, then runs client on B until it
// connects (an rsocket listener has no TCP port to wait for; rstream and
// iperf3 clients fail at once while nobody listens), and returns the
// client's output.
func (s *suite) rsocketPair(ctx context.Context, p *netnstest.Pair, server, client []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.perfTimeout)
	defer cancel()
	var sout bytes.Buffer
	srv := s.rsocketSide(ctx, &p.A, server...)
	srv.Stdout, srv.Stderr = &sout, &sout
	if err := srv.Start(); err != nil {
		return "", err
	}
	defer func() {
		srv.Process.Kill()
		srv.Wait()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := s.rsocketSide(ctx, &p.B, client...).CombinedOutput()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			if err != nil {
				return string(out), fmt.Errorf("%s: %v: %s (server: %s)", client[0], err, lastLine(string(out)), lastLine(sout.String()))
			}
			return string(out), nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rstream runs Debian's rstream of 64 KiB transfers with extra options
// on both sides and returns its Gb/sec. Its default calls are
// non-blocking and retried at once; -T b makes them block (MSG_WAITALL),
// so a side waiting for credits or data sleeps on the completion channel
// instead of spinning beside the daemons.
func (s *suite) rstream(ctx context.Context, p *netnstest.Pair, extra ...string) (float64, string, error) {
	args := append([]string{"-S", "65536", "-C", strconv.Itoa(rstreamMessages)}, extra...)
	out, err := s.rsocketPair(ctx, p, append([]string{"rstream"}, args...),
		append([]string{"rstream", "-s", p.A.Addr4().String()}, args...))
	if err != nil {
		return 0, "", err
	}
	// name bytes xfers iters total time Gb/sec usec/xfer
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 8 && f[0] == "custom" {
			v, err := strconv.ParseFloat(f[6], 64)
			return v, fmt.Sprintf("%s µs a transfer", f[7]), err
		}
	}
	return 0, "", fmt.Errorf("rstream: %w", errNoReport)
}

// rspreloadIperf3 runs one iperf3 TCP stream from B to A under
// librspreload and returns the receiver's rate.
func (s *suite) rspreloadIperf3(ctx context.Context, p *netnstest.Pair) (float64, error) {
	lib, err := rspreloadLib()
	if err != nil {
		return 0, err
	}
	pre := func(argv ...string) []string {
		return append([]string{"sh", "-c", `LD_PRELOAD=` + lib + `:$LD_PRELOAD exec "$@"`, "sh"}, argv...)
	}
	addr := p.A.Addr4().String()
	secs := strconv.Itoa(max(1, int(s.duration.Round(time.Second).Seconds())))
	out, err := s.rsocketPair(ctx, p, pre("iperf3", "-s", "-B", addr, "-p", "5202"),
		pre("iperf3", "-c", addr, "-p", "5202", "-t", secs, "-J"))
	if err != nil {
		return 0, err
	}
	return parseIperf3([]byte(out), nil)
}

// rspreloadLib is librdmacm1's librspreload.so, wherever the
// architecture's library directory is.
func rspreloadLib() (string, error) {
	m, _ := filepath.Glob("/usr/lib/*/rsocket/librspreload.so")
	if len(m) == 0 {
		return "", fmt.Errorf("no librspreload.so (apt-get install librdmacm1)")
	}
	return m[0], nil
}
