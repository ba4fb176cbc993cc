package rdmacm

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/verbs"
)

// A QP the caller made and moves through its states itself, as rping -q
// does with librdmacm: Connect and Accept on an ID without a QP take its
// number in ConnParam.QPNum; InitQPAttr gives the attributes of each state
// from the connection's exchange (rdma_init_qp_attr); on the active side
// the REP brings EventConnectResponse instead of EventEstablished, and
// Establish sends the RTU once the caller's QP is ready (rdma_establish).
// The passive side's RTU brings EventEstablished as usual.

// localQPN is the QP number a REQ or REP names: the ID's QP, or the
// caller's. Called under mu.
func (id *ID) localQPN(p *ConnParam) uint32 {
	if id.qp != nil {
		return id.qp.QPN()
	}
	return p.QPNum
}

// InitQPAttr returns the attributes, and which of them to set, that move
// a QP of the ID's connection to state (rdma_init_qp_attr): INIT, RTR or
// RTS, the last two once the connection's REQ (passive side) or REP
// (active side) has come.
func (id *ID) InitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	if id.rem != nil {
		return id.remoteInitQPAttr(state)
	}
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
func (id *ID) connPath() *path {
	if id.state == stateRequested {
		p := id.reqPath(min(id.req.InitiatorDepth, ibv.MaxRdAtomic),
			min(id.req.ResponderResources, ibv.MaxRdAtomic))
		return &p
	}
	return id.path
}

// Establish completes a connection whose EventConnectResponse came
// (rdma_establish): it sends the RTU. The caller's QP is to be in RTS by
// then; the ID is then established, with no further event.
func (id *ID) Establish() error {
	if id.rem != nil {
		return id.remoteEstablish()
	}
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
