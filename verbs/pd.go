package verbs

import (
	"fmt"
)

// PD is a protection domain (ibv_pd): memory regions, shared receive
// queues and queue pairs that may be used together.
type PD struct {
	dev *Device
	id  uint32
	ops PDOps
	// parent is set on a parent domain (domain.go), whose ops are its
	// contained PD's.
	parent *parentDomain
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() *PD {
	pd := &PD{dev: d, id: d.nextPD.Add(1)}
	pd.ops = d.ops.AllocPD(pd)
	return pd
}

// Device returns the device the PD belongs to.
func (pd *PD) Device() *Device { return pd.dev }

// QPInitAttr describes a QP to create (ibv_qp_init_attr): RC (the
// default) or UD.
type QPInitAttr struct {
	SendCQ, RecvCQ *CQ
	SRQ            *SRQ
	Cap            QPCap
	// SigAll makes every send work request signaled.
	SigAll bool
	Type   QPType
}

// CreateQP creates a queue pair in pd (ibv_create_qp). It starts in
// RESET.
func (pd *PD) CreateQP(init *QPInitAttr) (*QP, error) {
	return pd.CreateQPWith(init, func(q *QP) (QPOps, error) { return pd.ops.CreateQP(q, init) })
}

// checkQP refuses the objects of another device or PD.
func (pd *PD) checkQP(init *QPInitAttr) error {
	switch init.Type {
	case QPTypeXRCRecv:
		return fmt.Errorf("create QP: an XRC receive QP is made in its XRCD: %w", ErrInvalidArgument)
	case QPTypeXRCSend:
		// A send queue only (ibv_create_qp_ex with IBV_QPT_XRC_SEND).
		if init.SendCQ == nil || init.RecvCQ != nil || init.SRQ != nil || init.Cap.MaxRecvWR != 0 {
			return fmt.Errorf("create XRC send QP: a send CQ and no receive queue: %w", ErrInvalidArgument)
		}
		if init.SendCQ.dev != pd.dev {
			return fmt.Errorf("create QP: CQ of another device: %w", ErrInvalidArgument)
		}
		return nil
	}
	if init.SendCQ == nil || init.RecvCQ == nil {
		return fmt.Errorf("create QP: send and receive CQs are required: %w", ErrInvalidArgument)
	}
	if init.SendCQ.dev != pd.dev || init.RecvCQ.dev != pd.dev {
		return fmt.Errorf("create QP: CQ of another device: %w", ErrInvalidArgument)
	}
	if init.SRQ != nil && init.SRQ.pd.domain() != pd.domain() {
		return fmt.Errorf("create QP: SRQ of another protection domain: %w", ErrInvalidArgument)
	}
	return nil
}
