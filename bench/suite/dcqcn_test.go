package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// synthRun samples two senders at constant rates (bits/s of frames, in
// 4096-byte IB packets) every 100 ms for 10 s, with a sampler stall
// between stall and stall+2.5 s if stall > 0.
func synthRun(r0, r1 float64, stall time.Duration) *dcqcnRun {
	r := &dcqcnRun{dropsBefore: 100}
	const pkt = 4096
	for k := 0; k <= 100; k++ {
		at := time.Duration(k) * dcqcnSample
		if stall > 0 && at > stall && at < stall+2500*time.Millisecond {
			continue
		}
		var s dcqcnSampleAt
		s.at = at
		for i, rate := range []float64{r0, r1} {
			frames := rate * at.Seconds() / 8 / (pkt + frameOverhead)
			s.pkts[i] = uint64(math.Round(frames))
			s.bytes[i] = s.pkts[i] * pkt
		}
		s.drops = 100 + uint64(k)
		s.backlog = uint64(k%10) * 12500 // 0 to 0.9 ms at 1 Gb/s
		r.samples = append(r.samples, s)
	}
	return r
}

func TestDCQCNFigures(t *testing.T) {
	f := synthRun(0.5e9, 0.4e9, 0).figures()
	require.Equal(t, 8, f.windows, "1 s windows from 2 s to 10 s")
	assert.InDelta(t, 0.9, f.utilMean, 0.002)
	assert.InDelta(t, 0.9, f.utilMin, 0.002)
	jain := 0.9 * 0.9 / (2 * (0.25 + 0.16))
	assert.InDelta(t, jain, f.jainMean, 0.002)
	assert.Equal(t, uint64(100), f.drops)
	assert.Equal(t, uint64(80), f.dropsLate)
	assert.InDelta(t, 0.9, f.delayMax, 1e-9)

	g := synthRun(0.5e9, 0.5e9, 4*time.Second).figures()
	assert.Positive(t, g.gaps, "windows inside the stall have no samples")
	assert.InDelta(t, 1.0, g.jainMin, 0.002)
	assert.False(t, math.IsNaN(g.utilMean))

	out := strings.Join([]string{
		" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]",
		" 65536      3457             0.00               0.45   		   0.000864",
		"  Retransmits                  8",
		"  Timeouts                     2",
		"  RPCNPHandled                 65241",
	}, "\n")
	assert.Equal(t, 0.45, bwAverage(out))
	assert.Equal(t, uint64(2), statValue(out, "Timeouts"))
	assert.Equal(t, uint64(65241), statValue(out, "RPCNPHandled"))
	assert.Zero(t, statValue(out, "RPCNPIgnored"))
	assert.True(t, math.IsNaN(bwAverage("no figures")))
	assert.Contains(t, string(dcqcnChart([]*dcqcnRun{{name: "x", samples: synthRun(0.5e9, 0.4e9, 0).samples}})), "<polyline")
}

func TestSenderTrace(t *testing.T) {
	start := time.UnixMilli(1_000_000)
	p, ok := parseTraceLine("1000250 1500 2 7 1 900 0 5000 3 4 5 812/0x11 0/0x12", start)
	require.True(t, ok)
	assert.Equal(t, 250*time.Millisecond, p.at)
	assert.Equal(t, 1500*time.Microsecond, p.late)
	assert.Equal(t, senderPoint{at: p.at, late: p.late, timeouts: 2, restarts: 7, seqNAKs: 1, cnpHandled: 900, rxDrops: 12, rateMbps: 812, limited: true}, p)
	_, ok = parseTraceLine("# unix_ms late_us ...", start)
	assert.False(t, ok)
	_, ok = parseTraceLine("1000250 1500 2 7", start)
	assert.False(t, ok, "too few fields")
	p, ok = parseTraceLine("1000250 0 0 0 0 0 0 0 0 0 0", start)
	require.True(t, ok, "no QP (after the test)")
	assert.False(t, p.limited)

	// A run whose sender 1 timed out once between 3 and 4 s: the window
	// from 3 s has it, and the rate at its end.
	r := synthRun(0.5e9, 0.4e9, 0)
	for k := 0; k <= 100; k++ {
		pt := senderPoint{at: time.Duration(k) * dcqcnSample, rateMbps: 500}
		if pt.at >= 3500*time.Millisecond {
			pt.timeouts, pt.restarts = 1, 1
		}
		r.trace[0] = append(r.trace[0], pt)
	}
	ws := r.windows()
	require.Len(t, ws, 10)
	for i, w := range ws {
		want := uint64(0)
		if i == 3 {
			want = 1
		}
		assert.Equal(t, want, w.timeouts[0], "window %d", i)
		assert.Equal(t, uint64(500), w.dcqcn[0])
		assert.Equal(t, uint64(0), w.dcqcn[1], "no trace: no rate")
		assert.InDelta(t, 0.9, w.util, 0.01)
	}
	assert.Contains(t, r.windowTable(), "0.900")
}

