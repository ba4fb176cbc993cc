package daemon

import (
	"fmt"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/verbs"
)

// attachMcast attaches one of the session's UD QPs to a multicast group
// (ibv_attach_mcast). The engine checks the QP's type and the GID and
// bounds the device's groups; the attachment counts against the user's
// McastAttachments until it is detached or the QP destroyed.
func (ss *session) attachMcast(req hostif.McastRequest) error {
	q := ss.qps[req.QP]
	if q == nil {
		return fmt.Errorf("attach multicast: QP %d: %w", req.QP, errNoObject)
	}
	gid := ibv.GID(req.GID)
	if !gid.IsMulticast() || q.qp.Type() != verbs.QPTypeUD {
		// The engine's refusals, before the bound: EINVAL, as the kernel's.
		return fmt.Errorf("attach multicast %v to a %v QP: %w", gid, q.qp.Type(), verbs.ErrInvalidArgument)
	}
	if _, ok := q.mcast[gid]; ok {
		return nil // attached already: nothing to count, as the engine does nothing
	}
	if err := ss.take(resMcast, 1); err != nil {
		return err
	}
	if err := q.qp.AttachMcast(gid, uint16(req.Lid)); err != nil {
		ss.give(resMcast, 1)
		return err
	}
	if q.mcast == nil {
		q.mcast = map[ibv.GID]struct{}{}
	}
	q.mcast[gid] = struct{}{}
	return nil
}

// detachMcast detaches a QP from a group it is attached to.
func (ss *session) detachMcast(req hostif.McastRequest) error {
	q := ss.qps[req.QP]
	if q == nil {
		return fmt.Errorf("detach multicast: QP %d: %w", req.QP, errNoObject)
	}
	gid := ibv.GID(req.GID)
	if err := q.qp.DetachMcast(gid, uint16(req.Lid)); err != nil {
		return err
	}
	if _, ok := q.mcast[gid]; ok {
		delete(q.mcast, gid)
		ss.give(resMcast, 1)
	}
	return nil
}
