package roce

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/softnic/softnic/ibtransport"
)

// UDPPort is the IANA-assigned UDP destination port of RoCEv2.
const UDPPort = 4791

const (
	ethHeaderLen  = 14
	vlanTagLen    = 4
	ipv4HeaderLen = 20
	ipv6HeaderLen = 40
	udpHeaderLen  = 8

	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	etherTypeVLAN = 0x8100
	ipProtoUDP    = 17
)

// Errors from ParseFrame. ErrNotRoCE marks frames that are simply something
// else (ARP, TCP, another UDP port); the others mark RoCEv2 frames that are
// malformed or damaged. They are sentinels so the receive path can count
// them without allocating.
var (
	ErrNotRoCE       = errors.New("roce: not a RoCEv2 frame")
	ErrTruncated     = errors.New("roce: frame truncated")
	ErrBadIPHeader   = errors.New("roce: bad IP header (version, length or checksum)")
	ErrIPOptions     = errors.New("roce: IPv4 options are not allowed on RoCEv2")
	ErrFragment      = errors.New("roce: fragmented IP packet")
	ErrBadUDPLength  = errors.New("roce: UDP length does not match the IP payload")
	ErrBadICRC       = errors.New("roce: ICRC mismatch")
	ErrAddressFamily = errors.New("roce: source and destination address families differ")
)

// Frame is a parsed RoCEv2 frame. IB aliases the parsed buffer.
type Frame struct {
	DstMAC, SrcMAC [6]byte
	VLAN           uint16 // VLAN ID and priority (the whole TCI) when HasVLAN
	HasVLAN        bool
	Src, Dst       netip.Addr
	TrafficClass   uint8
	HopLimit       uint8
	FlowLabel      uint32
	SrcPort        uint16
	// IPOffset is where the IP header starts in the frame.
	IPOffset int
	// IB is the IB packet: BTH through the pad bytes, without the ICRC.
	IB []byte
	// ICRC is the ICRC the frame carries.
	ICRC uint32
}

// SrcGID returns the source address as a GID.
func (f *Frame) SrcGID() ibtransport.GID { return GIDFromAddr(f.Src) }

// DstGID returns the destination address as a GID.
func (f *Frame) DstGID() ibtransport.GID { return GIDFromAddr(f.Dst) }

// ParseFrame parses the Ethernet frame b (without FCS) into f and verifies
// its ICRC. It returns ErrNotRoCE for frames that are not RoCEv2, and another
// of the package's errors for RoCEv2 frames that are malformed. f's fields
// are valid, as far as they were parsed, even when the ICRC is bad, so a
// tool can still show the frame.
func ParseFrame(b []byte, f *Frame) error {
	*f = Frame{}
	if len(b) < ethHeaderLen {
		return ErrTruncated
	}
	copy(f.DstMAC[:], b[0:6])
	copy(f.SrcMAC[:], b[6:12])
	off := 12
	etherType := binary.BigEndian.Uint16(b[off:])
	off += 2
	if etherType == etherTypeVLAN {
		if len(b) < off+vlanTagLen {
			return ErrTruncated
		}
		f.HasVLAN = true
		f.VLAN = binary.BigEndian.Uint16(b[off:])
		etherType = binary.BigEndian.Uint16(b[off+2:])
		off += vlanTagLen
	}
	f.IPOffset = off
	var udpLen int
	switch etherType {
	case etherTypeIPv4:
		ip := b[off:]
		if len(ip) < ipv4HeaderLen {
			return ErrTruncated
		}
		if ip[0]>>4 != 4 || ip[0]&0xf < 5 {
			return ErrBadIPHeader
		}
		if ip[9] != ipProtoUDP {
			return ErrNotRoCE
		}
		if ip[0]&0xf != 5 {
			return ErrIPOptions
		}
		total := int(binary.BigEndian.Uint16(ip[2:]))
		if total < ipv4HeaderLen {
			return ErrBadIPHeader
		}
		if total > len(ip) {
			return ErrTruncated
		}
		if frag := binary.BigEndian.Uint16(ip[6:]); frag&0x3fff != 0 { // MF flag or offset
			return ErrFragment
		}
		if ipChecksum(ip[:ipv4HeaderLen]) != 0 {
			return ErrBadIPHeader
		}
		f.TrafficClass = ip[1]
		f.HopLimit = ip[8]
		f.Src = netip.AddrFrom4([4]byte(ip[12:16]))
		f.Dst = netip.AddrFrom4([4]byte(ip[16:20]))
		// Ethernet pads short frames; the IP length says where data ends.
		b = b[:off+total]
		off += ipv4HeaderLen
		udpLen = total - ipv4HeaderLen
	case etherTypeIPv6:
		ip := b[off:]
		if len(ip) < ipv6HeaderLen {
			return ErrTruncated
		}
		if ip[0]>>4 != 6 {
			return ErrBadIPHeader
		}
		if ip[6] != ipProtoUDP {
			// Extension headers are not used by RoCEv2 senders.
			return ErrNotRoCE
		}
		payload := int(binary.BigEndian.Uint16(ip[4:]))
		if ipv6HeaderLen+payload > len(ip) {
			return ErrTruncated
		}
		vtf := binary.BigEndian.Uint32(ip[0:])
		f.TrafficClass = uint8(vtf >> 20)
		f.FlowLabel = vtf & 0xfffff
		f.HopLimit = ip[7]
		f.Src = netip.AddrFrom16([16]byte(ip[8:24]))
		f.Dst = netip.AddrFrom16([16]byte(ip[24:40]))
		b = b[:off+ipv6HeaderLen+payload]
		off += ipv6HeaderLen
		udpLen = payload
	default:
		return ErrNotRoCE
	}
	if udpLen < udpHeaderLen {
		return ErrTruncated
	}
	udp := b[off:]
	if binary.BigEndian.Uint16(udp[2:]) != UDPPort {
		return ErrNotRoCE
	}
	f.SrcPort = binary.BigEndian.Uint16(udp[0:])
	if int(binary.BigEndian.Uint16(udp[4:])) != udpLen {
		return ErrBadUDPLength
	}
	if udpLen < udpHeaderLen+ibtransport.BTHLen+ibtransport.ICRCLen {
		return ErrTruncated
	}
	ib := udp[udpHeaderLen:udpLen]
	f.IB = ib[: len(ib)-ibtransport.ICRCLen : len(ib)-ibtransport.ICRCLen]
	f.ICRC = binary.LittleEndian.Uint32(ib[len(ib)-ibtransport.ICRCLen:])
	if ICRC(b[f.IPOffset:]) != f.ICRC {
		return ErrBadICRC
	}
	return nil
}

