package roce

import "github.com/softnic/softnic/counters"

// CounterLink is a Link that keeps counters of its own (an XDP program's
// verdicts, socket ring drops, injected faults); a Device's AppendCounters
// adds them to its own.
type CounterLink interface {
	Link
	// AppendCounters appends the link's counters to dst. Any goroutine may
	// call it while the link runs.
	AppendCounters(dst []counters.Counter) []counters.Counter
}

// AppendCounters appends the device's frame counters (summed over its
// engines' lanes), its port's, and its link's, if it counts, to dst.
func (d *Device) AppendCounters(dst []counters.Counter) []counters.Counter {
	dst = counters.Append(dst, "", d.Counters())
	dst = counters.Append(dst, "", &d.port.ctr)
	if l, ok := d.link.(CounterLink); ok {
		dst = l.AppendCounters(dst)
	}
	return dst
}
