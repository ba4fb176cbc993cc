package main

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"slices"

	"github.com/softnic/softnic/internal/netnstest"
)

// The loaded part measures Debian's ib_write_lat through the daemons with
// every CPU taken by applications that never yield (issue #37: an MPI job
// runs a rank per core), beside the same unloaded, with the daemons'
// engines raised while they sleep and work (--engine-priority auto) and
// without (off, the engines spinning and sleeping at normal priority as
// before), in interleaved rounds; and ib_write_bw and softnic's own
// write_lat through the daemons unloaded, both ways, to show the raised
// engines cost nothing where the CPUs are free.

// loadedSpinners is how many busy loops the loaded figure runs: one per
// CPU and two more.
func loadedSpinners() int { return runtime.NumCPU() + 2 }

// startSpinners starts n shell busy loops (no system call, no yield) and
// returns a function that stops them.
func startSpinners(n int) (func(), error) {
	var cmds []*exec.Cmd
	stop := func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

func (s *suite) loadedRounds(ctx context.Context, p *netnstest.Pair) {
	fmt.Printf("== 9000-byte veth: Debian's ib_write_lat through the daemons beside %d busy loops, engine priority off and auto, in %d interleaved rounds\n",
		loadedSpinners(), s.repeat)
	d := &daemonPair{s: s, p: p}
	defer d.down()
	defer func() { s.stock = false }()
	var list []*series
	for _, prio := range []string{"off", "auto"} {
		list = append(list, s.loadedSeries(ctx, p, d, prio)...)
	}
	s.rounds(list...)
}

// loadedSeries are one engine priority's series.
func (s *suite) loadedSeries(ctx context.Context, p *netnstest.Pair, d *daemonPair, prio string) []*series {
	args := []string{"--engine-priority", prio}
	fig := func(key, name, unit string) *Figure {
		return &Figure{Key: "loaded/" + prio + "/" + key, Group: groupSoftnic, Unit: unit,
			Name: name + ", engine priority " + prio, LowerIsBetter: unit == unitUsec}
	}
	prepared := func(stock bool, se *series) *series {
		return preparedBy(func() error {
			if !slices.Equal(d.args, args) {
				d.down()
				d.args = args
			}
			s.stock = stock
			return d.up(ctx)
		}, se)
	}
	lat := func(loaded bool) func() (float64, string, error) {
		return func() (float64, string, error) {
			if loaded {
				stop, err := startSpinners(loadedSpinners())
				if err != nil {
					return 0, "", err
				}
				defer stop()
			}
			iters := s.latIters
			if loaded {
				// A round trip needs both applications on a CPU at
				// once, which busy loops make rare: a twentieth of the
				// round trips keeps a run within its time limit.
				iters = max(iters/20, 100)
			}
			r, err := s.latency(ctx, p, "write_lat", 8, 4096, iters)
			return r.Typical, fmt.Sprintf("p99 %.2f", r.P99), err
		}
	}
	return []*series{
		prepared(true, &series{fig: fig("stock_lat", "ib_write_lat 8 B median, unloaded", unitUsec), measure: lat(false)}),
		prepared(true, &series{fig: fig("stock_lat_loaded", fmt.Sprintf("ib_write_lat 8 B median, %d busy loops", loadedSpinners()), unitUsec), measure: lat(true)}),
		prepared(true, s.perfSeries(ctx, p, fig("stock_bw", "ib_write_bw 64 KiB, unloaded", unitGbps), "write_bw", 64<<10, 4096, 1, gbps)),
		prepared(false, &series{fig: fig("write_lat", "softnic write_lat 8 B median through the daemon, unloaded", unitUsec), measure: lat(false)}),
	}
}
