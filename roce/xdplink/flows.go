package xdplink

import (
	"errors"
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
	want := map[[6]byte]bool{}
	for i := range flows {
		if mac, ok := flowGroupMAC(&flows[i]); ok {
			want[mac] = true
		}
	}
	l.groupMu.Lock()
	defer l.groupMu.Unlock()
	return l.setFlowMACs(want)
}

// flowGroupMAC returns the group MAC address a flow names whole, if any:
// a NIC's MAC filter must let that address in (broadcast always is).
func flowGroupMAC(f *ibv.FlowAttr) ([6]byte, bool) {
	for i := range f.Specs {
		s := &f.Specs[i]
		if s.Type == ibv.FlowSpecEth && s.EthMask.DstMAC == [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} &&
			s.Eth.DstMAC[0]&1 != 0 && s.Eth.DstMAC != s.EthMask.DstMAC {
			return s.Eth.DstMAC, true
		}
	}
	return [6]byte{}, false
}

// setFlowMACs makes the interface's multicast MAC list hold want of the
// flows' addresses (SIOCADDMULTI, as `ip maddr add` does; CAP_NET_ADMIN,
// which the daemon keeps) and no other it added; groupMu is held.
func (l *Link) setFlowMACs(want map[[6]byte]bool) error {
	var errs []error
	for mac := range l.flowMACs {
		if !want[mac] {
			errs = append(errs, l.groups.macMembership(l.ifname, mac, false))
			delete(l.flowMACs, mac)
		}
	}
	for mac := range want {
		if l.flowMACs[mac] {
			continue
		}
		if err := l.groups.macMembership(l.ifname, mac, true); err != nil {
			errs = append(errs, err)
			continue
		}
		if l.flowMACs == nil {
			l.flowMACs = map[[6]byte]bool{}
		}
		l.flowMACs[mac] = true
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("multicast MAC addresses of the flows on %s: %w", l.ifname, err)
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
