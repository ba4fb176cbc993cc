package roce

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// Flows (ibv_create_flow) steer frames that are not the device's RoCEv2
// traffic to raw packet QPs, as a ConnectX's flow table does. The table
// is immutable behind an atomic pointer: the lanes read it on every such
// frame without a lock, and AddFlow and RemoveFlow replace it. A frame goes
// to every QP whose flow of the best (lowest) priority among those that
// match it takes it; sniffer flows get a copy besides.

// MaxFlows is the most flows a device holds: the XDP program's rule map
// is that large (bpf.MaxFlowRules).
const MaxFlows = 64

// ErrFlowLimit is returned when the device holds MaxFlows flows.
var ErrFlowLimit = errors.New("roce: the device's flow table is full")

// FlowLink is a Link that must be told which frames to deliver beside
// RoCEv2 (xdplink: its XDP program passes every other frame to the
// kernel). SetFlows gets every flow the device has, after each change.
type FlowLink interface {
	SetFlows(flows []ibv.FlowAttr) error
}

// flow is one entry of the table.
type flow struct {
	id   uint64
	qpn  uint32
	rss  *RSS // an RSS QP's flow: qpn is rss.pick's
	attr ibv.FlowAttr
}

// flowTable is the device's flows, in the order they are tried: by
// priority, then by age.
type flowTable struct {
	flows []flow
}

// flowState is the Device's: the table and what changes it.
type flowState struct {
	table  atomic.Pointer[flowTable]
	mu     sync.Mutex
	nextID uint64
}

// AddFlow steers the frames attr matches to raw packet QP qpn and returns
// the flow's id for RemoveFlow. attr must pass FlowAttr.Check.
func (d *Device) AddFlow(qpn uint32, attr *ibv.FlowAttr) (uint64, error) {
	return d.addFlow(flow{qpn: qpn, attr: *attr})
}

// addFlow adds f (its attributes not yet checked) to the table.
func (d *Device) addFlow(f flow) (uint64, error) {
	if err := f.attr.Check(); err != nil {
		return 0, err
	}
	fs := &d.flows
	fs.mu.Lock()
	defer fs.mu.Unlock()
	old := fs.flows()
	if len(old) >= MaxFlows {
		return 0, fmt.Errorf("create flow: %d flows: %w", len(old), ErrFlowLimit)
	}
	fs.nextID++
	f.id = fs.nextID
	f.attr.Specs = slices.Clone(f.attr.Specs)
	next := append(slices.Clone(old), f)
	slices.SortStableFunc(next, func(a, b flow) int { return int(a.attr.Priority) - int(b.attr.Priority) })
	if err := d.publishFlows(next); err != nil {
		return 0, fmt.Errorf("create flow: %w", err)
	}
	return f.id, nil
}

// RemoveFlow removes the flow AddFlow returned id for.
func (d *Device) RemoveFlow(id uint64) error {
	fs := &d.flows
	fs.mu.Lock()
	defer fs.mu.Unlock()
	old := fs.flows()
	i := slices.IndexFunc(old, func(f flow) bool { return f.id == id })
	if i < 0 {
		return fmt.Errorf("destroy flow %d: %w", id, ibv.ErrInvalidArgument)
	}
	return d.publishFlows(slices.Delete(slices.Clone(old), i, i+1))
}

// Flows returns how many flows the device holds.
func (d *Device) Flows() int { return len(d.flows.flows()) }

func (fs *flowState) flows() []flow {
	if t := fs.table.Load(); t != nil {
		return t.flows
	}
	return nil
}

// publishFlows tells the link, then the lanes, of the flows; fs.mu is
// held. A link that refuses them keeps the old table.
func (d *Device) publishFlows(flows []flow) error {
	if fl, ok := d.link.(FlowLink); ok {
		attrs := make([]ibv.FlowAttr, len(flows))
		for i := range flows {
			attrs[i] = flows[i].attr
		}
		if err := fl.SetFlows(attrs); err != nil {
			return err
		}
	}
	if len(flows) == 0 {
		d.flows.table.Store(nil)
		return nil
	}
	d.flows.table.Store(&flowTable{flows: flows})
	return nil
}

// steerRaw hands frame to the raw packet QPs whose flows take it; it
// reports whether any did.
func (ln *lane) steerRaw(frame []byte) bool {
	t := ln.d.flows.table.Load()
	if t == nil {
		return false
	}
	k := &ln.flowKey
	if !parseFlowKey(frame, k) {
		return false
	}
	var got qpnSet
	best := -1
	for i := range t.flows {
		f := &t.flows[i]
		if best >= 0 && int(f.attr.Priority) != best && f.attr.Type != ibv.FlowAttrSniffer {
			continue // a flow of a better priority took it
		}
		if !flowTakes(f, k, false) {
			continue
		}
		if f.attr.Type != ibv.FlowAttrSniffer {
			best = int(f.attr.Priority)
		}
		ln.deliverRaw(&got, f.target(k), frame)
	}
	if best < 0 {
		// The default flows take what no other flow did.
		for i := range t.flows {
			if f := &t.flows[i]; flowTakes(f, k, true) {
				ln.deliverRaw(&got, f.target(k), frame)
			}
		}
	}
	return got.n > 0
}

// target is the QP f delivers the frame k describes to.
func (f *flow) target(k *flowKey) uint32 {
	if f.rss != nil {
		return f.rss.pick(k)
	}
	return f.qpn
}

// qpnSet is the QPs one frame went to: each gets it once, however many of
// its flows match.
type qpnSet struct {
	qpns [MaxFlows]uint32
	n    int
}

func (ln *lane) deliverRaw(s *qpnSet, qpn uint32, frame []byte) {
	if slices.Contains(s.qpns[:s.n], qpn) {
		return
	}
	s.qpns[s.n] = qpn
	s.n++
	ln.ctr.RxRaw.Add(1)
	ln.eng.ReceiveRaw(qpn, frame)
}

// flowTakes reports whether f takes the frame k describes: a normal flow
// or a sniffer whose specs all match (defaults false), or a default flow
// (defaults true) of the frame's kind.
func flowTakes(f *flow, k *flowKey, defaults bool) bool {
	switch f.attr.Type {
	case ibv.FlowAttrAllDefault:
		return defaults
	case ibv.FlowAttrMcDefault:
		return defaults && k.dst[0]&1 != 0
	case ibv.FlowAttrSniffer:
		if defaults {
			return false
		}
	}
	if defaults {
		return false
	}
	for i := range f.attr.Specs {
		if !matchSpec(k, &f.attr.Specs[i]) {
			return false
		}
	}
	return true
}
