package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxFlowRules is how many flow rules the program holds (flow_rules).
const MaxFlowRules = 64

// ErrTooManyFlowRules is returned by SetFlowRules past MaxFlowRules.
var ErrTooManyFlowRules = errors.New("more flow rules than the XDP program holds")

// FlowRule makes the program redirect the frames it matches into the
// queue's AF_XDP socket, besides RoCEv2: every field, under its mask,
// equals the frame's (a zero mask: anything). IP addresses are as on
// the wire, an IPv4 one in the first 4 bytes; IPVersion 4 or 6 asks for
// that IP, 0 for none; NeedPorts asks for a TCP or UDP header.
type FlowRule struct {
	DstMAC, DstMACMask       [6]byte
	EtherType, EtherTypeMask uint16
	SrcIP, SrcIPMask         [16]byte
	DstIP, DstIPMask         [16]byte
	Proto, ProtoMask         uint8
	SrcPort, SrcPortMask     uint16
	DstPort, DstPortMask     uint16
	NeedPorts                bool
	IPVersion                uint8
}

// SetFlowRules replaces the program's flow rules with rules. The rules
// are written before their count, so a frame meanwhile sees either
// set's first rules.
func (p *Program) SetFlowRules(rules []FlowRule) error {
	return setFlowRules(&p.objs, rules)
}

func setFlowRules(o *softnicObjects, rules []FlowRule) error {
	if len(rules) > MaxFlowRules {
		return fmt.Errorf("set %d flow rules: %w", len(rules), ErrTooManyFlowRules)
	}
	for i := range rules {
		if err := o.FlowRules.Put(uint32(i), rules[i].kernel()); err != nil {
			return fmt.Errorf("set flow rule %d: %w", i, err)
		}
	}
	if err := o.FlowCount.Put(uint32(0), uint32(len(rules))); err != nil {
		return fmt.Errorf("set flow rule count: %w", err)
	}
	return nil
}

// kernel lays the rule out as the program reads it: bytes as on the wire.
func (r *FlowRule) kernel() softnicFlowRule {
	var k softnicFlowRule
	copy(k.Dst[:], r.DstMAC[:])
	copy(k.DstMask[:], r.DstMACMask[:])
	k.SrcIp, k.SrcIpMask, k.DstIp, k.DstIpMask = r.SrcIP, r.SrcIPMask, r.DstIP, r.DstIPMask
	binary.BigEndian.PutUint16(k.Ports[0:], r.SrcPort)
	binary.BigEndian.PutUint16(k.Ports[2:], r.DstPort)
	binary.BigEndian.PutUint16(k.PortsMask[0:], r.SrcPortMask)
	binary.BigEndian.PutUint16(k.PortsMask[2:], r.DstPortMask)
	// The program compares the EtherType as it lies in the frame.
	var et [2]byte
	binary.BigEndian.PutUint16(et[:], r.EtherType)
	k.EtherType = binary.NativeEndian.Uint16(et[:])
	binary.BigEndian.PutUint16(et[:], r.EtherTypeMask)
	k.EtherTypeMask = binary.NativeEndian.Uint16(et[:])
	k.Proto, k.ProtoMask = r.Proto, r.ProtoMask
	if r.NeedPorts {
		k.NeedPorts = 1
	}
	k.IpVersion = r.IPVersion
	return k
}
