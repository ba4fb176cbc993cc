package roce

import (
	"net/netip"

	"github.com/softnic/softnic/ibtransport"
)

// GIDFromAddr returns the RoCEv2 GID of an IP address: the IPv6 address
// itself, or the IPv4 address mapped into IPv6 (::ffff:a.b.c.d).
func GIDFromAddr(a netip.Addr) ibtransport.GID { return a.As16() }

// AddrFromGID returns the IP address a RoCEv2 GID stands for; IPv4-mapped
// GIDs give IPv4 addresses.
func AddrFromGID(g ibtransport.GID) netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsIPv4GID reports whether g is an IPv4-mapped GID.
func IsIPv4GID(g ibtransport.GID) bool { return netip.AddrFrom16(g).Is4In6() }
