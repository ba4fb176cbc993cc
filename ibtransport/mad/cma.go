package mad

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// CMAHeaderLen is the length of the rdma_cm header in a REQ's private data.
const CMAHeaderLen = 36

// CMAUserDataLen is the room a REQ leaves for an rdma_cm application's
// private data after the rdma_cm header.
const CMAUserDataLen = REQPrivateDataLen - CMAHeaderLen

// CMAVersion is the only rdma_cm header version.
const CMAVersion = 0

// Errors from CMAHeader.Check.
var (
	ErrBadCMAVersion = errors.New("mad: unsupported rdma_cm header version")
	ErrBadIPVersion  = errors.New("mad: rdma_cm header IP version is neither 4 nor 6")
)

// CMAHeader is the header librdmacm's kernel side (cma.c) puts at the start
// of a REQ's private data for the IP port spaces; the application's private
// data follows it.
//
//	byte 0      version (0)
//	byte 1      IP version(7:4) reserved(3:0)
//	byte 2-3    source port
//	byte 4-19   source address
//	byte 20-35  destination address
//
// An IPv4 address sits in the last 4 bytes of its 16, after 12 zero bytes
// (not the ::ffff: mapping of GIDs).
type CMAHeader []byte

// Version returns the header version.
func (c CMAHeader) Version() uint8 { return c[0] }

// SetVersion sets the header version.
func (c CMAHeader) SetVersion(v uint8) { c[0] = v }

// IPVersion returns 4 or 6 in a valid header.
func (c CMAHeader) IPVersion() uint8 { return c[1] >> 4 }

// SetIPVersion sets the IP version nibble.
func (c CMAHeader) SetIPVersion(v uint8) { c[1] = c[1]&0x0f | v<<4 }

// SrcPort returns the active side's port.
func (c CMAHeader) SrcPort() uint16 { return binary.BigEndian.Uint16(c[2:]) }

// SetSrcPort sets the active side's port.
func (c CMAHeader) SetSrcPort(p uint16) { binary.BigEndian.PutUint16(c[2:], p) }

// SrcAddr returns the active side's address, read as the IP version says.
func (c CMAHeader) SrcAddr() netip.Addr { return c.addr(4) }

// DstAddr returns the passive side's address.
func (c CMAHeader) DstAddr() netip.Addr { return c.addr(20) }

func (c CMAHeader) addr(off int) netip.Addr {
	if c.IPVersion() == 4 {
		return netip.AddrFrom4([4]byte(c[off+12 : off+16]))
	}
	return netip.AddrFrom16([16]byte(c[off : off+16]))
}

// SetAddrs writes the IP version and both addresses; src and dst must be of
// the same family.
func (c CMAHeader) SetAddrs(src, dst netip.Addr) {
	v := uint8(6)
	if src.Is4() {
		v = 4
	}
	c.SetIPVersion(v)
	putAddr(c[4:20], src)
	putAddr(c[20:36], dst)
}

func putAddr(b []byte, a netip.Addr) {
	clear(b)
	if a.Is4() {
		a4 := a.As4()
		copy(b[12:], a4[:])
		return
	}
	a16 := a.As16()
	copy(b, a16[:])
}

// Check reports whether the header is one this package can read.
func (c CMAHeader) Check() error {
	if c.Version() != CMAVersion {
		return ErrBadCMAVersion
	}
	if v := c.IPVersion(); v != 4 && v != 6 {
		return ErrBadIPVersion
	}
	return nil
}

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space).
type PortSpace uint16

// The port spaces of librdmacm.
const (
	PortSpaceIPoIB PortSpace = 0x0002
	PortSpaceTCP   PortSpace = 0x0106
	PortSpaceUDP   PortSpace = 0x0111
	PortSpaceIB    PortSpace = 0x013f
)

// ServiceID returns the IB CM service ID that rdma_cm listens on for a port
// in a port space.
func ServiceID(ps PortSpace, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// SplitServiceID returns the port space and port of an rdma_cm service ID;
// ok is false when id has bits above them, so it is no rdma_cm service ID.
func SplitServiceID(id uint64) (ps PortSpace, port uint16, ok bool) {
	return PortSpace(id >> 16), uint16(id), id>>32 == 0
}
