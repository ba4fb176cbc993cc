package verbs

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport"
)

// PD is a protection domain (ibv_pd): memory regions, shared receive
// queues and queue pairs that may be used together.
type PD struct {
	dev *Device
	id  uint32
	// handle is the daemon's, on a device reached through one.
	handle uint32
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() *PD {
	if d.remote != nil {
		return d.remotePD()
	}
	return &PD{dev: d, id: d.nextPD.Add(1)}
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
	if init.SendCQ == nil || init.RecvCQ == nil {
		return nil, fmt.Errorf("create QP: send and receive CQs are required: %w", ErrInvalidArgument)
	}
	if init.SendCQ.dev != pd.dev || init.RecvCQ.dev != pd.dev {
		return nil, fmt.Errorf("create QP: CQ of another device: %w", ErrInvalidArgument)
	}
	if pd.dev.remote != nil {
		return pd.remoteQP(init)
	}
	cfg := ibtransport.QPConfig{Memory: (*pdMemory)(pd), SendCQ: (*cqSink)(init.SendCQ), RecvCQ: (*cqSink)(init.RecvCQ),
		Cap: init.Cap, SigAll: init.SigAll, Type: init.Type}
	if init.SRQ != nil {
		if init.SRQ.pd != pd {
			return nil, fmt.Errorf("create QP: SRQ of another protection domain: %w", ErrInvalidArgument)
		}
		cfg.SRQ = (*srqRing)(init.SRQ)
	}
	t, err := pd.dev.group.CreateQP(&cfg)
	if err != nil {
		return nil, err
	}
	return newQP(t), nil
}

// pdMemory is the PD as the engine sees it (ibtransport.Memory): it
// resolves keys to the regions of this PD only. The engines call it; they
// read the key table without locks (see keyTable).
type pdMemory PD

func (m *pdMemory) LocalRegion(lkey uint32, va uint64, n uint32, a Access) ibtransport.Region {
	mr := m.dev.mrs.lkeys[lkey]
	if mr == nil || !mr.grants((*PD)(m), va, n, a) {
		return nil
	}
	if mr.vec != nil {
		return (*procLocalView)(mr)
	}
	return (*localView)(mr)
}

func (m *pdMemory) RemoteRegion(rkey uint32, va uint64, n uint32, a Access) ibtransport.Region {
	mr := m.dev.mrs.rkeys[rkey]
	if mr == nil || !mr.rkeyValid.Load() || !mr.grants((*PD)(m), va, n, a) {
		return nil
	}
	if mr.vec != nil {
		return (*procRemoteView)(mr)
	}
	return (*remoteView)(mr)
}

func (m *pdMemory) InvalidateRKey(rkey uint32) bool {
	mr := m.dev.mrs.rkeys[rkey]
	// The key stays in the table until Dereg: the engines read it without
	// locks, so only Group.Do may change it.
	return mr != nil && mr.pd == (*PD)(m) && mr.rkeyValid.CompareAndSwap(true, false)
}
