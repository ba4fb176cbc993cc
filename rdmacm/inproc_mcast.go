package rdmacm

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/softnic/softnic/verbs"
)

// mcastJoin is one group an in-process ID joined.
type mcastJoin struct {
	addr netip.Addr
	// qp is the QP attached to the group (nil: a send-only join, or an
	// ID that had no QP when it joined).
	qp *verbs.QP
}

// JoinMulticast attaches the ID's QP to the group and posts
// EventMulticastJoin, as the kernel's rdma_join_multicast and librdmacm's
// ucma_process_join together do.
func (id *inprocID) JoinMulticast(addr netip.Addr, flags JoinFlags) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	// The kernel's states: bound to a device, or the address resolved.
	if id.dev == nil || (id.state != stateIdle && id.state != stateAddrResolved) {
		return fmt.Errorf("join multicast %v: %w", addr, ErrState)
	}
	if !id.isUD() {
		return fmt.Errorf("join multicast %v: a %v ID: %w", addr, id.ps, ErrInvalidArgument)
	}
	if id.local.Addr().Is4() != addr.Is4() && !anyAddr(id.local.Addr()) {
		return fmt.Errorf("join multicast %v from %v: %w", addr, id.local.Addr(), ErrInvalidArgument)
	}
	if slices.ContainsFunc(id.mcast, func(j mcastJoin) bool { return j.addr == addr }) {
		return fmt.Errorf("join multicast %v: %w", addr, ErrAddrInUse)
	}
	j := mcastJoin{addr: addr}
	if id.qp != nil && flags != JoinSendOnlyFullMember {
		if err := id.qp.AttachMcast(McastGID(addr), 0); err != nil {
			return fmt.Errorf("join multicast %v: %w", addr, err)
		}
		j.qp = id.qp
	}
	id.mcast = append(id.mcast, j)
	id.post(Event{Type: EventMulticastJoin, ID: id.front, Group: addr, UD: mcastUDParam(addr, id.gidIndex, id.tos)})
	return nil
}

// LeaveMulticast detaches the ID's QP from the group.
func (id *inprocID) LeaveMulticast(addr netip.Addr) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	i := slices.IndexFunc(id.mcast, func(j mcastJoin) bool { return j.addr == addr })
	if i < 0 {
		return fmt.Errorf("leave multicast %v: not joined: %w", addr, ErrNoDevice)
	}
	j := id.mcast[i]
	id.mcast = slices.Delete(id.mcast, i, i+1)
	return j.leave()
}

// leave detaches the join's QP, if one was attached.
func (j mcastJoin) leave() error {
	if j.qp == nil {
		return nil
	}
	if err := j.qp.DetachMcast(McastGID(j.addr), 0); err != nil && !errors.Is(err, verbs.ErrInvalidArgument) {
		return fmt.Errorf("leave multicast %v: %w", j.addr, err)
	}
	return nil // a QP destroyed meanwhile left by itself
}

// detachMcast detaches the ID's QP from its groups, which the ID stays
// in, as librdmacm's rdma_destroy_qp leaves them. Called under mu.
func (id *inprocID) detachMcast() {
	for i := range id.mcast {
		id.mcast[i].leave()
		id.mcast[i].qp = nil
	}
}

// leaveAll leaves every group, as the ID or its QP goes. Called under mu.
func (id *inprocID) leaveAll() {
	for _, j := range id.mcast {
		j.leave()
	}
	id.mcast = nil
}
