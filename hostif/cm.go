package hostif

import "net/netip"

// CMGetEventRequest takes the next event of Channel; EAGAIN when there is
// none. The connection manager's other bodies are provider/hostif.h's
// (ztypes_hostif.go); the provider sends this one as a bare u32.
type CMGetEventRequest struct{ Channel uint32 }

// CMAddr encodes a for the CM's bodies (none: all zero).
func CMAddr(a netip.Addr) [16]byte {
	if !a.IsValid() {
		return [16]byte{}
	}
	return netip.AddrFrom16(a.As16()).As16()
}

// CMAddrPort decodes an address of the CM's bodies, IPv4 unmapped;
// all zero with port 0 is none.
func CMAddrPort(b [16]byte, port uint16) netip.AddrPort {
	if b == ([16]byte{}) && port == 0 {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(netip.AddrFrom16(b).Unmap(), port)
}
