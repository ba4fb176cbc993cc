package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/verbs"
)

// perfTrace is --softnic-trace: while the test runs, a line every
// interval with the device's congestion and loss counters and each QP's
// DCQCN rate, so that a run's figures can be placed in time (the DCQCN
// benchmark reads it; bench/suite/dcqcn.go). It reads counters on its own
// goroutine, never on the engine's.
type perfTrace struct {
	f    *os.File
	w    *bufio.Writer
	dev  *verbs.Device
	stop chan struct{}
	done chan struct{}
}

// traceCounters are the device counters a trace line carries, in order.
var traceCounters = []string{"local_ack_timeout_err", "completer_retry_err", "rcvd_seq_err", "rp_cnp_handled", "np_cnp_sent", "sent_pkts",
	"xsk_rx_dropped", "xsk_rx_ring_full", "xsk_rx_fill_ring_empty_descs"}

// startPerfTrace opens path and starts writing a line every interval.
func startPerfTrace(path string, every time.Duration, dev *verbs.Device) (*perfTrace, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	t := &perfTrace{f: f, w: bufio.NewWriter(f), dev: dev, stop: make(chan struct{}), done: make(chan struct{})}
	fmt.Fprintf(t.w, "# unix_ms late_us %s rate_mbps/qpn...\n", strings.Join(traceCounters, " "))
	go t.loop(every)
	return t, nil
}

// loop writes the lines. A line also says how late its tick woke this
// goroutine: a process starved of CPU wakes late.
func (t *perfTrace) loop(every time.Duration) {
	defer close(t.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var late time.Duration
	for {
		t.line(late)
		select {
		case <-t.stop:
			t.line(0)
			return
		case due := <-tick.C:
			late = time.Since(due)
		}
	}
}

// line writes one reading: the time (Unix milliseconds, to line up
// with other processes' readings), how late the tick woke us, traceCounters, then
// rate/qpn for each QP but QP1 (rate 0: not rate limited).
func (t *perfTrace) line(late time.Duration) {
	cs := t.dev.DeviceCounters()
	fmt.Fprintf(t.w, "%d %d", time.Now().UnixMilli(), late.Microseconds())
	for _, name := range traceCounters {
		fmt.Fprintf(t.w, " %d", counterNamed(cs, name))
	}
	for _, ref := range t.dev.QPCounterRefs() {
		if ref.QPN <= 1 {
			continue
		}
		qc, ok := t.dev.QPCounters(ref.QPN)
		if ok {
			fmt.Fprintf(t.w, " %d/%#x", counterNamed(qc, "rp_current_rate_mbps"), ref.QPN)
		}
	}
	t.w.WriteString("\n")
}

// close writes a last line and closes the file.
func (t *perfTrace) close() error {
	close(t.stop)
	<-t.done
	err := t.w.Flush()
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	return err
}

func counterNamed(cs []counters.Counter, name string) uint64 {
	for _, c := range cs {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}
