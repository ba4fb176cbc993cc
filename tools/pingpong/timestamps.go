package pingpong

import (
	"fmt"
	"io"
)

// recvGaps is rc_pingpong's -t statistics (struct ts_params): the device
// clock's ticks between consecutive receive completions, from their
// completion timestamps (WC.Timestamp), which the engine takes as it makes
// each completion.
type recvGaps struct {
	mask          uint64 // completion_timestamp_mask: where the clock wraps
	prev          uint64
	havePrev      bool
	lo, hi, total uint64
	n             uint64
}

func newRecvGaps(mask uint64) recvGaps { return recvGaps{mask: mask, lo: 0xffffffff} }

// add counts a receive completion stamped ts.
func (g *recvGaps) add(ts uint64) {
	if g.havePrev {
		d := ts - g.prev
		if ts < g.prev { // the clock wrapped at mask
			d = g.mask - g.prev + ts + 1
		}
		g.hi, g.lo, g.total, g.n = max(g.hi, d), min(g.lo, d), g.total+d, g.n+1
	}
	g.prev, g.havePrev = ts, true
}

// report prints rc_pingpong's three -t lines.
func (g *recvGaps) report(out io.Writer) {
	fmt.Fprintf(out, "Max receive completion clock cycles = %d\n", g.hi)
	fmt.Fprintf(out, "Min receive completion clock cycles = %d\n", g.lo)
	fmt.Fprintf(out, "Average receive completion clock cycles = %f\n", float64(g.total)/float64(g.n))
}
