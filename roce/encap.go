package roce

import (
	"net/netip"

	"github.com/softnic/softnic/ibtransport/header"
)

// Encap is the encapsulation of the frames sent on one path: the addresses
// and the per-path IP fields. A queue pair keeps one and reuses it for every
// packet.
type Encap struct {
	SrcMAC, DstMAC [6]byte
	VLAN           uint16 // whole TCI, used when HasVLAN
	HasVLAN        bool
	Src, Dst       netip.Addr // both IPv4 or both IPv6
	TrafficClass   uint8
	// CNPTrafficClass is the traffic class of CNPs (BTH opcode 0x81) on
	// the path: they carry their own DSCP, as ConnectX sends them.
	CNPTrafficClass uint8
	HopLimit        uint8
	FlowLabel       uint32
	SrcPort         uint16
	// RxeFlushICRC gives RC FLUSH packets Linux rdma_rxe's ICRC instead
	// of IBA's (RxeFlushICRC; DeviceConfig.RxeFlushICRC).
	RxeFlushICRC bool
}

// HeaderLen returns the number of bytes before the BTH: Ethernet, the
// optional VLAN tag, IP and UDP.
func (e *Encap) HeaderLen() int { return e.ipOffset() + e.ipHeaderLen() + udpHeaderLen }

// ipOffset returns where the IP header starts in the frame.
func (e *Encap) ipOffset() int {
	if e.HasVLAN {
		return ethHeaderLen + vlanTagLen
	}
	return ethHeaderLen
}

func (e *Encap) ipHeaderLen() int {
	if e.Src.Is4() {
		return ipv4HeaderLen
	}
	return ipv6HeaderLen
}

// FrameLen returns the length of the frame around an IB packet of ibLen
// bytes (BTH through pad).
func (e *Encap) FrameLen(ibLen int) int { return e.HeaderLen() + ibLen + header.ICRCLen }

// Finish completes a frame whose IB packet (BTH through pad, ibLen bytes) has
// been written at frame[e.HeaderLen():]: it writes the Ethernet, IP and UDP
// headers in front and the ICRC behind, and returns the frame's length.
// frame must have room for FrameLen(ibLen) bytes.
//
// Like Linux rxe, IPv4 frames carry DF and a zero UDP checksum (the ICRC
// protects the data); IPv6 frames also carry a zero UDP checksum, which RoCEv2
// receivers accept.
func (e *Encap) Finish(frame []byte, ibLen int) (int, error) {
	is4 := e.Src.Is4()
	if is4 != e.Dst.Is4() || !e.Src.IsValid() || !e.Dst.IsValid() {
		return 0, ErrAddressFamily
	}
	ipOff, ipLen := e.ipOffset(), e.ipHeaderLen()
	udpLen := udpHeaderLen + ibLen + header.ICRCLen
	total := ipOff + ipLen + udpLen
	if len(frame) < total {
		return 0, header.ErrTruncated
	}
	frame = frame[:total]
	etherType := uint16(etherTypeIPv6)
	if is4 {
		etherType = etherTypeIPv4
	}
	if e.HasVLAN {
		etherHeader(frame).encode(e.DstMAC, e.SrcMAC, etherTypeVLAN)
		vlanTag(frame[ethHeaderLen:]).encode(e.VLAN, etherType)
	} else {
		etherHeader(frame).encode(e.DstMAC, e.SrcMAC, etherType)
	}
	ip := frame[ipOff:]
	tc := e.TrafficClass
	op := header.Opcode(frame[ipOff+ipLen+udpHeaderLen])
	if op == header.OpCNP {
		tc = e.CNPTrafficClass
	}
	e.writeIPHeader(ip, tc, udpLen)
	udpHeader(ip[ipLen:]).encode(e.SrcPort, UDPPort, udpLen)
	putICRC(ip, op, e.RxeFlushICRC)
	return total, nil
}

// writeIPHeader writes the IPv4 or IPv6 header, with traffic class tc, of
// a packet of udpLen bytes of UDP datagram at the start of ip.
func (e *Encap) writeIPHeader(ip []byte, tc uint8, udpLen int) {
	if e.Src.Is4() {
		ip4 := ipv4Header(ip)
		ip4.encode(tc, e.HopLimit, ipv4HeaderLen+udpLen, e.Src.As4(), e.Dst.As4())
		ip4.setChecksum()
		return
	}
	ipv6Header(ip).encode(tc, e.FlowLabel, e.HopLimit, udpLen, e.Src.As16(), e.Dst.As16())
}
