package roce

import (
	"encoding/binary"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// flowKey is what flow specs look at in a frame: the Ethernet header (and
// one VLAN tag), the IPv4 or IPv6 header, and the TCP or UDP ports. A
// field of a header the frame does not have (or has cut short) is absent,
// and a spec on it never matches.
type flowKey struct {
	dst, src  [6]byte
	etherType uint16 // after the VLAN tag, if any
	vlan      uint16 // the tag's TCI; 0 without a tag
	ip        ibv.IPFilter
	ipVer     uint8 // 4, 6, or 0: no (whole) IP header
	l4        bool  // the ports were read
	ports     ibv.PortFilter
}

const (
	etherType8021AD = 0x88a8
	protoTCP        = 6
	protoUDP        = ipProtoUDP
)

// parseFlowKey reads b's headers into k; it reports false for a frame
// shorter than an Ethernet header. It reads only inside b, whatever b
// holds.
func parseFlowKey(b []byte, k *flowKey) bool {
	*k = flowKey{}
	if len(b) < ethHeaderLen {
		return false
	}
	copy(k.dst[:], b[0:6])
	copy(k.src[:], b[6:12])
	k.etherType = binary.BigEndian.Uint16(b[12:14])
	off := ethHeaderLen
	if k.etherType == etherTypeVLAN || k.etherType == etherType8021AD {
		if len(b) < off+vlanTagLen {
			return true
		}
		k.vlan = binary.BigEndian.Uint16(b[off : off+2])
		k.etherType = binary.BigEndian.Uint16(b[off+2 : off+4])
		off += vlanTagLen
	}
	l3 := b[off:]
	var l4 []byte
	switch k.etherType {
	case etherTypeIPv4:
		if len(l3) < 20 || l3[0]>>4 != 4 {
			return true
		}
		ihl := int(l3[0]&0xf) * 4
		k.ipVer = 4
		copy(k.ip.Src[:4], l3[12:16])
		copy(k.ip.Dst[:4], l3[16:20])
		k.ip.Proto, k.ip.TOS, k.ip.TTL = l3[9], l3[1], l3[8]
		k.ip.Flags = l3[6] >> 5
		fragment := binary.BigEndian.Uint16(l3[6:8])&0x1fff != 0
		if ihl >= 20 && len(l3) >= ihl && !fragment {
			l4 = l3[ihl:]
		}
	case etherTypeIPv6:
		if len(l3) < ipv6HeaderLen || l3[0]>>4 != 6 {
			return true
		}
		k.ipVer = 6
		vtf := binary.BigEndian.Uint32(l3[0:4])
		k.ip.TOS = uint8(vtf >> 20)
		k.ip.FlowLabel = vtf & 0xfffff
		k.ip.Proto, k.ip.TTL = l3[6], l3[7]
		copy(k.ip.Src[:], l3[8:24])
		copy(k.ip.Dst[:], l3[24:40])
		l4 = l3[ipv6HeaderLen:]
	}
	if (k.ip.Proto == protoTCP || k.ip.Proto == protoUDP) && len(l4) >= 4 {
		k.l4 = true
		k.ports.SrcPort = binary.BigEndian.Uint16(l4[0:2])
		k.ports.DstPort = binary.BigEndian.Uint16(l4[2:4])
	}
	return true
}

// matchSpec reports whether the frame k describes matches spec s.
func matchSpec(k *flowKey, s *ibv.FlowSpec) bool {
	switch s.Type {
	case ibv.FlowSpecEth:
		return matchEth(k, &s.Eth, &s.EthMask)
	case ibv.FlowSpecIPv4, ibv.FlowSpecIPv4Ext:
		return k.ipVer == 4 && matchIP(&k.ip, &s.IP, &s.IPMask)
	case ibv.FlowSpecIPv6:
		return k.ipVer == 6 && matchIP(&k.ip, &s.IP, &s.IPMask)
	case ibv.FlowSpecTCP:
		return k.l4 && k.ip.Proto == protoTCP && matchPorts(&k.ports, &s.Port, &s.PortMask)
	case ibv.FlowSpecUDP:
		return k.l4 && k.ip.Proto == protoUDP && matchPorts(&k.ports, &s.Port, &s.PortMask)
	}
	return false
}

func matchBytes(got, want, mask []byte) bool {
	for i := range mask {
		if got[i]&mask[i] != want[i]&mask[i] {
			return false
		}
	}
	return true
}

func matchEth(k *flowKey, v, m *ibv.EthFilter) bool {
	return matchBytes(k.dst[:], v.DstMAC[:], m.DstMAC[:]) && matchBytes(k.src[:], v.SrcMAC[:], m.SrcMAC[:]) &&
		k.etherType&m.EtherType == v.EtherType&m.EtherType && k.vlan&m.VLANTag == v.VLANTag&m.VLANTag
}

func matchIP(k, v, m *ibv.IPFilter) bool {
	return matchBytes(k.Src[:], v.Src[:], m.Src[:]) && matchBytes(k.Dst[:], v.Dst[:], m.Dst[:]) &&
		k.Proto&m.Proto == v.Proto&m.Proto && k.TOS&m.TOS == v.TOS&m.TOS && k.TTL&m.TTL == v.TTL&m.TTL &&
		k.Flags&m.Flags == v.Flags&m.Flags && k.FlowLabel&m.FlowLabel == v.FlowLabel&m.FlowLabel
}

func matchPorts(k, v, m *ibv.PortFilter) bool {
	return k.SrcPort&m.SrcPort == v.SrcPort&m.SrcPort && k.DstPort&m.DstPort == v.DstPort&m.DstPort
}
