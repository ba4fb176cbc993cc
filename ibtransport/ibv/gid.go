package ibv

import "net/netip"

// GID is a 128-bit global identifier, as carried in the GRH. On RoCEv2 a GID
// is an IPv6 address or an IPv4 address mapped into IPv6 (::ffff:a.b.c.d).
type GID [16]byte

// String formats g as an IPv6 address, the way ibv_devinfo prints GIDs.
func (g GID) String() string { return netip.AddrFrom16(g).String() }
