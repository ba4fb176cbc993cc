package xdplink

import "github.com/softnic/softnic/counters"

// AppendCounters implements roce.CounterLink: the XDP program's verdicts
// (xdp_steered, xdp_pass_*), the link's own counts (link_*), and the AF_XDP
// sockets' software and kernel ring counters summed over the sockets
// (xsk_rx_dropped, xsk_rx_ring_full, ...). A socket whose statistics
// cannot be read adds what its own counters hold.
func (l *Link) AppendCounters(dst []counters.Counter) []counters.Counter {
	st, _ := l.Stats()
	return appendStats(dst, &st)
}

// appendStats names st's counters for AppendCounters.
func appendStats(dst []counters.Counter, st *Stats) []counters.Counter {
	dst = counters.Append(dst, "xdp_", &st.Program)
	dst = counters.Append(dst, "link_", st)
	var socks []counters.Counter
	for i := range st.Sockets {
		socks = counters.Sum(socks, counters.Append(nil, "xsk_", &st.Sockets[i]))
	}
	return append(dst, socks...)
}
