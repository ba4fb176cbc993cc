package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/daemon/client/session"
)

func init() {
	register("stat", "show the counters of the devices daemons serve, like rdma statistic show (stat res: their objects)", runStat)
}

// statOptions are softnic stat's flags.
type statOptions struct {
	ifname, runDir string
	qp             int // -1: the device's counters
	json           bool
	watch          float64 // seconds between lines; 0: print once
	count          int     // lines to print with -w; 0: until interrupted
}

// statTarget is one device softnic stat reads, over a monitor connection
// kept for -w: its index among the run directory's devices, its name.
type statTarget struct {
	index int
	name  string
	mon   *session.Monitor
}

func runStat(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "res" || args[0] == "resource") {
		return runStatRes(args[1:], stdout, stderr)
	}
	o, status, ok := parseStatFlags(args, stderr)
	if !ok {
		return status
	}
	fail := failer(stderr, "stat")
	targets, err := statTargets(o)
	if err != nil {
		return fail("%v", err)
	}
	defer func() {
		for _, t := range targets {
			t.mon.Close()
		}
	}()
	prev, at, err := readStats(targets, o.qp)
	if err != nil {
		return fail("%v", err)
	}
	if o.watch == 0 {
		printStats(stdout, targets, prev, o)
		return 0
	}
	for n := 0; o.count == 0 || n < o.count; n++ {
		time.Sleep(time.Duration(o.watch * float64(time.Second)))
		cur, now, err := readStats(targets, o.qp)
		if err != nil {
			return fail("%v", err)
		}
		printStats(stdout, targets, perSecond(prev, cur, now.Sub(at)), o)
		prev, at = cur, now
	}
	return 0
}

func parseStatFlags(args []string, stderr io.Writer) (statOptions, int, bool) {
	o := statOptions{qp: -1}
	fs := flag.NewFlagSet("stat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.ifname, "d", "", "show this device only: its name, or its interface's in this network namespace (default: every device a daemon of the run directory serves)")
	fs.Func("qp", "show QP `N`'s counters, like rdma statistic qp show (default: the device's)", func(v string) error {
		n, err := strconv.ParseUint(v, 0, 32)
		if err != nil || n > 0xffffff {
			return fmt.Errorf("not a QP number (0 to 0xffffff)")
		}
		o.qp = int(n)
		return nil
	})
	fs.BoolVar(&o.json, "j", false, "print JSON, like rdma -j")
	fs.Float64Var(&o.watch, "w", 0, "print the per-second change every `SECONDS` (default: print the counters once)")
	fs.IntVar(&o.count, "c", 0, "with -w, stop after `COUNT` lines (default 0: until interrupted)")
	fs.StringVar(&o.runDir, "run-dir", client.RunDir(), "the daemons' run directory (default $SOFTNIC_RUN_DIR, else /run/softnic)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softnic stat [-d DEVICE|IFACE] [--qp N] [-j] [-w SECONDS [-c COUNT]]")
		fmt.Fprintln(stderr, "       softnic stat res [cm_id] [-d DEVICE|IFACE]")
		fmt.Fprintln(stderr, "\nPrints the counters of each device a softnic daemon serves, a line per device")
		fmt.Fprintln(stderr, "as `rdma statistic show` does (Linux's rxe counters first, then softnic's own),")
		fmt.Fprintln(stderr, "or one QP's as `rdma statistic qp show` does. `softnic stat res` prints the devices'")
		fmt.Fprintln(stderr, "objects as `rdma resource show` does, `softnic stat res cm_id` their rdma_cm IDs.")
		fmt.Fprintln(stderr, "Neither opens a session.\n\nflags:")
		printFlags(stderr, fs)
	}
	pos, status, ok := parseArgs(fs, args, 2)
	if !ok {
		return o, status, false
	}
	switch {
	case len(pos) != 0, o.watch < 0, o.watch > 0 && o.watch*float64(time.Second) < float64(time.Millisecond),
		o.count < 0:
		fs.Usage()
		return o, 2, false
	}
	return o, 0, true
}

// statDeviceName is the device -d arg names for softnic stat: a device
// of that name (in any network namespace: stat shows every device of the
// run directory), else the device serving interface arg here, else one
// whose daemon published no tree, by its socket (ARG.sock, softnic_ARG.sock).
// Nothing matching is notServedError's.
func statDeviceName(runDir, arg string) (string, error) {
	if d, err := lookupDevice(runDir, arg, true); err == nil {
		return d.name, nil
	}
	for _, name := range []string{arg, defaultDeviceName(arg)} {
		if _, err := os.Lstat(filepath.Join(runDir, name+".sock")); err == nil {
			return name, nil
		}
	}
	devs, _ := servedDevices(runDir)
	return "", notServedError(runDir, arg, devs, true) // never nil: needDaemon
}

