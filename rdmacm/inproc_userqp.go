package rdmacm

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/verbs"
)

// localQPN is the QP number a REQ or REP names: the ID's QP, or the
// caller's. Called under mu.
func (id *inprocID) localQPN(p *ConnParam) uint32 {
	if id.qp != nil {
		return id.qp.QPN()
	}
	return p.QPNum
}

// InitQPAttr answers from the connection's path (connPath).
func (id *inprocID) InitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.isUD() {
		return verbs.QPAttr{}, 0, fmt.Errorf("init QP attributes: a UD ID's QP is its own: %w", ErrInvalidArgument)
	}
	p := id.connPath()
	switch {
	case state == verbs.QPSInit:
		access := verbs.AccessRemoteWrite
		if p != nil {
			access = p.access()
		}
		return verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: access},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags, nil
	case state != verbs.QPSRTR && state != verbs.QPSRTS:
		return verbs.QPAttr{}, 0, fmt.Errorf("init QP attributes for state %v: %w", state, ErrInvalidArgument)
	case p == nil:
		return verbs.QPAttr{}, 0, fmt.Errorf("init QP attributes: no connection yet: %w", ErrState)
	case state == verbs.QPSRTR:
		attr, mask := p.rtr()
		return attr, mask, nil
	default:
		attr, mask := p.rts()
		return attr, mask, nil
	}
}

// connPath is the path InitQPAttr answers from: before Accept the REQ's,
// with the resources it asked for (as the kernel's CM keeps them), then
// the one Accept or the REP settled. Called under mu.
func (id *inprocID) connPath() *path {
	if id.state == stateRequested {
		p := id.reqPath(min(id.req.InitiatorDepth, ibv.MaxRdAtomic),
			min(id.req.ResponderResources, ibv.MaxRdAtomic))
		return &p
	}
	return id.path
}

// Establish sends the RTU.
func (id *inprocID) Establish() error {
	id.mu.Lock()
	if id.state != stateResponded {
		id.mu.Unlock()
		return fmt.Errorf("establish: %w", ErrState)
	}
	conn := id.conn
	id.state = stateEstablished
	id.mu.Unlock()
	if err := conn.ReadyToUse(nil); err != nil {
		return fmt.Errorf("establish: %w", err)
	}
	return nil
}
