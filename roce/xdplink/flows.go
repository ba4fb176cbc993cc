package xdplink

import (
	"fmt"

	"github.com/softnic/softnic/bpf"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// SetFlows implements roce.FlowLink: the XDP program redirects the
// frames of the device's flows as well as RoCEv2, one rule a flow. A rule
// may take more than its flow (it has no VLAN or source MAC field, and a
// default or sniffer flow's rule takes every frame); the device matches
// each flow exactly.
func (l *Link) SetFlows(flows []ibv.FlowAttr) error {
	rules := make([]bpf.FlowRule, len(flows))
	for i := range flows {
		rules[i] = flowRule(&flows[i])
	}
	if err := l.prog.SetFlowRules(rules); err != nil {
		return fmt.Errorf("steer flows on %s: %w", l.ifname, err)
	}
	return nil
}

// flowRule is the XDP rule that takes at least what flow f takes.
func flowRule(f *ibv.FlowAttr) bpf.FlowRule {
	var r bpf.FlowRule
	if f.Type != ibv.FlowAttrNormal && f.Type != ibv.FlowAttrSniffer {
		if f.Type == ibv.FlowAttrMcDefault {
			r.DstMAC[0], r.DstMACMask[0] = 1, 1 // the group bit
		}
		return r
	}
	for i := range f.Specs {
		s := &f.Specs[i]
		switch s.Type {
		case ibv.FlowSpecEth:
			for j := range r.DstMAC {
				r.DstMAC[j], r.DstMACMask[j] = s.Eth.DstMAC[j]&s.EthMask.DstMAC[j], s.EthMask.DstMAC[j]
			}
			r.EtherType, r.EtherTypeMask = s.Eth.EtherType&s.EthMask.EtherType, s.EthMask.EtherType
		case ibv.FlowSpecIPv4, ibv.FlowSpecIPv4Ext, ibv.FlowSpecIPv6:
			r.IPVersion = 4
			if s.Type == ibv.FlowSpecIPv6 {
				r.IPVersion = 6
			}
			for j := range r.SrcIP {
				r.SrcIP[j], r.SrcIPMask[j] = s.IP.Src[j]&s.IPMask.Src[j], s.IPMask.Src[j]
				r.DstIP[j], r.DstIPMask[j] = s.IP.Dst[j]&s.IPMask.Dst[j], s.IPMask.Dst[j]
			}
			r.Proto, r.ProtoMask = s.IP.Proto&s.IPMask.Proto, s.IPMask.Proto
		case ibv.FlowSpecTCP, ibv.FlowSpecUDP:
			r.Proto, r.ProtoMask, r.NeedPorts = 6, 0xff, true
			if s.Type == ibv.FlowSpecUDP {
				r.Proto = 17
			}
			r.SrcPort, r.SrcPortMask = s.Port.SrcPort&s.PortMask.SrcPort, s.PortMask.SrcPort
			r.DstPort, r.DstPortMask = s.Port.DstPort&s.PortMask.DstPort, s.PortMask.DstPort
		}
	}
	return r
}
