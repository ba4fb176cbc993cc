package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/softnic/softnic/internal/netnstest"
)

// The middleware part (issue #33) measures Debian's UCX and Open MPI
// through `softnic daemon` on the 9000-byte veth, in rounds interleaved with
// softnic perf in-process, whose figures they are compared with:
// ucx_perftest tag_bw 64 KiB over UCX_TLS=rc against write_bw 64 KiB,
// tag_lat 8 B against write_lat 8 B, and an MPI ping-pong of 8 bytes
// (test/middleware/testdata/mpicheck.c -l) through Open MPI's pml ucx, one
// rank in each namespace (mpirun and its launcher agent,
// test/middleware/testdata/rsh-agent.sh, as root here).

// ucxFinal is ucx_perftest's last line: iterations, the overhead's 50th
// percentile, average and overall (µs), the bandwidth's average and overall
// (MB/s of 2^20 bytes), the message rate's average and overall.
var ucxFinal = regexp.MustCompile(`(?m)^Final:\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)`)

// mpiLatency is mpicheck -l's figure.
var mpiLatency = regexp.MustCompile(`(?m)^mpicheck: latency 8 bytes \d+ iterations ([\d.]+) usec$`)

// middlewareBwIters is how many 64 KiB messages tag_bw sends: about two
// seconds at 5 Gb/s.
const middlewareBwIters = 20000

// middlewareRounds runs the part on p.
func (s *suite) middlewareRounds(ctx context.Context, p *netnstest.Pair) {
	fmt.Printf("== 9000-byte veth: UCX and Open MPI through softnic daemon beside softnic perf in-process, in %d interleaved rounds\n",
		s.repeat)
	d := &daemonPair{s: s, p: p}
	defer d.down()
	down := func() error { d.down(); return nil }
	up := func() error { return d.up(ctx) }
	fig := func(key, name, unit string) *Figure {
		return &Figure{Key: "middleware/" + key, Group: groupSoftnic, Unit: unit, Name: name, LowerIsBetter: unit == unitUsec}
	}
	mpi, mpiErr := s.mpiProgram(ctx)
	list := []*series{
		preparedBy(down, s.perfSeries(ctx, p, fig("write_bw", "write_bw 64 KiB, in-process (beside UCX)", unitGbps),
			"write_bw", 64<<10, 4096, 1, gbps)),
		preparedBy(down, &series{fig: fig("write_lat", "write_lat 8 B median, in-process (beside UCX)", unitUsec),
			measure: func() (float64, string, error) {
				r, err := s.latency(ctx, p, "write_lat", 8, 4096, s.latIters)
				return r.Typical, fmt.Sprintf("p99 %.2f", r.P99), err
			}}),
		preparedBy(up, &series{fig: fig("ucx/tag_bw", "ucx_perftest tag_bw 64 KiB over rc, through the daemon", unitGbps),
			measure: func() (float64, string, error) {
				f, err := s.ucxPerftest(ctx, p, "tag_bw", 64<<10, middlewareBwIters)
				if err != nil {
					return 0, "", err
				}
				// MB/s of 2^20 bytes to Gb/s
				return f[3] * (1 << 20) * 8 / 1e9, fmt.Sprintf("%.0f msg/s", f[5]), nil
			}}),
		preparedBy(up, &series{fig: fig("ucx/tag_lat", "ucx_perftest tag_lat 8 B median over rc, through the daemon", unitUsec),
			measure: func() (float64, string, error) {
				f, err := s.ucxPerftest(ctx, p, "tag_lat", 8, s.latIters)
				if err != nil {
					return 0, "", err
				}
				return f[0], fmt.Sprintf("average %.2f", f[1]), nil
			}}),
		preparedBy(up, &series{fig: fig("mpi/lat", "Open MPI ping-pong 8 B over pml ucx (rc), half round trip, through the daemon", unitUsec),
			measure: func() (float64, string, error) {
				if mpiErr != nil {
					return 0, "", mpiErr
				}
				return s.mpiPingPong(ctx, p, mpi)
			}}),
	}
	s.rounds(list...)
}

