package verbs

import (
	"net/netip"

	"github.com/softnic/softnic/roce"
)

// PortState is a port's state (enum ibv_port_state).
type PortState uint8

// The states a softnic port takes: ACTIVE while its link is up, DOWN
// while it has no carrier or is set down.
const (
	PortDown   PortState = 1
	PortActive PortState = 4
)

func (s PortState) String() string {
	switch s {
	case PortDown:
		return "PORT_DOWN"
	case PortActive:
		return "PORT_ACTIVE"
	}
	return "unknown port state"
}

// PortState returns the state of the device's port 1 (ibv_query_port's
// state). Through a daemon it asks the daemon, and says PortDown if it
// cannot.
func (d *Device) PortState() PortState { return d.ops.PortState() }

// SetLinkUp tells the device whether its link is up (carrier, and set
// up), as the program that watches the interface learns it
// (xdplink.WatchOperState): the port follows, and a change raises
// EventPortErr or EventPortActive and, going down, counts in
// link_downed, as rxe does when its netdev changes. It does nothing on a
// device reached through a daemon, whose port the daemon follows.
func (d *Device) SetLinkUp(up bool) {
	if !d.ops.SetLinkUp(up) {
		return
	}
	ev := Event{Type: EventPortErr, Port: 1}
	if up {
		ev.Type = EventPortActive
	}
	d.emit(ev)
}

// SetAddrs makes the GID table that of the interface's addresses addrs
// (xdplink.GIDTable order), as the kernel's GID cache follows a netdev's
// addresses: entries of addresses still there keep their index, those of
// removed ones become empty, new ones take the first empty entry
// (roce.Device.SetAddrs). A change raises EventGIDChange. It returns
// what changed; on a device reached through a daemon, which follows its
// interface itself, it does nothing.
func (d *Device) SetAddrs(addrs []netip.Addr) []roce.GIDChange {
	r := d.RoCE()
	if r == nil {
		return nil
	}
	ch := r.SetAddrs(addrs)
	if len(ch) > 0 {
		d.emit(Event{Type: EventGIDChange, Port: 1})
	}
	return ch
}
