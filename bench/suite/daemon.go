package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/softnic/softnic/internal/netnstest"
)

// The daemon part measures softnic's tools through `softnic daemon` (one on
// each veth end) against the same tools opening the interface themselves,
// in interleaved rounds on one link: the in-process series of a round run
// with no daemon, then the daemons start, the daemon series run, and the
// daemons stop. The tools choose the daemon when its socket is in
// $SOFTNIC_RUN_DIR (the suite's own directory, s.runDir).

// daemonProcs is how many processes share the daemon in the scaling figure,
// against one process with as many QPs.
const daemonProcs = 8

// daemonPair runs a daemon on each end of a pair.
type daemonPair struct {
	s    *suite
	p    *netnstest.Pair
	cmds []*exec.Cmd
	// args are more flags of both daemons, endArgs of A's and B's.
	args    []string
	endArgs [2][]string
}

// up starts both daemons and waits for their sockets.
func (d *daemonPair) up(ctx context.Context) error {
	if d.cmds != nil {
		return nil
	}
	for i, end := range []*netnstest.End{&d.p.A, &d.p.B} {
		args := append([]string{"netns", "exec", end.Namespace, d.s.softnic, "daemon", "-d", end.Ifname,
			"--run-dir", d.s.runDir, "--log-level", "warn"}, d.args...)
		args = append(args, d.endArgs[i]...)
		cmd := exec.CommandContext(ctx, "ip", args...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			d.down()
			return fmt.Errorf("start daemon on %s: %w", end.Ifname, err)
		}
		d.cmds = append(d.cmds, cmd)
		sock := filepath.Join(d.s.runDir, "softnic_"+end.Ifname+".sock")
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(sock); err == nil {
				break
			}
			if time.Now().After(deadline) {
				d.down()
				return fmt.Errorf("daemon on %s: no socket %s after 20 s", end.Ifname, sock)
			}
		}
	}
	return nil
}

// down stops the daemons (SIGTERM) and waits for them to leave.
func (d *daemonPair) down() {
	for _, c := range d.cmds {
		c.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range d.cmds {
		c.Wait()
	}
	d.cmds = nil
}

// daemonRounds measures, on the 9000-byte veth at IB MTU 4096, write_bw of
// 64 KiB, write_lat of 8 B, the 64 B write message rate and write_bw over 8
// QPs, in-process and through the daemons, write_bw of 8 processes of one
// QP each through the daemons, and the first three with Debian's perftest
// (ib_write_bw, ib_write_lat) through the daemons and the C provider.
func (s *suite) daemonRounds(ctx context.Context, p *netnstest.Pair) {
	fmt.Printf("== 9000-byte veth: softnic tools in-process and through softnic daemon, in %d interleaved rounds\n", s.repeat)
	d := &daemonPair{s: s, p: p}
	defer d.down()
	defer func() { s.stock = false }()
	var list []*series
	for _, mode := range []string{"inproc", "daemon", "stock"} {
		prepare := func() error { s.stock = false; d.down(); return nil }
		if mode != "inproc" {
			prepare = func() error { s.stock = mode == "stock"; return d.up(ctx) }
		}
		list = append(list, s.daemonSeries(ctx, p, mode, prepare)...)
	}
	s.rounds(list...)
}

// daemonSeries are one mode's series; prepare starts or stops the daemons
// before each run.
func (s *suite) daemonSeries(ctx context.Context, p *netnstest.Pair, mode string, prepare func() error) []*series {
	how := map[string]string{"inproc": "in-process", "daemon": "through the daemon",
		"stock": "Debian's perftest through the daemon"}[mode]
	fig := func(key, name, unit string) *Figure {
		return &Figure{Key: "daemon/" + mode + "/" + key, Group: groupSoftnic, Unit: unit, Name: name + ", " + how,
			LowerIsBetter: unit == unitUsec}
	}
	withPrepare := func(se *series) *series { return preparedBy(prepare, se) }
	list := []*series{
		withPrepare(s.perfSeries(ctx, p, fig("write_bw", "write_bw 64 KiB", unitGbps), "write_bw", 64<<10, 4096, 1, gbps)),
		withPrepare(&series{fig: fig("write_lat", "write_lat 8 B median", unitUsec), measure: func() (float64, string, error) {
			r, err := s.latency(ctx, p, "write_lat", 8, 4096, s.latIters)
			return r.Typical, fmt.Sprintf("p99 %.2f", r.P99), err
		}}),
		withPrepare(s.perfSeries(ctx, p, fig("msgrate", "write_bw 64 B message rate", unitMpps), "write_bw", 64, 4096, 1,
			msgRate, "-t", "128")),
	}
	if mode == "stock" {
		return list
	}
	list = append(list, withPrepare(s.perfSeries(ctx, p, fig("qps8", fmt.Sprintf("write_bw 64 KiB, one process, %d QPs", daemonProcs), unitGbps),
		"write_bw", 64<<10, 4096, daemonProcs, gbps)))
	if mode == "daemon" {
		list = append(list, withPrepare(s.processesSeries(ctx, p, fig("procs8",
			fmt.Sprintf("write_bw 64 KiB, %d processes of one QP", daemonProcs), unitGbps))))
	}
	return list
}

// processesSeries runs daemonProcs write_bw pairs at once, one QP each, on
// ports of their own; the figure is the sum of their bandwidths.
func (s *suite) processesSeries(ctx context.Context, p *netnstest.Pair, f *Figure) *series {
	iters := 0
	return &series{fig: f, measure: func() (float64, string, error) {
		if iters == 0 {
			n, err := s.bwIters(ctx, p, "write_bw", 64<<10, 4096, daemonProcs)
			if err != nil {
				return 0, "", err
			}
			iters = n
		}
		results := make([]bwResult, daemonProcs)
		errs := make([]error, daemonProcs)
		var wg sync.WaitGroup
		for i := range daemonProcs {
			wg.Go(func() {
				results[i], errs[i] = s.bwRun(ctx, p, "write_bw", 64<<10, 4096, 1, iters, "-p", strconv.Itoa(18600+i))
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return 0, "", err
		}
		sum := 0.0
		for _, r := range results {
			sum += r.Avg
		}
		return sum, fmt.Sprintf("%d processes × %d messages", daemonProcs, iters), nil
	}}
}
