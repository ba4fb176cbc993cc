package main

import (
	"bytes"
	"errors"
	"fmt"
	"image/png"
	"strings"
	"testing"
	"time"
)

const bwOutput = `---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      5000             5.16               3.18   		   0.006075
---------------------------------------------------------------------------------------
`

const latOutput = `---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 8       5000          11.86          14910.13      252.59   	       871.81      	1544.46		7890.08 		11933.17
---------------------------------------------------------------------------------------
`

const blastOutput = `    size    mtu         sent       received   frames/s       Gb/s
     138   1500      1034368         890107     445272       0.49
`

const pingOutput = `    size    mtu   rounds   lost  median_us     p99_us     min_us     max_us     avg_us
      82   1500     5000      1       1.58      23.96       1.51      66.95       2.74
`

func TestParseReports(t *testing.T) {
	bw, err := parseBW(bwOutput)
	if err != nil || bw.Size != 65536 || bw.Iters != 5000 || bw.Peak != 5.16 || bw.Avg != 3.18 || bw.MsgRate != 0.006075 {
		t.Fatalf("parseBW = %+v, %v", bw, err)
	}
	lat, err := parseLat(latOutput)
	if err != nil || lat.Typical != 252.59 || lat.P99 != 7890.08 || lat.P999 != 11933.17 || lat.Min != 11.86 {
		t.Fatalf("parseLat = %+v, %v", lat, err)
	}
	b, err := parseBlast(blastOutput)
	if err != nil || b.Size != 138 || b.Received != 890107 || b.FramesPerSecond != 445272 {
		t.Fatalf("parseBlast = %+v, %v", b, err)
	}
	pp, err := parsePingPong(pingOutput)
	if err != nil || pp.Size != 82 || pp.Rounds != 5000 || pp.Lost != 1 || pp.Median != 1.58 || pp.P99 != 23.96 || pp.Min != 1.51 || pp.Avg != 2.74 {
		t.Fatalf("parsePingPong = %+v, %v", pp, err)
	}
	if _, err := parsePingPong(strings.Replace(pingOutput, " 5000 ", " 0 ", 1)); err == nil {
		t.Fatal("parsePingPong accepted a run without round trips")
	}
	if _, err := parsePingPong("xdpblast: ping-pong of 82-byte frames: 30 of 40 round trips lost\n"); err == nil {
		t.Fatal("parsePingPong accepted output without a result line")
	}
	if _, err := parseBW("softnic perf: connection refused\n"); err == nil {
		t.Fatal("parseBW accepted output without a report")
	}
	if _, err := parseLat(strings.Replace(latOutput, "252.59", "x", 1)); err == nil {
		t.Fatal("parseLat accepted a malformed number")
	}
	if _, err := parseBlast(strings.Replace(blastOutput, "890107", "0", 1)); err == nil {
		t.Fatal("parseBlast accepted a run that received nothing")
	}
}

func TestFrameSizes(t *testing.T) {
	if bulkFrame(4096) != 4154 || bulkFrame(1024) != 1082 || smallWriteFrame != 138 || latWriteFrame != 82 {
		t.Fatalf("frames %d %d %d %d", bulkFrame(4096), bulkFrame(1024), smallWriteFrame, latWriteFrame)
	}
}

func TestTargetsAndTable(t *testing.T) {
	s := &suite{started: time.Date(2026, 11, 21, 18, 0, 0, 0, time.UTC)}
	s.res.add(&Figure{Key: "ceiling/4096", Group: groupCeiling, Name: "ceiling", Value: 10, Unit: unitGbps})
	s.res.add(&Figure{Key: "kernel/tcp/9000", Group: groupKernel, Name: "tcp", Value: 4, Unit: unitGbps})
	s.res.add(&Figure{Key: "softnic/write_bw/4096", Group: groupSoftnic, Name: "write_bw", Value: 5, Unit: unitGbps,
		Ceiling: "ceiling/4096", Kernel: "kernel/tcp/9000"})
	s.res.add(&Figure{Key: "kernel/udp/median", Group: groupKernel, Name: "udp", Value: 4, Unit: unitUsec})
	s.res.add(&Figure{Key: "softnic/write_lat/median", Group: groupSoftnic, Name: "write_lat", Err: "client: exit status 1: boom | x",
		Unit: unitUsec, Kernel: "kernel/udp/median"})
	s.res.add(&Figure{Key: "softnic/qpmem", Group: groupSoftnic, Name: "mem", Value: 12, Unit: unitKiB})
	s.res.add(&Figure{Key: "ceiling/lat/median", Group: groupCeiling, Name: "xdp ping-pong", Value: 1.6, Unit: unitUsec,
		Kernel: "kernel/udp/median"})
	s.res.add(&Figure{Key: "softnic/send_lat/median", Group: groupSoftnic, Name: "send_lat", Value: 12, Unit: unitUsec,
		Ceiling: "ceiling/lat/median", Kernel: "kernel/udp/median"})

	check := func(key string, measured, met bool, value float64) {
		t.Helper()
		for _, tg := range targets {
			if tg.Key != key || (tg.Ref != "" && s.res.Get(tg.Ref) == nil) {
				continue
			}
			o := s.res.Evaluate(tg)
			if o.Measured != measured || o.Met != met || (measured && o.Value != value) {
				t.Errorf("%s: %+v", tg.Name, o)
			}
			return
		}
		t.Errorf("no target for %s", key)
	}
	check("softnic/write_bw/4096", true, false, 0.5)
	check("softnic/write_lat/median", false, false, 0)
	check("softnic/qpmem", true, true, 12)
	tcp := s.res.Evaluate(Target{Key: "softnic/write_bw/4096", Ref: "kernel/tcp/9000", Bound: 1})
	if !tcp.Met || tcp.Value != 1.25 {
		t.Errorf("against TCP: %+v", tcp)
	}

	md := s.markdown(time.Minute)
	for _, want := range []string{"| 0.50 | 1.25 |", "| xdp ping-pong | 1.60 µs |  | 0.40 |", "| send_lat | 12.0 µs | 7.50 | 3.00 |", "**not measured**", `boom \| x`, "| memory per idle QP ≤ 16 KiB | 12.0 | yes |",
		"not measured: softnic/msgrate not run"} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	img, err := s.chart()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(img)); err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
}