func FuzzParseTraceLine(f *testing.F) {
	f.Add("1000250 1500 2 7 1 900 0 5000 3 4 5 812/0x11 0/0x12")
	f.Add("# unix_ms late_us")
	f.Add("18446744073709551615 18446744073709551615 0 0 0 0 0 0 0 0 0 x/y")
	f.Fuzz(func(t *testing.T, line string) {
		p, ok := parseTraceLine(line, time.UnixMilli(0))
		if !ok {
			assert.Zero(t, p.timeouts)
		}
	})
}

func TestDCQCNSettings(t *testing.T) {
	defer func(c, e string) { dcqcnCases, dcqcnExtra = c, e }(dcqcnCases, dcqcnExtra)
	dcqcnCases, dcqcnExtra = "even,mtu", "--softnic-rpg-hai-rate=5; --softnic-pacing-burst=1 "
	s, err := dcqcnSettings()
	require.NoError(t, err)
	var names []string
	for _, x := range s {
		names = append(names, x.name)
	}
	assert.Equal(t, []string{"with DCQCN", "without DCQCN", "DCQCN --softnic-rpg-hai-rate=5", "DCQCN --softnic-pacing-burst=1",
		"MTU 1024 + 4096, with DCQCN", "MTU 1024 + 4096, without DCQCN", "MTU 1024 + 4096, DCQCN --softnic-rpg-hai-rate=5"}, names)
	assert.Equal(t, [2][]string{{"-m", "1024", "--softnic-rpg-hai-rate=5"}, {"--softnic-rpg-hai-rate=5"}}, s[6].flags)
	assert.Equal(t, [2][]string{{"-m", "1024", "--softnic-rp-off"}, {"--softnic-rp-off"}}, s[5].flags)
	for _, x := range s {
		assert.Empty(t, x.daemon, "%s: the receiver as -dcqcn-daemon-flags says", x.name)
	}

	defer func(v string) { dcqcnMTUCNPInterval = v }(dcqcnMTUCNPInterval)
	dcqcnCases, dcqcnMTUCNPInterval = "mtu", "50us"
	s, err = dcqcnSettings()
	require.NoError(t, err)
	require.Len(t, s, 4)
	assert.Equal(t, "MTU 1024 + 4096, receiver's CNP interval 50us, DCQCN --softnic-rpg-hai-rate=5", s[3].name)
	assert.Equal(t, [2][]string{{"-m", "1024", "--softnic-rpg-hai-rate=5"}, {"--softnic-rpg-hai-rate=5"}}, s[3].flags)
	assert.Equal(t, []string{"--cnp-interval=50us"}, s[3].daemon)
	assert.Empty(t, s[2].daemon)
	dcqcnCases = "extra,bogus"
	_, err = dcqcnSettings()
	assert.Error(t, err)
	dcqcnCases, dcqcnExtra = "extra", ""
	_, err = dcqcnSettings()
	assert.Error(t, err)
}
