package perftest

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/softnic/softnic/verbs"
)

// GIDIndexError is the error of a GID index (-x, pingpong's -g) that
// holds no GID: it lists the indexes that do, with their addresses, as
// show_gids would, since the fix is to pick one of them.
type GIDIndexError struct {
	Index  int
	Device string
	Table  []verbs.GID
}

func (e *GIDIndexError) Error() string {
	if len(e.Table) == 0 {
		return fmt.Sprintf("GID index %d: %s has no GID: give the interface an IP address (ip addr add ADDR dev IFACE)", e.Index, e.Device)
	}
	var valid []string
	for i, g := range e.Table {
		a := netip.AddrFrom16(g)
		kind := "IPv6"
		if a.Is4In6() {
			kind = "IPv4 " + a.Unmap().String()
		}
		valid = append(valid, fmt.Sprintf("%d (%v, %s)", i, a, kind))
	}
	return fmt.Sprintf("GID index %d: %s has no GID there; valid GID indexes: %s", e.Index, e.Device, strings.Join(valid, ", "))
}

// CheckGIDIndex returns nil when entry index of dev's GID table holds a
// GID, else a GIDIndexError naming the device name.
func CheckGIDIndex(dev Device, name string, index int) error {
	if _, err := dev.Verbs.GID(index); err == nil {
		return nil
	}
	return &GIDIndexError{Index: index, Device: name, Table: dev.Verbs.GIDTable()}
}
