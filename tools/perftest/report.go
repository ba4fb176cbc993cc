package perftest

import (
	"math"
	"slices"

	"github.com/softnic/softnic/tools/oob"
)

// BWTimes are a bandwidth run's timestamps in nanoseconds on one monotonic
// clock, as perftest's tposted and tcompleted arrays in cycles: Posted[i]
// when work request i was posted, Completed[i] when the completion
// covering it arrived (filled at the indexes perftest fills: every CQMod-th
// and the last). With NoPeak only Posted[0] (start) and Completed[0] (end)
// matter.
type BWTimes struct {
	Posted    []int64
	Completed []int64
	// Messages is how many messages the figures cover when not all of
	// them (a duration run counts those completed in its sample window);
	// zero means every message.
	Messages uint64
}

const nsPerSec = 1e9

// formatFactor is perftest's bytes per reporting unit: MiB for MB/sec
// (0x100000) and 125000000 bytes for Gb/sec.
func formatFactor(gbits bool) float64 {
	if gbits {
		return 125000000
	}
	return 0x100000
}

// BWReport computes a bandwidth report as print_report_bw does for
// non-duplex iteration runs: the average from the first post to the last
// completion, and the peak as the best rate over any stretch from a post i
// to a completion j, both in MB/sec (2^20 bytes) or Gb/sec.
// n is the number of messages (iterations times QPs).
func BWReport(p *Params, size uint64, n int, t BWTimes) oob.BWReport {
	ff := formatFactor(p.ReportGbits)
	rep := oob.BWReport{Size: size, Iters: uint64(n)}
	if n == 0 || len(t.Posted) == 0 || len(t.Completed) == 0 {
		return rep
	}
	last := n - 1
	if p.NoPeak || len(t.Completed) < n {
		last = 0
	}
	total := float64(t.Completed[last] - t.Posted[0])
	if total <= 0 {
		total = 1
	}
	rep.BWAvg = float64(size) * float64(n) * nsPerSec / (total * ff)
	rep.MsgRate = float64(n) * nsPerSec / (total * 1e6)
	if p.NoPeak || len(t.Posted) < n || len(t.Completed) < n {
		return rep
	}
	cqMod := max(p.CQMod, 1)
	best := math.Inf(1)
	try := func(i, j int) {
		if d := float64(t.Completed[j]-t.Posted[i]) / float64(j-i+1); d < best {
			best = d
		}
	}
	for i := 0; i < n; i++ {
		for j := roundUp(i+1, cqMod) - 1; j < n; j += cqMod {
			try(i, j)
		}
		if n%cqMod != 0 {
			try(i, n-1)
		}
	}
	if best <= 0 {
		best = 1
	}
	rep.BWPeak = float64(size) * nsPerSec / (best * ff)
	return rep
}

func roundUp(v, a int) int {
	if v%a == 0 {
		return v
	}
	return a * (v/a + 1)
}

// LatReport is one line of a latency table, in microseconds.
type LatReport struct {
	Size     uint64
	Iters    uint64
	TMin     float64
	TMax     float64
	TTypical float64
	TAvg     float64
	TStdev   float64
	P99      float64
	P999     float64
	// Unsorted are the samples in microseconds in the order measured, and
	// Sorted the kept ones in ascending order (perftest's -U and -H).
	Unsorted []float64
	Sorted   []float64
}

// latMeasureTail is LAT_MEASURE_TAIL: the largest samples perftest drops.
const latMeasureTail = 2

// LatencyReport computes a latency line as print_report_lat does: the
// samples are the gaps between consecutive posts (each gap is one round
// trip for write and send, whose figures are halved, and one operation for
// read and atomic); sorted; the two largest dropped; t_typical the median;
// t_max the largest remaining; the standard deviation summed from
// differences truncated to whole microseconds, as perftest's int temporaries
// do. posted are nanosecond timestamps, at least 4.
func LatencyReport(p *Params, size uint64, posted []int64) LatReport {
	rep := LatReport{Size: size, Iters: uint64(len(posted))}
	n := len(posted) - 1
	if n < latMeasureTail+1 {
		return rep
	}
	rtt := 2.0
	if v := p.Verb(); v == VerbRead || v == VerbAtomic {
		rtt = 1
	}
	q := 1000 * rtt // ns to usec, and halved round trips
	delta := make([]int64, n)
	for i := range delta {
		delta[i] = posted[i+1] - posted[i]
	}
	if p.ReportUnsorted {
		rep.Unsorted = make([]float64, n)
		for i, d := range delta {
			rep.Unsorted[i] = float64(d) / q
		}
	}
	slices.Sort(delta)
	m := n - latMeasureTail
	var median int64
	if (m-1)%2 != 0 {
		median = (delta[m/2] + delta[m/2-1]) / 2
	} else {
		median = delta[m/2]
	}
	var sum float64
	for i := 0; i < m; i++ {
		sum += float64(delta[i]) / q
	}
	avg := sum / float64(m)
	var varSum float64
	for i := 0; i < m; i++ {
		d := int(avg - float64(delta[i])/q)
		varSum += float64(d * d)
	}
	if p.ReportHistogram {
		rep.Sorted = make([]float64, m)
		for i := range rep.Sorted {
			rep.Sorted[i] = float64(delta[i]) / q
		}
	}
	i99 := int(math.Ceil(float64(m) * 0.99))
	i999 := int(math.Ceil(float64(m) * 0.999))
	rep.TMin = float64(delta[0]) / q
	rep.TMax = float64(delta[m]) / q
	rep.TTypical = float64(median) / q
	rep.TAvg = avg
	rep.TStdev = math.Sqrt(varSum / float64(m))
	rep.P99 = float64(delta[min(i99, n-1)]) / q
	rep.P999 = float64(delta[min(i999, n-1)]) / q
	return rep
}
