package hostif

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// ErrFlowUnsupported marks a flow spec of a type libibverbs has and
// softnic does not steer on (inner headers, tunnels, actions): the daemon
// answers EOPNOTSUPP, as a device without the capability does.
var ErrFlowUnsupported = errors.New("hostif: flow spec type not supported")

// The libibverbs filters' sizes: the least of val a spec's size covers.
const (
	ethFilterLen     = 16
	ipv4FilterLen    = 8
	ipv4ExtFilterLen = 12
	ipv6FilterLen    = 39
	portFilterLen    = 4
	flowSpecHeader   = 8 // ibv_flow_spec_hdr: type, size, padding
)

// DecodeFlow turns a create_flow request into the flow it describes,
// checking every spec's type and size. It reads nothing past the request
// and never panics, whatever the request holds.
func DecodeFlow(r *CreateFlowRequest) (ibv.FlowAttr, error) {
	a := ibv.FlowAttr{Type: ibv.FlowAttrType(r.Type), Priority: r.Priority, Port: r.Port, Flags: r.Flags}
	if int(r.NumSpecs) > len(r.Specs) {
		return a, fmt.Errorf("flow of %d specs: %w", r.NumSpecs, ibv.ErrInvalidArgument)
	}
	for i := range int(r.NumSpecs) {
		s, err := decodeSpec(&r.Specs[i])
		if err != nil {
			return a, fmt.Errorf("flow spec %d: %w", i, err)
		}
		a.Specs = append(a.Specs, s)
	}
	return a, a.Check()
}

func decodeSpec(w *FlowSpec) (ibv.FlowSpec, error) {
	s := ibv.FlowSpec{Type: ibv.FlowSpecType(w.Type)}
	var need int
	switch s.Type {
	case ibv.FlowSpecEth:
		need = ethFilterLen
		s.Eth, s.EthMask = ethFilter(w.Val[:]), ethFilter(w.Mask[:])
	case ibv.FlowSpecIPv4:
		need = ipv4FilterLen
		s.IP, s.IPMask = ipv4Filter(w.Val[:], false), ipv4Filter(w.Mask[:], false)
	case ibv.FlowSpecIPv4Ext:
		need = ipv4ExtFilterLen
		s.IP, s.IPMask = ipv4Filter(w.Val[:], true), ipv4Filter(w.Mask[:], true)
	case ibv.FlowSpecIPv6:
		need = ipv6FilterLen
		s.IP, s.IPMask = ipv6Filter(w.Val[:]), ipv6Filter(w.Mask[:])
	case ibv.FlowSpecTCP, ibv.FlowSpecUDP:
		need = portFilterLen
		s.Port, s.PortMask = portFilter(w.Val[:]), portFilter(w.Mask[:])
	default:
		return s, fmt.Errorf("type %#x: %w", w.Type, ErrFlowUnsupported)
	}
	// libibverbs' spec: its header and a value and a mask each as long
	// as the filter (the kernel takes a shorter, older filter too, but
	// no libibverbs lays one out).
	if int(w.Size) < flowSpecHeader+2*need {
		return s, fmt.Errorf("spec %#x of %d bytes: %w", w.Type, w.Size, ibv.ErrInvalidArgument)
	}
	return s, nil
}

func ethFilter(b []byte) ibv.EthFilter {
	var f ibv.EthFilter
	copy(f.DstMAC[:], b[0:6])
	copy(f.SrcMAC[:], b[6:12])
	f.EtherType = binary.BigEndian.Uint16(b[12:14])
	f.VLANTag = binary.BigEndian.Uint16(b[14:16])
	return f
}

// ipv4Filter reads ibv_flow_ipv4_filter, or with ext
// ibv_flow_ipv4_ext_filter: src_ip, dst_ip, then proto, tos, ttl, flags.
func ipv4Filter(b []byte, ext bool) ibv.IPFilter {
	var f ibv.IPFilter
	copy(f.Src[:4], b[0:4])
	copy(f.Dst[:4], b[4:8])
	if ext {
		f.Proto, f.TOS, f.TTL, f.Flags = b[8], b[9], b[10], b[11]
	}
	return f
}

