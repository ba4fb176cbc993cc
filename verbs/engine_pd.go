package verbs

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport"
)

// enginePD is a protection domain of an in-process device. It is also the
// PD as the engines see it (ibtransport.Memory): it resolves keys to the
// regions of this PD only. The engines call it; they read the key table
// without locks (see keyTable).
type enginePD struct {
	e  *engine
	pd *PD
}

func (e *engine) AllocPD(pd *PD) PDOps { return &enginePD{e: e, pd: pd} }

// enginePDOf returns the engine's half of pd, for what only an in-process
// device does.
func enginePDOf(pd *PD, what string) (*enginePD, error) {
	if p, ok := pd.ops.(*enginePD); ok {
		return p, nil
	}
	return nil, fmt.Errorf("%s: only on a device opened in process: %w", what, ErrInvalidArgument)
}

func (p *enginePD) CreateQP(q *QP, init *QPInitAttr) (QPOps, error) {
	cfg := ibtransport.QPConfig{Memory: p, SendCQ: init.SendCQ.ops.(*engineCQ), Cap: init.Cap, SigAll: init.SigAll, Type: init.Type}
	if init.RecvCQ != nil { // none on an XRC send QP
		cfg.RecvCQ = init.RecvCQ.ops.(*engineCQ)
	}
	if init.SRQ != nil {
		cfg.SRQ = init.SRQ.ops.(ibtransport.SharedRecvQueue) // an engineSRQ or engineTMSRQ
	}
	t, err := p.e.group.CreateQP(&cfg)
	if err != nil {
		return nil, err
	}
	t.Owner = q
	return t, nil
}

func (p *enginePD) CreateAH(av *AddressVector) (*AH, error) { return p.e.group.CreateAH(av) }

func (p *enginePD) LocalRegion(lkey uint32, va uint64, n uint32, a Access) ibtransport.Region {
	mr := p.e.mrs.lkeys[lkey]
	if mr == nil || !mr.grants(p.pd, va, n, a) {
		return nil
	}
	if mr.vec != nil {
		return (*procLocalView)(mr)
	}
	return (*localView)(mr)
}

func (p *enginePD) RemoteRegion(qp *ibtransport.QP, rkey uint32, va uint64, n uint32, a Access) ibtransport.Region {
	mr := p.e.mrs.rkeys[rkey]
	if mr == nil {
		return p.windowRegion(qp, rkey, va, n, a)
	}
	if !mr.rkeyValid.Load() || !mr.grants(p.pd, va, n, a) {
		return nil
	}
	if mr.vec != nil {
		return (*procRemoteView)(mr)
	}
	return (*remoteView)(mr)
}

func (p *enginePD) RemoteKeyGrants(rkey uint32, a Access) bool {
	mr := p.e.mrs.rkeys[rkey]
	return mr != nil && mr.rkeyValid.Load() && mr.valid && mr.pd == p.pd && mr.access&a == a
}

// windowRegion is RemoteRegion through a memory window.
func (p *enginePD) windowRegion(qp *ibtransport.QP, rkey uint32, va uint64, n uint32, a Access) ibtransport.Region {
	b := p.window(qp, rkey, va, n, a)
	switch {
	case b == nil || !b.mr.valid:
		return nil
	case b.mr.vec != nil:
		return (*procWindowView)(b)
	}
	return b
}

func (p *enginePD) InvalidateRKey(qp *ibtransport.QP, rkey uint32, remote bool) bool {
	mr := p.e.mrs.rkeys[rkey]
	if mr == nil {
		return p.invalidateMW(qp, rkey, remote)
	}
	// The key stays in the table until Dereg: the engines read it without
	// locks, so only Group.Do may change it. A region windows are bound to
	// keeps its rkey, as rxe's (rxe_invalidate_mr).
	return mr.pd == p.pd && mr.windows.Load() == 0 && mr.rkeyValid.CompareAndSwap(true, false)
}