// statTargets connects to the daemons of the devices o names.
func statTargets(o statOptions) ([]statTarget, error) {
	names, err := client.DeviceNamesIn(o.runDir)
	if err != nil {
		return nil, err
	}
	if o.ifname != "" {
		name, err := statDeviceName(o.runDir, o.ifname)
		if err != nil {
			return nil, err
		}
		i := slices.Index(names, name)
		if i < 0 {
			return nil, fmt.Errorf("no daemon serves %s (its socket %s is gone)", o.ifname, filepath.Join(o.runDir, name+".sock"))
		}
		m, err := session.DialMonitor(filepath.Join(o.runDir, name+".sock"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return []statTarget{{index: i, name: name, mon: m}}, nil
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no daemon runs (no socket in %s); start one: %s", o.runDir, startDaemon(o.runDir, "IFACE"))
	}
	var ts []statTarget
	for i, name := range names {
		m, err := session.DialMonitor(filepath.Join(o.runDir, name+".sock"))
		if err != nil {
			for _, t := range ts {
				t.mon.Close()
			}
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		ts = append(ts, statTarget{index: i, name: name, mon: m})
	}
	return ts, nil
}

// readStats reads each target's counters: the device's, or QP qp's. With
// a QP, devices that do not have it give nil, and none having it is an
// error.
func readStats(ts []statTarget, qp int) ([][]counters.Counter, time.Time, error) {
	all := make([][]counters.Counter, len(ts))
	found := false
	for i, t := range ts {
		var err error
		if qp < 0 {
			all[i], err = t.mon.DeviceCounters()
		} else {
			all[i], err = t.mon.QPCounters(uint32(qp))
			if ce := (*session.Error)(nil); errors.As(err, &ce) && ce.Errno == unix.ENOENT { // another device's QP
				err = nil
			}
		}
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("%s: %w", t.name, err)
		}
		found = found || all[i] != nil
	}
	if qp >= 0 && !found {
		return nil, time.Time{}, fmt.Errorf("no QP %d on %s", qp, targetNames(ts))
	}
	return all, time.Now(), nil
}

func targetNames(ts []statTarget) string {
	var b bytes.Buffer
	for i, t := range ts {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(t.name)
	}
	return b.String()
}

// perSecond returns each counter's change from prev to cur over d, per
// second, rounded; a counter that went down (a restarted daemon) or is
// new reads 0.
func perSecond(prev, cur [][]counters.Counter, d time.Duration) [][]counters.Counter {
	out := make([][]counters.Counter, len(cur))
	for i, cs := range cur {
		if cs == nil {
			continue
		}
		out[i] = make([]counters.Counter, len(cs))
		for j, c := range cs {
			out[i][j].Name = c.Name
			if old, ok := counters.Get(prev[i], c.Name); ok && c.Value >= old && d > 0 {
				out[i][j].Value = uint64(math.Round(float64(c.Value-old) / d.Seconds()))
			}
		}
	}
	return out
}

// printStats prints a line per device (that has the QP, with --qp): text
// as `rdma statistic show`, or with -j one JSON array as `rdma -j`.
func printStats(w io.Writer, ts []statTarget, all [][]counters.Counter, o statOptions) {
	var b bytes.Buffer
	if o.json {
		b.WriteByte('[')
	}
	first := true
	for i, t := range ts {
		if all[i] == nil {
			continue
		}
		if o.json {
			if !first {
				b.WriteByte(',')
			}
			writeStatJSON(&b, t, all[i], o.qp)
		} else {
			writeStatText(&b, t, all[i], o.qp)
		}
		first = false
	}
	if o.json {
		b.WriteString("]\n")
	}
	w.Write(b.Bytes())
}

func writeStatText(b *bytes.Buffer, t statTarget, cs []counters.Counter, qp int) {
	fmt.Fprintf(b, "link %s/1", t.name)
	if qp >= 0 {
		fmt.Fprintf(b, " lqpn %d", qp)
	}
	for _, c := range cs {
		fmt.Fprintf(b, " %s %d", c.Name, c.Value)
	}
	b.WriteByte('\n')
}

// writeStatJSON writes one device's object, its keys in the counters'
// order (encoding/json would sort a map's).
func writeStatJSON(b *bytes.Buffer, t statTarget, cs []counters.Counter, qp int) {
	fmt.Fprintf(b, `{"ifindex":%d,"ifname":%s,"port":1`, t.index, strconv.Quote(t.name))
	if qp >= 0 {
		fmt.Fprintf(b, `,"lqpn":%d`, qp)
	}
	for _, c := range cs {
		fmt.Fprintf(b, `,%s:%d`, strconv.Quote(c.Name), c.Value)
	}
	b.WriteByte('}')
}