// ucxPerftest runs ucx_perftest test between the pair's ends through the
// daemons (server on A, client on B, as root through softnic exec) and
// returns the client's Final figures after the iterations.
func (s *suite) ucxPerftest(ctx context.Context, p *netnstest.Pair, test string, size, iters int) ([]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.perfTimeout)
	defer cancel()
	side := func(end *netnstest.End, args ...string) *exec.Cmd {
		a := append([]string{"netns", "exec", end.Namespace, s.softnic, "exec", "--run-dir", s.runDir, "-d", end.Ifname, "--",
			"env", "UCX_TLS=rc", "UCX_NET_DEVICES=softnic_" + end.Ifname + ":1", "ucx_perftest"}, args...)
		cmd := exec.CommandContext(ctx, "ip", a...)
		cmd.WaitDelay = time.Second
		return cmd
	}
	const port = "13337"
	var sout, cout bytes.Buffer
	srv := side(&p.A, "-p", port)
	srv.Stdout, srv.Stderr = &sout, &sout
	if err := srv.Start(); err != nil {
		return nil, err
	}
	if err := waitListening(ctx, &p.A, port); err != nil {
		srv.Process.Kill()
		srv.Wait()
		return nil, fmt.Errorf("ucx_perftest server: %w: %s", err, lastLine(sout.String()))
	}
	cli := side(&p.B, p.A.Addr4().String(), "-p", port, "-t", test, "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters))
	cli.Stdout, cli.Stderr = &cout, &cout
	cerr := cli.Run()
	if cerr != nil {
		srv.Process.Kill()
	}
	serr := srv.Wait()
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w after %v: %s", errTimeout, s.perfTimeout, firstUCXError(cout.String()))
	case cerr != nil:
		return nil, fmt.Errorf("ucx_perftest client: %v: %s", cerr, firstUCXError(cout.String()))
	case serr != nil:
		return nil, fmt.Errorf("ucx_perftest server: %v: %s", serr, firstUCXError(sout.String()))
	}
	m := ucxFinal.FindStringSubmatch(cout.String())
	if m == nil {
		return nil, fmt.Errorf("ucx_perftest: %w", errNoReport)
	}
	return parseFloats(m[2:], 7)
}

// firstUCXError is UCX's first error or fatal line in out, or its last
// line.
func firstUCXError(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "ERROR") || strings.Contains(l, "Fatal") {
			return strings.TrimSpace(l)
		}
	}
	return lastLine(out)
}

// mpiProgram compiles mpicheck with Open MPI's mpicc into the run
// directory.
func (s *suite) mpiProgram(ctx context.Context) (string, error) {
	prog := filepath.Join(s.runDir, "mpicheck")
	out, err := exec.CommandContext(ctx, "mpicc", "-O2", "-o", prog,
		filepath.Join("test", "middleware", "testdata", "mpicheck.c")).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("mpicc: %v: %s", err, lastLine(string(out)))
	}
	return prog, nil
}

// mpiPingPong runs mpicheck -l over pml ucx with a rank in each namespace
// and returns its half round trip.
func (s *suite) mpiPingPong(ctx context.Context, p *netnstest.Pair, prog string) (float64, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.perfTimeout)
	defer cancel()
	agent, err := filepath.Abs(filepath.Join("test", "middleware", "testdata", "rsh-agent.sh"))
	if err != nil {
		return 0, "", err
	}
	hosts := filepath.Join(s.runDir, "mpi-hosts")
	if err := os.WriteFile(hosts, []byte("hosta slots=1\nhostb slots=1\n"), 0o644); err != nil {
		return 0, "", err
	}
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", p.A.Namespace, "mpirun", "--allow-run-as-root", "--hostfile", hosts,
		"-np", "2", "--map-by", "node", "--mca", "plm_rsh_agent", agent, "--mca", "pml", "ucx", "-x", "UCX_TLS=rc",
		prog, "-l", strconv.Itoa(s.latIters))
	bin, err := filepath.Abs(s.softnic)
	if err != nil {
		return 0, "", err
	}
	cmd.Env = append(os.Environ(), "MW_UID=0", "MW_SOFTNIC="+bin, "MW_RUN_DIR="+s.runDir,
		fmt.Sprintf("MW_HOSTS=hosta=%s:%s hostb=%s:%s", p.A.Namespace, p.A.Ifname, p.B.Namespace, p.B.Ifname))
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, "", fmt.Errorf("mpirun: %v: %s", err, firstUCXError(string(out)))
	}
	m := mpiLatency.FindStringSubmatch(string(out))
	if m == nil || !strings.Contains(string(out), "mpicheck: ok:") {
		return 0, "", fmt.Errorf("mpicheck: %w", errNoReport)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, fmt.Sprintf("%d round trips, every byte of 1 B to 1 MiB checked", s.latIters), err
}