func TestParseIperf3(t *testing.T) {
	if v, err := parseIperf3([]byte(`{"end":{"sum_received":{"bits_per_second":6.5e9}}}`), nil); err != nil || v != 6.5 {
		t.Fatalf("= %v, %v", v, err)
	}
	// iperf3 -J may exit 0 after failing to connect: the JSON error counts.
	if _, err := parseIperf3([]byte(`{"start":{},"end":{},"error":"unable to connect to server: Connection refused"}`), nil); err == nil ||
		!strings.Contains(err.Error(), "Connection refused") {
		t.Fatalf("error report accepted: %v", err)
	}
	if _, err := parseIperf3([]byte(`{"end":{}}`), nil); err == nil {
		t.Fatal("report without received bytes accepted")
	}
}

func TestMedianBy(t *testing.T) {
	id := func(v float64) float64 { return v }
	if m := medianBy([]float64{3, 1, 2}, id); m != 2 {
		t.Fatalf("median of 3,1,2 = %v", m)
	}
	if m := medianBy([]float64{4, 1, 3, 2}, id); m != 2 {
		t.Fatalf("median of 4,1,3,2 = %v (lower middle)", m)
	}
	if m := medianBy([]float64{7}, id); m != 7 {
		t.Fatalf("median of 7 = %v", m)
	}
}

// runs returns a measurement that yields vals one per call, failing with
// failure where a value is negative; its details name the run.
func runs(failure error, vals ...float64) func() (float64, string, error) {
	i := 0
	return func() (float64, string, error) {
		v := vals[i]
		i++
		if v < 0 {
			return 0, "", failure
		}
		return v, fmt.Sprintf("run %d", i), nil
	}
}

func TestRoundsPairRatios(t *testing.T) {
	s := &suite{repeat: 3}
	seq := func(vals ...float64) func() (float64, string, error) { return runs(errTimeout, vals...) }
	a := &series{fig: &Figure{Key: "a", Name: "a", Unit: unitGbps}, measure: seq(2, 8, 3)}
	b := &series{fig: &Figure{Key: "b", Name: "b", Unit: unitGbps}, measure: seq(1, 4, 3)}
	c := &series{fig: &Figure{Key: "c", Name: "c", Unit: unitGbps}, measure: seq(-1, 5, 5)}
	s.rounds(a, b, c)
	if a.fig.Value != 3 || b.fig.Value != 3 {
		t.Fatalf("medians %v %v, want 3 3", a.fig.Value, b.fig.Value)
	}
	// Round by round a/b is 2, 2, 1: the median is 2, not 3/3.
	if r, ok := s.res.Ratio("a", "b"); !ok || r != 2 {
		t.Fatalf("paired ratio a/b = %v, %v; want 2", r, ok)
	}
	// c timed out in its first round and was not run again.
	if c.fig.Err == "" || !strings.Contains(c.fig.Err, "timed out") {
		t.Fatalf("c: %+v", c.fig)
	}
	if _, ok := s.res.Ratio("a", "c"); ok {
		t.Fatal("ratio to a failed figure")
	}
}

// With five rounds the figure is the middle run and a ratio the middle of
// the five round-by-round ratios, also when one round failed (four left:
// the lower middle).
func TestFiveRounds(t *testing.T) {
	s := &suite{repeat: 5}
	seq := func(vals ...float64) func() (float64, string, error) { return runs(errors.New("boom"), vals...) }
	a := &series{fig: &Figure{Key: "a", Name: "a", Unit: unitGbps}, measure: seq(8, 2, 9, 3, 4)}
	b := &series{fig: &Figure{Key: "b", Name: "b", Unit: unitGbps}, measure: seq(4, 2, 3, 1, 8)}
	c := &series{fig: &Figure{Key: "c", Name: "c", Unit: unitGbps}, measure: seq(-1, 1, 3, 3, 1)}
	s.rounds(a, b, c)
	if a.fig.Value != 4 || b.fig.Value != 3 || c.fig.Value != 1 {
		t.Fatalf("medians %v %v %v, want 4 3 1", a.fig.Value, b.fig.Value, c.fig.Value)
	}
	if !strings.Contains(a.fig.Note, "median of 8.00, 2.00, 9.00, 3.00, 4.00; median run: run 5") {
		t.Errorf("note %q", a.fig.Note)
	}
	// a/b round by round: 2, 1, 3, 3, 0.5 -> 2 (not 4/3).
	if r, ok := s.res.Ratio("a", "b"); !ok || r != 2 {
		t.Errorf("a/b = %v, %v; want 2", r, ok)
	}
	// a/c over the four rounds c ran: 2, 3, 1, 4 -> lower middle 2.
	if r, ok := s.res.Ratio("a", "c"); !ok || r != 2 {
		t.Errorf("a/c = %v, %v; want 2", r, ok)
	}
	if !strings.Contains(c.fig.Note, "1 runs failed: boom") || c.fig.Err != "" {
		t.Errorf("c: %+v", c.fig)
	}
}
