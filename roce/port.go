package roce

import "sync/atomic"

// port is the state of the device's one port, which follows its link's
// carrier as an Ethernet RDMA adapter's does (rxe's port follows its
// netdev): whoever watches the interface reports it (SetLinkUp). A port
// that is down still sends and receives what its link lets through; it
// is what programs are told (ibv_query_port, IBV_EVENT_PORT_ERR).
type port struct {
	down atomic.Bool
	ctr  PortCounters
}

// PortCounters count the port's state changes.
type PortCounters struct {
	// LinkDowned counts the port's moves from ACTIVE to DOWN (rxe's
	// link_downed).
	LinkDowned atomic.Uint64 `rdma:"link_downed"`
}

// SetLinkUp records the link's operational state and reports whether
// the port's state changed: a port going down counts in link_downed.
func (d *Device) SetLinkUp(up bool) (changed bool) {
	if d.port.down.Swap(!up) == !up {
		return false
	}
	if !up {
		d.port.ctr.LinkDowned.Add(1)
	}
	return true
}

// LinkUp reports whether the port is ACTIVE: its link was up when last
// reported (SetLinkUp), or was never reported down.
func (d *Device) LinkUp() bool { return !d.port.down.Load() }