// Encap is the encapsulation of the frames sent on one path: the addresses
// and the per-path IP fields. A queue pair keeps one and reuses it for every
// packet.
type Encap struct {
	SrcMAC, DstMAC [6]byte
	VLAN           uint16 // whole TCI, used when HasVLAN
	HasVLAN        bool
	Src, Dst       netip.Addr // both IPv4 or both IPv6
	TrafficClass   uint8
	HopLimit       uint8
	FlowLabel      uint32
	SrcPort        uint16
}

// HeaderLen returns the number of bytes before the BTH: Ethernet, the
// optional VLAN tag, IP and UDP.
func (e *Encap) HeaderLen() int {
	n := ethHeaderLen + udpHeaderLen
	if e.HasVLAN {
		n += vlanTagLen
	}
	if e.Src.Is4() {
		n += ipv4HeaderLen
	} else {
		n += ipv6HeaderLen
	}
	return n
}

// FrameLen returns the length of the frame around an IB packet of ibLen
// bytes (BTH through pad).
func (e *Encap) FrameLen(ibLen int) int { return e.HeaderLen() + ibLen + ibtransport.ICRCLen }

// Finish completes a frame whose IB packet (BTH through pad, ibLen bytes) has
// been written at frame[e.HeaderLen():]: it writes the Ethernet, IP and UDP
// headers in front and the ICRC behind, and returns the frame's length.
// frame must have room for FrameLen(ibLen) bytes.
//
// Like Linux rxe, IPv4 frames carry DF and a zero UDP checksum (the ICRC
// protects the data); IPv6 frames also carry a zero UDP checksum, which RoCEv2
// receivers accept.
func (e *Encap) Finish(frame []byte, ibLen int) (int, error) {
	if e.Src.Is4() != e.Dst.Is4() || !e.Src.IsValid() || !e.Dst.IsValid() {
		return 0, ErrAddressFamily
	}
	total := e.FrameLen(ibLen)
	if len(frame) < total {
		return 0, ErrTruncated
	}
	frame = frame[:total]
	copy(frame[0:6], e.DstMAC[:])
	copy(frame[6:12], e.SrcMAC[:])
	off := 12
	if e.HasVLAN {
		binary.BigEndian.PutUint16(frame[off:], etherTypeVLAN)
		binary.BigEndian.PutUint16(frame[off+2:], e.VLAN)
		off += vlanTagLen
	}
	udpLen := udpHeaderLen + ibLen + ibtransport.ICRCLen
	ipOff := off + 2
	if e.Src.Is4() {
		binary.BigEndian.PutUint16(frame[off:], etherTypeIPv4)
		ip := frame[ipOff : ipOff+ipv4HeaderLen]
		ip[0] = 0x45
		ip[1] = e.TrafficClass
		binary.BigEndian.PutUint16(ip[2:], uint16(ipv4HeaderLen+udpLen))
		binary.BigEndian.PutUint16(ip[4:], 0)      // identification: unused with DF
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		ip[8] = e.HopLimit
		ip[9] = ipProtoUDP
		ip[10], ip[11] = 0, 0
		src, dst := e.Src.As4(), e.Dst.As4()
		copy(ip[12:16], src[:])
		copy(ip[16:20], dst[:])
		binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
		off = ipOff + ipv4HeaderLen
	} else {
		binary.BigEndian.PutUint16(frame[off:], etherTypeIPv6)
		ip := frame[ipOff : ipOff+ipv6HeaderLen]
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(e.TrafficClass)<<20|e.FlowLabel&0xfffff)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6] = ipProtoUDP
		ip[7] = e.HopLimit
		src, dst := e.Src.As16(), e.Dst.As16()
		copy(ip[8:24], src[:])
		copy(ip[24:40], dst[:])
		off = ipOff + ipv6HeaderLen
	}
	udp := frame[off : off+udpHeaderLen]
	binary.BigEndian.PutUint16(udp[0:], e.SrcPort)
	binary.BigEndian.PutUint16(udp[2:], UDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	udp[6], udp[7] = 0, 0
	putICRC(frame[ipOff:])
	return total, nil
}

// ipChecksum returns the Internet checksum of h; over a header that holds
// its own checksum it returns 0 when the header is intact.
func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
