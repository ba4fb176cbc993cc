package ibv

import (
	"errors"
	"net/netip"
)

// GID is a 128-bit global identifier, as carried in the GRH. On RoCEv2 a GID
// is an IPv6 address or an IPv4 address mapped into IPv6 (::ffff:a.b.c.d).
type GID [16]byte

// ErrEmptyGID is the error of a query of a GID table entry that holds no
// GID (ibv_query_gid_ex's ENODATA): a device's table is longer than the
// addresses it has, as a kernel device's is.
var ErrEmptyGID = errors.New("ibv: empty GID table entry")

// String formats g as an IPv6 address, the way ibv_devinfo prints GIDs.
func (g GID) String() string { return netip.AddrFrom16(g).String() }
