package main

import (
	"bytes"
	"errors"
	"fmt"
	"image/png"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	require.NoError(t, err)
	require.Equal(t, bwResult{Size: 65536, Iters: 5000, Peak: 5.16, Avg: 3.18, MsgRate: 0.006075}, bw, "parseBW")
	lat, err := parseLat(latOutput)
	require.NoError(t, err)
	require.Equal(t, []float64{252.59, 7890.08, 11933.17, 11.86}, []float64{lat.Typical, lat.P99, lat.P999, lat.Min}, "parseLat typical, p99, p99.9, min")
	// A run with an overflowing deviation (Debian's ib_write_lat, loaded machine).
	lat, err = parseLat(strings.Replace(latOutput, "1544.46", "-nan", 1))
	require.NoError(t, err)
	require.Equal(t, 252.59, lat.Typical)
	require.True(t, math.IsNaN(lat.Stdev))
	b, err := parseBlast(blastOutput)
	require.NoError(t, err)
	require.Equal(t, []float64{138, 890107, 445272}, []float64{float64(b.Size), float64(b.Received), b.FramesPerSecond}, "parseBlast size, received, frames/s")
	pp, err := parsePingPong(pingOutput)
	require.NoError(t, err)
	require.Equal(t, []float64{82, 5000, 1, 1.58, 23.96, 1.51, 2.74},
		[]float64{float64(pp.Size), float64(pp.Rounds), float64(pp.Lost), pp.Median, pp.P99, pp.Min, pp.Avg}, "parsePingPong size, rounds, lost, median, p99, min, avg")
	_, err = parsePingPong(strings.Replace(pingOutput, " 5000 ", " 0 ", 1))
	require.Error(t, err, "parsePingPong accepted a run without round trips")
	_, err = parsePingPong("xdpblast: ping-pong of 82-byte frames: 30 of 40 round trips lost\n")
	require.Error(t, err, "parsePingPong accepted output without a result line")
	_, err = parseBW("softnic perf: connection refused\n")
	require.Error(t, err, "parseBW accepted output without a report")
	_, err = parseLat(strings.Replace(latOutput, "252.59", "x", 1))
	require.Error(t, err, "parseLat accepted a malformed number")
	_, err = parseBlast(strings.Replace(blastOutput, "890107", "0", 1))
	require.Error(t, err, "parseBlast accepted a run that received nothing")
}

func TestFrameSizes(t *testing.T) {
	require.Equal(t, []int{4154, 1082, 138, 82}, []int{bulkFrame(4096), bulkFrame(1024), smallWriteFrame, latWriteFrame},
		"bulk frames at IB MTU 4096 and 1024, 64 B and 8 B WRITE frames")
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
			assert.Equalf(t, measured, o.Measured, "%s measured: %+v", tg.Name, o)
			assert.Equalf(t, met, o.Met, "%s met: %+v", tg.Name, o)
			if measured {
				assert.Equalf(t, value, o.Value, "%s value", tg.Name)
			}
			return
		}
		assert.Failf(t, "no target", "no target for %s", key)
	}
	check("softnic/write_bw/4096", true, false, 0.5)
	check("softnic/write_lat/median", false, false, 0)
	check("softnic/qpmem", true, true, 12)
	tcp := s.res.Evaluate(Target{Key: "softnic/write_bw/4096", Ref: "kernel/tcp/9000", Bound: 1})
	assert.Truef(t, tcp.Met, "against TCP: %+v", tcp)
	assert.Equal(t, 1.25, tcp.Value, "against TCP")

	md := s.markdown(time.Minute)
	for _, want := range []string{"| 0.50 | 1.25 |", "| xdp ping-pong | 1.60 µs |  | 0.40 |", "| send_lat | 12.0 µs | 7.50 | 3.00 |", "**not measured**", `boom \| x`, "| memory per idle QP ≤ 16 KiB | 12.0 | yes |",
		"not measured: softnic/msgrate not run"} {
		assert.Contains(t, md, want, "table")
	}
	img, err := s.chart()
	require.NoError(t, err)
	_, err = png.Decode(bytes.NewReader(img))
	require.NoError(t, err, "chart is not a PNG")
}

func TestParseIperf3(t *testing.T) {
	v, err := parseIperf3([]byte(`{"end":{"sum_received":{"bits_per_second":6.5e9}}}`), nil)
	require.NoError(t, err)
	require.Equal(t, 6.5, v)
	// iperf3 -J may exit 0 after failing to connect: the JSON error counts.
	_, err = parseIperf3([]byte(`{"start":{},"end":{},"error":"unable to connect to server: Connection refused"}`), nil)
	require.ErrorContains(t, err, "Connection refused", "error report accepted")
	_, err = parseIperf3([]byte(`{"end":{}}`), nil)
	require.Error(t, err, "report without received bytes accepted")
}

func TestMedianBy(t *testing.T) {
	id := func(v float64) float64 { return v }
	require.Equal(t, 2.0, medianBy([]float64{3, 1, 2}, id), "median of 3,1,2")
	require.Equal(t, 2.0, medianBy([]float64{4, 1, 3, 2}, id), "median of 4,1,3,2 (lower middle)")
	require.Equal(t, 7.0, medianBy([]float64{7}, id), "median of 7")
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
	require.Equal(t, []float64{3, 3}, []float64{a.fig.Value, b.fig.Value}, "medians")
	// Round by round a/b is 2, 2, 1: the median is 2, not 3/3.
	r, ok := s.res.Ratio("a", "b")
	require.True(t, ok, "paired ratio a/b")
	require.Equal(t, 2.0, r, "paired ratio a/b")
	// c timed out in its first round and was not run again.
	require.Contains(t, c.fig.Err, "timed out", "c")
	_, ok = s.res.Ratio("a", "c")
	require.False(t, ok, "ratio to a failed figure")
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
	require.Equal(t, []float64{4, 3, 1}, []float64{a.fig.Value, b.fig.Value, c.fig.Value}, "medians")
	assert.Contains(t, a.fig.Note, "median of 8.00, 2.00, 9.00, 3.00, 4.00; median run: run 5")
	// a/b round by round: 2, 1, 3, 3, 0.5 -> 2 (not 4/3).
	r, ok := s.res.Ratio("a", "b")
	if assert.True(t, ok, "a/b") {
		assert.Equal(t, 2.0, r, "a/b")
	}
	// a/c over the four rounds c ran: 2, 3, 1, 4 -> lower middle 2.
	r, ok = s.res.Ratio("a", "c")
	if assert.True(t, ok, "a/c") {
		assert.Equal(t, 2.0, r, "a/c")
	}
	assert.Contains(t, c.fig.Note, "1 runs failed: boom", "c")
	assert.Empty(t, c.fig.Err, "c")
}
