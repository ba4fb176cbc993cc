package roce

import (
	"encoding/binary"
	"net/netip"

	"github.com/softnic/softnic/ibtransport/header"
)

// The views below are typed byte slices over the headers around an IB
// packet, in the style of ibtransport's BTH and RETH: accessors read and
// write the wire fields at named offsets, and a check says whether a header
// may be read at all. Like those, they do no bounds checks of their own;
// ParseFrame checks the lengths before it makes a view.

// Header lengths, EtherTypes and the IP protocol number of UDP.
const (
	ethHeaderLen  = 14
	vlanTagLen    = 4
	ipv4HeaderLen = 20 // without options, which RoCEv2 does not use
	ipv6HeaderLen = 40
	udpHeaderLen  = 8

	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	etherTypeVLAN = 0x8100
	ipProtoUDP    = 17
)

// etherHeader is an Ethernet II header.
//
//	byte 0-5    destination MAC
//	byte 6-11   source MAC
//	byte 12-13  EtherType, or 0x8100 when an 802.1Q tag follows
type etherHeader []byte

const (
	ethDst  = 0
	ethSrc  = 6
	ethType = 12
)

// Dst returns the destination MAC address.
func (h etherHeader) Dst() [6]byte { return [6]byte(h[ethDst:]) }

// Src returns the source MAC address.
func (h etherHeader) Src() [6]byte { return [6]byte(h[ethSrc:]) }

// EtherType returns the EtherType (etherTypeVLAN for a tagged frame).
func (h etherHeader) EtherType() uint16 { return binary.BigEndian.Uint16(h[ethType:]) }

// encode writes the addresses and the EtherType.
func (h etherHeader) encode(dst, src [6]byte, etherType uint16) {
	h = h[:ethHeaderLen] // one bounds check for all the fields
	copy(h[ethDst:], dst[:])
	copy(h[ethSrc:], src[:])
	binary.BigEndian.PutUint16(h[ethType:], etherType)
}

// vlanTag is the rest of an 802.1Q tag, after the Ethernet header's 0x8100.
//
//	byte 0-1  TCI: priority(15:13) DEI(12) VLAN ID(11:0)
//	byte 2-3  EtherType of the payload
type vlanTag []byte

const (
	vlanTCI       = 0
	vlanEtherType = 2
)

// TCI returns the whole tag control information.
func (t vlanTag) TCI() uint16 { return binary.BigEndian.Uint16(t[vlanTCI:]) }

// EtherType returns the EtherType of the tagged payload.
func (t vlanTag) EtherType() uint16 { return binary.BigEndian.Uint16(t[vlanEtherType:]) }

// encode writes the TCI and the payload's EtherType.
func (t vlanTag) encode(tci, etherType uint16) {
	t = t[:vlanTagLen]
	binary.BigEndian.PutUint16(t[vlanTCI:], tci)
	binary.BigEndian.PutUint16(t[vlanEtherType:], etherType)
}

// ipv4Header is an IPv4 header.
//
//	byte 0      version(7:4) IHL(3:0), the header length in 4-byte words
//	byte 1      TOS (DSCP and ECN)
//	byte 2-3    total length
//	byte 4-5    identification
//	byte 6-7    flags(15:13) fragment offset(12:0)
//	byte 8      TTL
//	byte 9      protocol
//	byte 10-11  header checksum
//	byte 12-15  source address
//	byte 16-19  destination address
type ipv4Header []byte

const (
	ipv4VersionIHL = 0
	ipv4TOS        = 1
	ipv4TotalLen   = 2
	ipv4ID         = 4
	ipv4Flags      = 6
	ipv4TTL        = 8
	ipv4Protocol   = 9
	ipv4Checksum   = 10
	ipv4SrcAddr    = 12
	ipv4DstAddr    = 16

	ipv4FlagDF       = 0x4000
	ipv4FragmentMask = 0x3fff // MF flag and fragment offset
)

// Version returns the IP version field.
func (h ipv4Header) Version() uint8 { return h[ipv4VersionIHL] >> 4 }

// HeaderLen returns the header length in bytes, options included.
func (h ipv4Header) HeaderLen() int { return int(h[ipv4VersionIHL]&0xf) * 4 }

// TOS returns the type of service byte.
func (h ipv4Header) TOS() uint8 { return h[ipv4TOS] }

