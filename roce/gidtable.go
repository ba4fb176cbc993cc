package roce

import (
	"net/netip"
	"slices"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// gidTable is the device's GID table: entry i's address and GID, an
// invalid address and a zero GID for an empty entry. It is immutable: a
// change replaces it whole (Device.SetAddrs), behind an atomic pointer,
// so that the lanes read it on every frame without a lock.
type gidTable struct {
	addrs []netip.Addr
	gids  []ibv.GID
}

func newGIDTable(addrs []netip.Addr) *gidTable {
	t := &gidTable{}
	for _, a := range addrs {
		t.addrs = append(t.addrs, a.Unmap())
		t.gids = append(t.gids, GIDFromAddr(a))
	}
	return t
}

// index returns the index of the entry of gid, -1 if none has it.
func (t *gidTable) index(gid ibv.GID) int {
	for i := range t.gids {
		if t.gids[i] == gid && t.addrs[i].IsValid() {
			return i
		}
	}
	return -1
}

// GIDChange is an entry of the GID table that SetAddrs filled or
// emptied.
type GIDChange struct {
	Index int
	Addr  netip.Addr
	Added bool // else removed
}

// SetAddrs makes the GID table that of the addresses addrs, as the
// kernel's GID cache follows its netdev's addresses: the entry of an
// address still there keeps its index, a removed address's entry becomes
// empty, and a new address takes the first empty entry (or one past the
// end). It returns what changed, removals first. Paths made before keep
// their source address; a QP that names an emptied entry for a new path
// is refused.
func (d *Device) SetAddrs(addrs []netip.Addr) []GIDChange {
	d.gidMu.Lock()
	defer d.gidMu.Unlock()
	old := d.table.Load()
	want := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		if a.IsValid() {
			want[a.Unmap()] = true
		}
	}
	t := &gidTable{addrs: slices.Clone(old.addrs), gids: slices.Clone(old.gids)}
	var changes []GIDChange
	for i, a := range t.addrs {
		switch {
		case !a.IsValid():
		case want[a]:
			delete(want, a) // kept where it is
		default:
			changes = append(changes, GIDChange{Index: i, Addr: a})
			t.addrs[i], t.gids[i] = netip.Addr{}, ibv.GID{}
		}
	}
	for _, a := range addrs {
		a = a.Unmap()
		if !want[a] {
			continue
		}
		delete(want, a)
		i := slices.IndexFunc(t.addrs, func(e netip.Addr) bool { return !e.IsValid() })
		if i < 0 {
			i = len(t.addrs)
			t.addrs, t.gids = append(t.addrs, netip.Addr{}), append(t.gids, ibv.GID{})
		}
		t.addrs[i], t.gids[i] = a, GIDFromAddr(a)
		changes = append(changes, GIDChange{Index: i, Addr: a, Added: true})
	}
	// Empty entries at the end are the table's empty tail.
	for n := len(t.addrs); n > 0 && !t.addrs[n-1].IsValid(); n-- {
		t.addrs, t.gids = t.addrs[:n-1], t.gids[:n-1]
	}
	if len(changes) > 0 {
		d.table.Store(t)
	}
	return changes
}
