package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// senderPoint is one line of a sender's --softnic-trace (cmd/softnic
// perftrace.go): its device's counters at a time, and its first test QP's
// DCQCN rate (0: not rate limited, at the line rate).
type senderPoint struct {
	at                  time.Duration // since the run's start
	late                time.Duration // how late the trace's tick woke: CPU starvation
	timeouts, restarts  uint64
	seqNAKs, cnpHandled uint64
	rxDrops             uint64 // the sender's AF_XDP rings' drops (ACKs, CNPs)
	rateMbps            uint64
	limited             bool
}

// readSenderTrace reads a trace file, timing its lines from start; a
// missing or malformed file gives what could be read (the trace is
// diagnosis, not a figure the run depends on).
func readSenderTrace(path string, start time.Time) []senderPoint {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var pts []senderPoint
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, ok := parseTraceLine(sc.Text(), start); ok {
			pts = append(pts, p)
		}
	}
	return pts
}

// parseTraceLine parses "unix_ms late_us timeouts restarts seq_naks
// cnp_handled cnp_sent sent_pkts rx_dropped rx_ring_full
// rx_fill_ring_empty rate/qpn...".
func parseTraceLine(line string, start time.Time) (senderPoint, bool) {
	var p senderPoint
	const fields = 11
	f := strings.Fields(line)
	if len(f) < fields || strings.HasPrefix(line, "#") {
		return p, false
	}
	var v [fields]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return p, false
		}
		v[i] = n
	}
	if v[0] > uint64(math.MaxInt64/int64(time.Millisecond)) || v[1] > uint64(math.MaxInt64/int64(time.Microsecond)) {
		return p, false
	}
	p.at = time.UnixMilli(int64(v[0])).Sub(start)
	p.late = time.Duration(v[1]) * time.Microsecond
	p.timeouts, p.restarts, p.seqNAKs, p.cnpHandled = v[2], v[3], v[4], v[5]
	p.rxDrops = v[8] + v[9] + v[10]
	if len(f) > fields {
		rate, _, ok := strings.Cut(f[fields], "/")
		if n, err := strconv.ParseUint(rate, 10, 64); ok && err == nil {
			p.rateMbps, p.limited = n, n > 0
		}
	}
	return p, true
}

// senderAt returns sender i's trace point at or just before at (the zero
// point if none).
func (r *dcqcnRun) senderAt(i int, at time.Duration) senderPoint {
	var last senderPoint
	for _, p := range r.trace[i] {
		if p.at > at {
			break
		}
		last = p
	}
	return last
}

// windowLine is one 1 s window of a run, for finding when a run missed
// a mark: each sender's rate through the bottleneck and its DCQCN rate at
// the window's end, and what happened in the window.
type windowLine struct {
	from       time.Duration
	rate       [2]float64 // through the bottleneck, bits/s
	dcqcn      [2]uint64  // Mb/s at the end, 0 not limited
	util, jain float64
	// tbfRate is the bottleneck's output rate (bits/s), tbfBusy the
	// fraction of the window's samples with a backlog: a bottleneck that
	// holds a backlog but sends under 1 Gb/s was slowed by the host.
	tbfRate, tbfBusy     float64
	drops, rxDrops       uint64
	timeouts, restarts   [2]uint64
	outOfSeq, dup        [2]uint64
	cnps                 [2]uint64
	senderRxDrops        [2]uint64
	late                 [2]time.Duration // the most a sender's trace tick woke late
	backlogMax           uint64
	samples, sampleSpanS float64
}

// windows splits the run into 1 s windows from the first sample.
func (r *dcqcnRun) windows() []windowLine {
	var out []windowLine
	k := 0
	for from := time.Duration(0); ; from += time.Second {
		a := k
		for k < len(r.samples) && r.samples[k].at < from+time.Second {
			k++
		}
		if k >= len(r.samples) || a >= k {
			return out
		}
		sa, sb := r.samples[a], r.samples[k] // the next window starts at sb
		dt := (sb.at - sa.at).Seconds()
		if dt <= 0 {
			continue
		}
		w := windowLine{from: from, samples: float64(k - a), sampleSpanS: dt, drops: sb.drops - sa.drops, rxDrops: sb.rxDrops - sa.rxDrops}
		for i := range 2 {
			w.rate[i] = (float64(sb.bytes[i]-sa.bytes[i]) + frameOverhead*float64(sb.pkts[i]-sa.pkts[i])) * 8 / dt
			w.outOfSeq[i], w.dup[i] = sb.outOfSeq[i]-sa.outOfSeq[i], sb.dup[i]-sa.dup[i]
			pa, pb := r.senderAt(i, sa.at), r.senderAt(i, sb.at)
			w.dcqcn[i] = pb.rateMbps
			w.timeouts[i], w.restarts[i], w.cnps[i] = pb.timeouts-pa.timeouts, pb.restarts-pa.restarts, pb.cnpHandled-pa.cnpHandled
			w.senderRxDrops[i] = pb.rxDrops - pa.rxDrops
			for _, p := range r.trace[i] {
				if p.at > sa.at && p.at <= sb.at {
					w.late[i] = max(w.late[i], p.late)
				}
			}
		}
		busy := 0
		for _, s := range r.samples[a:k] {
			w.backlogMax = max(w.backlogMax, s.backlog)
			if s.backlog > 0 {
				busy++
			}
		}
		w.tbfBusy = float64(busy) / float64(k-a)
		w.tbfRate = float64(sb.tbfSent-sa.tbfSent) * 8 / dt
		w.util = (w.rate[0] + w.rate[1]) / dcqcnBottleneck
		if sq := w.rate[0]*w.rate[0] + w.rate[1]*w.rate[1]; sq > 0 {
			w.jain = (w.rate[0] + w.rate[1]) * (w.rate[0] + w.rate[1]) / (2 * sq)
		}
		out = append(out, w)
	}
}

// windowTable prints the run's windows, one line each.
func (r *dcqcnRun) windowTable() string {
	var b strings.Builder
	fmt.Fprintf(&b, "   s  Mb/s s1  s2 | DCQCN s1  s2 |  util  Jain | drops rxdrop | timeouts restarts | oos  dup (s1,s2) | CNPs s1 s2 | s rxdrop | late ms s1 s2 | backlog max KB | tbf Mb/s busy\n")
	for _, w := range r.windows() {
		fmt.Fprintf(&b, "%4.0f %7.0f %4.0f | %8d %4d | %5.3f %5.3f | %5d %6d | %4d,%-3d %4d,%-4d | %d,%d %d,%d | %6d %6d | %d,%d | %5.1f %5.1f | %6.0f | %5.0f %4.2f\n",
			w.from.Seconds(), w.rate[0]/1e6, w.rate[1]/1e6, w.dcqcn[0], w.dcqcn[1], w.util, w.jain, w.drops, w.rxDrops,
			w.timeouts[0], w.timeouts[1], w.restarts[0], w.restarts[1], w.outOfSeq[0], w.outOfSeq[1], w.dup[0], w.dup[1],
			w.cnps[0], w.cnps[1], w.senderRxDrops[0], w.senderRxDrops[1], w.late[0].Seconds()*1e3, w.late[1].Seconds()*1e3, float64(w.backlogMax)/1e3, w.tbfRate/1e6, w.tbfBusy)
	}
	return b.String()
}
