package verbs

import (
	"fmt"
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce"
)

// Flow steering (ibv_create_flow): a flow sends the frames that match its
// specs to a raw packet QP (QPTypeRawPacket), as a ConnectX's flow table
// does. The frames a raw packet QP sends that are addressed to the
// device's MAC address or to a group address reach the device's flows too.

// QPTypeRawPacket is IBV_QPT_RAW_PACKET: a QP that sends whole Ethernet
// frames and receives those its flows take. Through a daemon, creating
// one needs CAP_NET_RAW, as the kernel asks.
const QPTypeRawPacket = ibv.QPTypeRawPacket

// The flow types of libibverbs.
type (
	FlowAttr     = ibv.FlowAttr
	FlowSpec     = ibv.FlowSpec
	FlowSpecType = ibv.FlowSpecType
	EthFilter    = ibv.EthFilter
	IPFilter     = ibv.IPFilter
	PortFilter   = ibv.PortFilter
)

// Flow spec types and flow kinds.
const (
	FlowSpecEth        = ibv.FlowSpecEth
	FlowSpecIPv4       = ibv.FlowSpecIPv4
	FlowSpecIPv4Ext    = ibv.FlowSpecIPv4Ext
	FlowSpecIPv6       = ibv.FlowSpecIPv6
	FlowSpecTCP        = ibv.FlowSpecTCP
	FlowSpecUDP        = ibv.FlowSpecUDP
	FlowAttrNormal     = ibv.FlowAttrNormal
	FlowAttrAllDefault = ibv.FlowAttrAllDefault
	FlowAttrMcDefault  = ibv.FlowAttrMcDefault
	FlowAttrSniffer    = ibv.FlowAttrSniffer
)

// ErrFlowLimit: the device's flow table is full (ENOMEM through a daemon,
// which also bounds each user's flows).
var ErrFlowLimit = roce.ErrFlowLimit

// FlowOps is a flow's backend.
type FlowOps interface {
	Destroy() error
}

// FlowBackend is a DeviceOps that steers flows.
type FlowBackend interface {
	CreateFlow(q *QP, attr *FlowAttr) (FlowOps, error)
}

// Flow is a steering rule (ibv_flow) of a QP.
type Flow struct {
	qp        *QP
	ops       FlowOps
	destroyed atomic.Bool
}

// CreateFlow steers the frames attr matches to the QP (ibv_create_flow).
// Only raw packet QPs take flows here: a UD QP's (InfiniBand only) fails
// with ErrNotSupported, another QP's with ErrInvalidArgument.
func (q *QP) CreateFlow(attr *FlowAttr) (*Flow, error) {
	switch q.Type() {
	case QPTypeRawPacket:
	case QPTypeUD:
		return nil, fmt.Errorf("create flow on a UD QP: %w", ErrNotSupported)
	default:
		return nil, fmt.Errorf("create flow on a %v QP: %w", q.Type(), ErrInvalidArgument)
	}
	if err := attr.Check(); err != nil {
		return nil, err
	}
	fb, ok := q.dev.ops.(FlowBackend)
	if !ok {
		return nil, fmt.Errorf("create flow: %w", ErrNotSupported)
	}
	ops, err := fb.CreateFlow(q, attr)
	if err != nil {
		return nil, err
	}
	q.flows.Add(1)
	return &Flow{qp: q, ops: ops}, nil
}

// Destroy removes the flow (ibv_destroy_flow).
func (f *Flow) Destroy() error {
	if f.destroyed.Swap(true) {
		return fmt.Errorf("destroy flow: destroyed already: %w", ErrInvalidArgument)
	}
	if err := f.ops.Destroy(); err != nil {
		f.destroyed.Store(false)
		return err
	}
	f.qp.flows.Add(-1)
	return nil
}

// CreateFlow implements FlowBackend on the device's own flow table.
func (e *engine) CreateFlow(q *QP, attr *FlowAttr) (FlowOps, error) {
	var id uint64
	var err error
	if q.rss != nil {
		id, err = e.dev.AddRSSFlow(q.rss, attr)
	} else {
		id, err = e.dev.AddFlow(q.QPN(), attr)
	}
	if err != nil {
		return nil, err
	}
	return engineFlow{d: e.dev, id: id}, nil
}

// engineFlow is an in-process flow: an entry of the device's table.
type engineFlow struct {
	d  *roce.Device
	id uint64
}

func (f engineFlow) Destroy() error { return f.d.RemoveFlow(f.id) }
