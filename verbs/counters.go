package verbs

import (
	"slices"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// RXECounters are the counters Linux's rxe keeps (rxe_hw_counters.c), in
// its order: DeviceCounters lists them first, as `rdma statistic show`
// does for an rxe device. One of rxe's is missing: ack_deferred (rxe's
// completer deferring to a tasklet; softnic's engine handles every
// response in the pass that received it). sent_pkts and rcvd_pkts count
// IB packets at the transport, send_err frames the link could not send,
// link_downed the port's moves to DOWN (Device.SetLinkUp).
var RXECounters = []string{"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err",
	"send_rnr_err", "rcvd_seq_err", "retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err",
	"send_err", "link_downed", "rdma_sends", "rdma_recvs"}

// DeviceCounters returns the device's counters by name: rxe's first
// (RXECounters), then softnic's own: the rest of the engines'
// (ibv.Counters, summed over engines), the received frames by
// outcome (rx_good, rx_bad_icrc, the malformed ones by reason), the
// link's (the XDP program's verdicts xdp_*, the AF_XDP rings' xsk_*), QP1's
// (gsi_*) and the connection manager's (cm_*). Each call reads them
// afresh; nil on a device reached through a daemon, whose counters are the
// daemon's (softnic stat).
func (d *Device) DeviceCounters() []counters.Counter { return d.ops.DeviceCounters() }

// QPCounters returns the counters of QP qpn by name (rxe's names where
// rxe has the counter, as DeviceCounters), and false when the device has
// no such QP (or is reached through a daemon).
func (d *Device) QPCounters(qpn uint32) ([]counters.Counter, bool) {
	return d.ops.QPCounters(qpn)
}

// QPCounterRefs returns every QP's number and live counters, in QPN order
// (nil on a device reached through a daemon): for a monitor that reads
// many QPs, such as the daemon's metrics.
func (d *Device) QPCounterRefs() []ibv.QPCountersRef {
	return d.ops.QPCounterRefs()
}

// rxeFirst orders cs with RXECounters first, in their order, the others
// after in the order they came.
func rxeFirst(cs []counters.Counter) []counters.Counter {
	rank := func(name string) int {
		if i := slices.Index(RXECounters, name); i >= 0 {
			return i
		}
		return len(RXECounters)
	}
	slices.SortStableFunc(cs, func(a, b counters.Counter) int { return rank(a.Name) - rank(b.Name) })
	return cs
}
