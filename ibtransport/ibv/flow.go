package ibv

import (
	"fmt"
	"net/netip"
)

// Flow steering (ibv_create_flow): a flow sends the frames that match all
// of its specs to a raw packet QP. Each spec compares masked fields of one
// header: a field whose mask is zero matches anything, as libibverbs'
// ibv_flow_spec_* filters do.

// FlowSpecType is the header a spec matches (ibv_flow_spec_type's values).
type FlowSpecType uint32

// Flow spec types, as libibverbs numbers them.
const (
	FlowSpecEth     FlowSpecType = 0x20
	FlowSpecIPv4    FlowSpecType = 0x30
	FlowSpecIPv6    FlowSpecType = 0x31
	FlowSpecIPv4Ext FlowSpecType = 0x32
	FlowSpecTCP     FlowSpecType = 0x40
	FlowSpecUDP     FlowSpecType = 0x41
)

// FlowAttrType is what a flow catches (ibv_flow_attr_type).
type FlowAttrType uint32

// Flow kinds.
const (
	// FlowAttrNormal: the frames its specs match.
	FlowAttrNormal FlowAttrType = 0
	// FlowAttrAllDefault: every frame to the port no other flow takes.
	FlowAttrAllDefault FlowAttrType = 1
	// FlowAttrMcDefault: every multicast frame no other flow takes.
	FlowAttrMcDefault FlowAttrType = 2
	// FlowAttrSniffer: every frame, beside where it goes anyway.
	FlowAttrSniffer FlowAttrType = 3
)

// EthFilter is ibv_flow_eth_filter.
type EthFilter struct {
	DstMAC, SrcMAC [6]byte
	EtherType      uint16
	VLANTag        uint16
}

// IPFilter is the IPv4 and IPv6 filters (ibv_flow_ipv4_filter,
// ibv_flow_ipv4_ext_filter, ibv_flow_ipv6_filter) in one: an IPv4 spec
// leaves the IPv6 fields zero.
type IPFilter struct {
	Src, Dst  [16]byte // IPv4: the first 4 bytes
	Proto     uint8    // protocol or next header
	TOS       uint8    // TOS or traffic class
	TTL       uint8    // TTL or hop limit
	Flags     uint8    // IPv4 only
	FlowLabel uint32   // IPv6 only
}

// PortFilter is ibv_flow_tcp_udp_filter.
type PortFilter struct{ DstPort, SrcPort uint16 }

// FlowSpec is one spec of a flow: the value and mask of its type's filter.
type FlowSpec struct {
	Type           FlowSpecType
	Eth, EthMask   EthFilter
	IP, IPMask     IPFilter
	Port, PortMask PortFilter
}

// FlowAttr describes a flow (ibv_flow_attr and its specs).
type FlowAttr struct {
	Type     FlowAttrType
	Priority uint16
	Port     uint8
	Flags    uint32
	Specs    []FlowSpec
}

// MaxFlowSpecs is the most specs one flow has.
const MaxFlowSpecs = 8

// MaxFlowPriority is the largest priority a flow may have (mlx5's user
// priorities fit in 12 bits).
const MaxFlowPriority = 0xfff

// Check refuses what no device steers: an unknown kind or spec type, too
// many specs, a priority past MaxFlowPriority, flags, a port other than 1.
// Every error wraps ErrInvalidArgument.
func (a *FlowAttr) Check() error {
	switch {
	case a.Type > FlowAttrSniffer:
		return fmt.Errorf("create flow: type %d: %w", a.Type, ErrInvalidArgument)
	case len(a.Specs) > MaxFlowSpecs:
		return fmt.Errorf("create flow: %d specs, at most %d: %w", len(a.Specs), MaxFlowSpecs, ErrInvalidArgument)
	case a.Priority > MaxFlowPriority:
		return fmt.Errorf("create flow: priority %d: %w", a.Priority, ErrInvalidArgument)
	case a.Port != 1:
		return fmt.Errorf("create flow: port %d: %w", a.Port, ErrInvalidArgument)
	case a.Flags != 0:
		return fmt.Errorf("create flow: flags %#x: %w", a.Flags, ErrInvalidArgument)
	}
	for i := range a.Specs {
		switch a.Specs[i].Type {
		case FlowSpecEth, FlowSpecIPv4, FlowSpecIPv4Ext, FlowSpecIPv6, FlowSpecTCP, FlowSpecUDP:
		default:
			return fmt.Errorf("create flow: spec type %#x: %w", a.Specs[i].Type, ErrInvalidArgument)
		}
	}
	return nil
}

// IPv4Filter returns an IPFilter that matches IPv4 src and dst (either
// may be the zero Addr, then with a zero mask: any).
func IPv4Filter(src, dst netip.Addr) (v, mask IPFilter) {
	if src.Is4() {
		s := src.As4()
		copy(v.Src[:], s[:])
		copy(mask.Src[:4], []byte{0xff, 0xff, 0xff, 0xff})
	}
	if dst.Is4() {
		d := dst.As4()
		copy(v.Dst[:], d[:])
		copy(mask.Dst[:4], []byte{0xff, 0xff, 0xff, 0xff})
	}
	return v, mask
}
