package roce

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// UDPPort is the IANA-assigned UDP destination port of RoCEv2.
const UDPPort = 4791

// Errors from ParseFrame. ErrNotRoCE marks frames that are simply something
// else (ARP, TCP, another UDP port); the others mark RoCEv2 frames that are
// malformed or damaged. A frame shorter than its headers say gives
// header.ErrTruncated, as a short IB packet does, so that one
// errors.Is test covers both layers. They are sentinels so the receive path
// can count them without allocating.
var (
	ErrNotRoCE       = errors.New("roce: not a RoCEv2 frame")
	ErrBadIPHeader   = errors.New("roce: bad IP header (version, length or checksum)")
	ErrIPOptions     = errors.New("roce: IPv4 options are not allowed on RoCEv2")
	ErrFragment      = errors.New("roce: fragmented IP packet")
	ErrBadUDPLength  = errors.New("roce: UDP length does not match the IP payload")
	ErrBadICRC       = errors.New("roce: ICRC mismatch")
	ErrAddressFamily = errors.New("roce: source and destination address families differ")
)

// Frame is a parsed RoCEv2 frame. IPHeader and IB alias the parsed buffer.
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
	// IPHeader is the IP header: 20 bytes of IPv4 or 40 of IPv6.
	IPHeader []byte
	// IB is the IB packet: BTH through the pad bytes, without the ICRC.
	IB []byte
	// ICRC is the ICRC the frame carries.
	ICRC uint32
	// RxeFlushICRC says the frame is an RC FLUSH whose ICRC is Linux
	// rdma_rxe's variant (RxeFlushICRC), not IBA's: ParseFrameRxeFlush
	// took it.
	RxeFlushICRC bool
}

// SrcGID returns the source address as a GID.
func (f *Frame) SrcGID() ibv.GID { return GIDFromAddr(f.Src) }

// DstGID returns the destination address as a GID.
func (f *Frame) DstGID() ibv.GID { return GIDFromAddr(f.Dst) }

// ParseFrame parses the Ethernet frame b (without FCS) into f and verifies
// its ICRC. It returns ErrNotRoCE for frames that are not RoCEv2, and
// header.ErrTruncated or another of the package's errors for RoCEv2
// frames that are malformed. f's fields are valid, as far as they were
// parsed, even when the ICRC is bad, so a tool can still show the frame.
//
// It takes one layer a step: Ethernet and the optional 802.1Q tag, IPv4 or
// IPv6, UDP, then the ICRC over the IP packet.
func ParseFrame(b []byte, f *Frame) error { return parseFrame(b, f, false) }

// ParseFrameRxeFlush is ParseFrame for a device in rxe's FLUSH mode
// (DeviceConfig.RxeFlushICRC): an RC FLUSH whose ICRC is not IBA's but
// rdma_rxe's variant (RxeFlushICRC) is taken too, with f.RxeFlushICRC set.
// Every other frame is checked exactly as ParseFrame checks it.
func ParseFrameRxeFlush(b []byte, f *Frame) error { return parseFrame(b, f, true) }

func parseFrame(b []byte, f *Frame, rxeFlush bool) error {
	*f = Frame{}
	etherType, err := parseEthernet(b, f)
	if err != nil {
		return err
	}
	var pkt, udp []byte // the IP packet without Ethernet padding, its UDP part
	switch etherType {
	case etherTypeIPv4:
		pkt, udp, err = parseIPv4(ipv4Header(b[f.IPOffset:]), f)
	case etherTypeIPv6:
		pkt, udp, err = parseIPv6(ipv6Header(b[f.IPOffset:]), f)
	default:
		return ErrNotRoCE
	}
	if err != nil {
		return err
	}
	if err := parseUDP(udp, f); err != nil {
		return err
	}
	if crc := ICRC(pkt); crc != f.ICRC {
		// Only a FLUSH in the mode costs a second CRC, over 32 bytes.
		if !rxeFlush || header.Opcode(f.IB[0]) != header.OpRCFlush || rxeFlushICRC(pkt, crc) != f.ICRC {
			return ErrBadICRC
		}
		f.RxeFlushICRC = true
	}
	return nil
}

// parseEthernet reads the Ethernet header and the 802.1Q tag if there is
// one, sets f's MAC, VLAN and IPOffset fields, and returns the EtherType of
// the payload.
func parseEthernet(b []byte, f *Frame) (uint16, error) {
	if len(b) < ethHeaderLen {
		return 0, header.ErrTruncated
	}
	eth := etherHeader(b)
	f.DstMAC, f.SrcMAC = eth.Dst(), eth.Src()
	etherType := eth.EtherType()
	off := ethHeaderLen
	if etherType == etherTypeVLAN {
		if len(b) < off+vlanTagLen {
			return 0, header.ErrTruncated
		}
		tag := vlanTag(b[off:])
		f.HasVLAN, f.VLAN = true, tag.TCI()
		etherType = tag.EtherType()
		off += vlanTagLen
	}
	f.IPOffset = off
	return etherType, nil
}

// parseIPv4 checks the IPv4 header that starts ip, the rest of the frame,
// and sets f's IP fields, IPHeader among them. It returns the IP packet,
// which ends where the header's length says (Ethernet pads short frames),
// and its UDP part.
func parseIPv4(ip ipv4Header, f *Frame) (pkt, udp []byte, err error) {
	if err := ip.check(); err != nil {
		return nil, nil, err
	}
	f.TrafficClass = ip.TOS()
	f.HopLimit = ip.TTL()
	f.Src, f.Dst = ip.Src(), ip.Dst()
	f.IPHeader = ip[:ipv4HeaderLen]
	pkt = ip[:ip.TotalLen()]
	return pkt, pkt[ipv4HeaderLen:], nil
}

// parseIPv6 is parseIPv4 for IPv6.
func parseIPv6(ip ipv6Header, f *Frame) (pkt, udp []byte, err error) {
	if err := ip.check(); err != nil {
		return nil, nil, err
	}
	f.TrafficClass = ip.TrafficClass()
	f.FlowLabel = ip.FlowLabel()
	f.HopLimit = ip.HopLimit()
	f.Src, f.Dst = ip.Src(), ip.Dst()
	f.IPHeader = ip[:ipv6HeaderLen]
	pkt = ip[:ipv6HeaderLen+ip.PayloadLen()]
	return pkt, pkt[ipv6HeaderLen:], nil
}

// parseUDP checks the UDP datagram that is the IP payload b and sets f's
// source port and its views of the IB packet and the ICRC.
func parseUDP(b []byte, f *Frame) error {
	if len(b) < udpHeaderLen {
		return header.ErrTruncated
	}
	udp := udpHeader(b)
	if udp.DstPort() != UDPPort {
		return ErrNotRoCE
	}
	f.SrcPort = udp.SrcPort()
	if udp.Length() != len(b) {
		return ErrBadUDPLength
	}
	if len(b) < udpHeaderLen+header.BTHLen+header.ICRCLen {
		return header.ErrTruncated
	}
	ib := b[udpHeaderLen:]
	end := len(ib) - header.ICRCLen
	f.IB = ib[:end:end]
	f.ICRC = binary.LittleEndian.Uint32(ib[end:])
	return nil
}