// ipv6Filter reads ibv_flow_ipv6_filter: src_ip, dst_ip, flow_label,
// next_hdr, traffic_class, hop_limit.
func ipv6Filter(b []byte) ibv.IPFilter {
	var f ibv.IPFilter
	copy(f.Src[:], b[0:16])
	copy(f.Dst[:], b[16:32])
	f.FlowLabel = binary.BigEndian.Uint32(b[32:36])
	f.Proto, f.TOS, f.TTL = b[36], b[37], b[38]
	return f
}

func portFilter(b []byte) ibv.PortFilter {
	return ibv.PortFilter{DstPort: binary.BigEndian.Uint16(b[0:2]), SrcPort: binary.BigEndian.Uint16(b[2:4])}
}

// EncodeFlow lays out a create_flow request for qp's flow a, as the C
// provider does from a struct ibv_flow_attr.
func EncodeFlow(qp uint32, a *ibv.FlowAttr) (CreateFlowRequest, error) {
	r := CreateFlowRequest{QP: qp, Type: uint32(a.Type), Priority: a.Priority, Port: a.Port, Flags: a.Flags}
	if len(a.Specs) > len(r.Specs) {
		return r, fmt.Errorf("flow of %d specs: %w", len(a.Specs), ibv.ErrInvalidArgument)
	}
	r.NumSpecs = uint8(len(a.Specs))
	for i := range a.Specs {
		s, w := &a.Specs[i], &r.Specs[i]
		w.Type = uint32(s.Type)
		var n int
		switch s.Type {
		case ibv.FlowSpecEth:
			n = putEth(w.Val[:], &s.Eth)
			putEth(w.Mask[:], &s.EthMask)
		case ibv.FlowSpecIPv4, ibv.FlowSpecIPv4Ext:
			n = putIPv4(w.Val[:], &s.IP, s.Type == ibv.FlowSpecIPv4Ext)
			putIPv4(w.Mask[:], &s.IPMask, s.Type == ibv.FlowSpecIPv4Ext)
		case ibv.FlowSpecIPv6:
			n = putIPv6(w.Val[:], &s.IP)
			putIPv6(w.Mask[:], &s.IPMask)
		case ibv.FlowSpecTCP, ibv.FlowSpecUDP:
			n = putPorts(w.Val[:], &s.Port)
			putPorts(w.Mask[:], &s.PortMask)
		}
		w.Size = uint16(flowSpecHeader + 2*n)
	}
	return r, nil
}

func putEth(b []byte, f *ibv.EthFilter) int {
	copy(b[0:6], f.DstMAC[:])
	copy(b[6:12], f.SrcMAC[:])
	binary.BigEndian.PutUint16(b[12:14], f.EtherType)
	binary.BigEndian.PutUint16(b[14:16], f.VLANTag)
	return ethFilterLen
}

func putIPv4(b []byte, f *ibv.IPFilter, ext bool) int {
	copy(b[0:4], f.Src[:4])
	copy(b[4:8], f.Dst[:4])
	if !ext {
		return ipv4FilterLen
	}
	b[8], b[9], b[10], b[11] = f.Proto, f.TOS, f.TTL, f.Flags
	return ipv4ExtFilterLen
}

func putIPv6(b []byte, f *ibv.IPFilter) int {
	copy(b[0:16], f.Src[:])
	copy(b[16:32], f.Dst[:])
	binary.BigEndian.PutUint32(b[32:36], f.FlowLabel)
	b[36], b[37], b[38] = f.Proto, f.TOS, f.TTL
	return ipv6FilterLen + 1 // the C struct's padding
}

func putPorts(b []byte, f *ibv.PortFilter) int {
	binary.BigEndian.PutUint16(b[0:2], f.DstPort)
	binary.BigEndian.PutUint16(b[2:4], f.SrcPort)
	return portFilterLen
}
