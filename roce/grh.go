package roce

import (
	"github.com/softnic/softnic/ibtransport/ibv"
)

// GRH is what ParseGRH reads from the GRH at the start of a UD receive
// buffer: the addressing of the datagram as it came.
type GRH struct {
	// Version is the IP version of the header the GRH holds, 4 or 6.
	Version uint8
	// SGID and DGID are the datagram's source and destination addresses.
	SGID, DGID   ibv.GID
	TrafficClass uint8 // IPv4: the TOS byte
	HopLimit     uint8 // IPv4: the TTL
	FlowLabel    uint32
}

// ParseGRH reads grh, the GRHLen bytes at the start of a UD receive
// buffer, as libibverbs reads it (ibv_init_ah_from_wc): an IPv6 header
// unless the last 20 bytes are an IPv4 header without options and with a
// valid checksum; when the first byte does not say IPv6, an IPv4 header
// if the last 20 bytes say version 4. ok is false when grh is short or
// holds neither.
func ParseGRH(grh []byte) (h GRH, ok bool) {
	if len(grh) < ibv.GRHLen {
		return h, false
	}
	grh = grh[:ibv.GRHLen]
	ip6 := ipv6Header(grh)
	ip4 := ipv4Header(grh[ibv.GRHLen-ipv4HeaderLen:])
	switch {
	case ip6.Version() != 6 && ip4.Version() != 4:
		return h, false
	case ip6.Version() != 6,
		ip4[ipv4VersionIHL] == 4<<4|ipv4HeaderLen/4 && ip4.ChecksumValid():
		h.Version = 4
		h.SGID, h.DGID = GIDFromAddr(ip4.Src()), GIDFromAddr(ip4.Dst())
		h.TrafficClass, h.HopLimit = ip4.TOS(), ip4.TTL()
	default:
		h.Version = 6
		h.SGID, h.DGID = GIDFromAddr(ip6.Src()), GIDFromAddr(ip6.Dst())
		h.TrafficClass, h.HopLimit, h.FlowLabel = ip6.TrafficClass(), ip6.HopLimit(), ip6.FlowLabel()
	}
	return h, true
}