// TotalLen returns the length of the IP packet, header included.
func (h ipv4Header) TotalLen() int { return int(binary.BigEndian.Uint16(h[ipv4TotalLen:])) }

// IsFragment reports whether the packet is a fragment: MF set or a fragment
// offset.
func (h ipv4Header) IsFragment() bool {
	return binary.BigEndian.Uint16(h[ipv4Flags:])&ipv4FragmentMask != 0
}

// TTL returns the time to live.
func (h ipv4Header) TTL() uint8 { return h[ipv4TTL] }

// Protocol returns the protocol of the payload.
func (h ipv4Header) Protocol() uint8 { return h[ipv4Protocol] }

// Src returns the source address.
func (h ipv4Header) Src() netip.Addr { return netip.AddrFrom4([4]byte(h[ipv4SrcAddr:])) }

// Dst returns the destination address.
func (h ipv4Header) Dst() netip.Addr { return netip.AddrFrom4([4]byte(h[ipv4DstAddr:])) }

// ChecksumValid reports whether the header (without options) checksums to
// zero, as an intact one does.
func (h ipv4Header) ChecksumValid() bool { return ipChecksum(h[:ipv4HeaderLen]) == 0 }

// check says whether h, the rest of a received frame from the IPv4 header
// on, holds an IPv4 packet that ParseFrame reads on: it returns the error
// for the first thing wrong, in the order a receiver has to look, or nil.
func (h ipv4Header) check() error {
	avail := len(h)
	switch {
	case avail < ipv4HeaderLen:
		return header.ErrTruncated
	case h.Version() != 4 || h.HeaderLen() < ipv4HeaderLen:
		return ErrBadIPHeader
	case h.Protocol() != ipProtoUDP:
		return ErrNotRoCE
	case h.HeaderLen() != ipv4HeaderLen:
		return ErrIPOptions
	case h.TotalLen() < ipv4HeaderLen:
		return ErrBadIPHeader
	case h.TotalLen() > avail:
		return header.ErrTruncated
	case h.IsFragment():
		return ErrFragment
	case !h.ChecksumValid():
		return ErrBadIPHeader
	}
	return nil
}

// encode writes a header without options for a UDP packet of totalLen bytes
// with DF set (so no identification is needed), and a zero checksum for
// setChecksum to fill in.
func (h ipv4Header) encode(tos, ttl uint8, totalLen int, src, dst [4]byte) {
	h = h[:ipv4HeaderLen]
	h[ipv4VersionIHL] = 4<<4 | ipv4HeaderLen/4
	h[ipv4TOS] = tos
	binary.BigEndian.PutUint16(h[ipv4TotalLen:], uint16(totalLen))
	binary.BigEndian.PutUint16(h[ipv4ID:], 0)
	binary.BigEndian.PutUint16(h[ipv4Flags:], ipv4FlagDF)
	h[ipv4TTL] = ttl
	h[ipv4Protocol] = ipProtoUDP
	binary.BigEndian.PutUint16(h[ipv4Checksum:], 0)
	copy(h[ipv4SrcAddr:], src[:])
	copy(h[ipv4DstAddr:], dst[:])
}

// setChecksum computes the checksum of a header without options whose
// checksum field is zero, as encode leaves it, and stores it.
func (h ipv4Header) setChecksum() {
	h = h[:ipv4HeaderLen]
	binary.BigEndian.PutUint16(h[ipv4Checksum:], ipChecksum(h))
}

