package roce

import (
	"net/netip"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// GIDFromAddr returns the RoCEv2 GID of an IP address: the IPv6 address
// itself, or the IPv4 address mapped into IPv6 (::ffff:a.b.c.d).
func GIDFromAddr(a netip.Addr) ibv.GID { return a.As16() }

// AddrFromGID returns the IP address a RoCEv2 GID stands for; IPv4-mapped
// GIDs give IPv4 addresses.
func AddrFromGID(g ibv.GID) netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsIPv4GID reports whether g is an IPv4-mapped GID.
func IsIPv4GID(g ibv.GID) bool { return netip.AddrFrom16(g).Is4In6() }

// DefaultGID returns the link-local IPv6 address derived from mac: the
// modified EUI-64 interface identifier under fe80::/64. Linux puts it first
// in a RoCE device's GID table.
func DefaultGID(mac [6]byte) netip.Addr {
	a := [16]byte{0: 0xfe, 1: 0x80}
	a[8], a[9], a[10] = mac[0]^0x02, mac[1], mac[2]
	a[11], a[12] = 0xff, 0xfe
	a[13], a[14], a[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(a)
}