// ipChecksum returns the Internet checksum of h (a trailing odd byte is
// left out); over a header that holds its own checksum it returns 0 when
// the header is intact. It adds 32-bit words into a 64-bit sum and folds
// the carries at the end (RFC 1071), which gives the same one's complement
// sum as adding 16-bit words, in a quarter of the loads.
func ipChecksum(h []byte) uint16 {
	var sum uint64
	for len(h) >= 4 {
		sum += uint64(binary.BigEndian.Uint32(h))
		h = h[4:]
	}
	if len(h) >= 2 {
		sum += uint64(binary.BigEndian.Uint16(h))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// ipv6Header is an IPv6 header.
//
//	byte 0-3    version(31:28) traffic class(27:20) flow label(19:0)
//	byte 4-5    payload length
//	byte 6      next header
//	byte 7      hop limit
//	byte 8-23   source address
//	byte 24-39  destination address
type ipv6Header []byte

const (
	ipv6VersionTCFlow = 0
	ipv6PayloadLen    = 4
	ipv6NextHeader    = 6
	ipv6HopLimit      = 7
	ipv6SrcAddr       = 8
	ipv6DstAddr       = 24
)

func (h ipv6Header) versionTCFlow() uint32 { return binary.BigEndian.Uint32(h[ipv6VersionTCFlow:]) }

// Version returns the IP version field.
func (h ipv6Header) Version() uint8 { return h[ipv6VersionTCFlow] >> 4 }

// TrafficClass returns the traffic class.
func (h ipv6Header) TrafficClass() uint8 { return uint8(h.versionTCFlow() >> 20) }

// FlowLabel returns the 20-bit flow label.
func (h ipv6Header) FlowLabel() uint32 { return h.versionTCFlow() & 0xfffff }

// PayloadLen returns the length of what follows the header.
func (h ipv6Header) PayloadLen() int { return int(binary.BigEndian.Uint16(h[ipv6PayloadLen:])) }

// NextHeader returns the type of the header that follows.
func (h ipv6Header) NextHeader() uint8 { return h[ipv6NextHeader] }

// HopLimit returns the hop limit.
func (h ipv6Header) HopLimit() uint8 { return h[ipv6HopLimit] }

// Src returns the source address.
func (h ipv6Header) Src() netip.Addr { return netip.AddrFrom16([16]byte(h[ipv6SrcAddr:])) }

// Dst returns the destination address.
func (h ipv6Header) Dst() netip.Addr { return netip.AddrFrom16([16]byte(h[ipv6DstAddr:])) }

// check is ipv4Header.check for IPv6. Extension headers count as not
// RoCEv2: RoCEv2 senders do not use them.
func (h ipv6Header) check() error {
	avail := len(h)
	switch {
	case avail < ipv6HeaderLen:
		return header.ErrTruncated
	case h.Version() != 6:
		return ErrBadIPHeader
	case h.NextHeader() != ipProtoUDP:
		return ErrNotRoCE
	case ipv6HeaderLen+h.PayloadLen() > avail:
		return header.ErrTruncated
	}
	return nil
}

// encode writes a header for a UDP payload of payloadLen bytes.
func (h ipv6Header) encode(tc uint8, flow uint32, hopLimit uint8, payloadLen int, src, dst [16]byte) {
	h = h[:ipv6HeaderLen]
	binary.BigEndian.PutUint32(h[ipv6VersionTCFlow:], 6<<28|uint32(tc)<<20|flow&0xfffff)
	binary.BigEndian.PutUint16(h[ipv6PayloadLen:], uint16(payloadLen))
	h[ipv6NextHeader] = ipProtoUDP
	h[ipv6HopLimit] = hopLimit
	copy(h[ipv6SrcAddr:], src[:])
	copy(h[ipv6DstAddr:], dst[:])
}

// udpHeader is a UDP header.
//
//	byte 0-1  source port
//	byte 2-3  destination port
//	byte 4-5  length, header included
//	byte 6-7  checksum (0: none)
type udpHeader []byte

const (
	udpSrcPort  = 0
	udpDstPort  = 2
	udpLength   = 4
	udpChecksum = 6
)

// SrcPort returns the source port.
func (h udpHeader) SrcPort() uint16 { return binary.BigEndian.Uint16(h[udpSrcPort:]) }

// DstPort returns the destination port.
func (h udpHeader) DstPort() uint16 { return binary.BigEndian.Uint16(h[udpDstPort:]) }

// Length returns the length field.
func (h udpHeader) Length() int { return int(binary.BigEndian.Uint16(h[udpLength:])) }

// encode writes a header with no checksum: RoCEv2 relies on the ICRC.
func (h udpHeader) encode(srcPort, dstPort uint16, length int) {
	h = h[:udpHeaderLen]
	binary.BigEndian.PutUint16(h[udpSrcPort:], srcPort)
	binary.BigEndian.PutUint16(h[udpDstPort:], dstPort)
	binary.BigEndian.PutUint16(h[udpLength:], uint16(length))
	binary.BigEndian.PutUint16(h[udpChecksum:], 0)
}
