package daemon

import (
	"cmp"
	"slices"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/verbs"
)

// cmIDRef is one of a session's rdma_cm IDs as a monitor sees it: the
// client's handle and the ID, whose accessors lock it.
type cmIDRef struct {
	handle uint32
	id     *rdmacm.ID
}

// publish gives monitors the session's IDs as they are now, in handle
// order; the session's goroutine calls it when it adds or removes one.
func (sc *sessionCM) publish(ss *session) {
	refs := make([]cmIDRef, 0, len(sc.ids))
	for h, c := range sc.ids {
		refs = append(refs, cmIDRef{handle: h, id: c.id})
	}
	slices.SortFunc(refs, func(a, b cmIDRef) int { return cmp.Compare(a.handle, b.handle) })
	ss.cmIDs.Store(&refs)
}

// listeningCMIDs counts the session's IDs that listen now.
func (ss *session) listeningCMIDs() uint32 {
	var n uint32
	if refs := ss.cmIDs.Load(); refs != nil {
		for _, ref := range *refs {
			if ref.id.Listening() {
				n++
			}
		}
	}
	return n
}

// sessionCMIDs is a session's record and its rdma_cm IDs.
type sessionCMIDs struct {
	res  *hostif.SessionResources
	refs []cmIDRef
}

// cmIDs returns the sessions that have rdma_cm IDs, in session ID order,
// as user viewer may see them (ss.seenBy).
func (s *Server) cmIDs(viewer uint32) []sessionCMIDs {
	s.mu.Lock()
	var all []sessionCMIDs
	for ss := range s.sessions {
		if res, refs := ss.res.Load(), ss.cmIDs.Load(); res != nil && refs != nil && len(*refs) > 0 {
			seen := ss.seenBy(viewer, res)
			all = append(all, sessionCMIDs{&seen, *refs})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b sessionCMIDs) int { return cmp.Compare(a.res.ID, b.res.ID) })
	return all
}

// queryCMIDs answers query_cm_ids: the device's rdma_cm IDs after the
// request's (session, ID), as many as a reply holds, each as it is now.
// A session's list is the one its last command that made or destroyed
// an ID published.
func (ss *session) queryCMIDs(req hostif.CMIDsRequest) (any, []int, error) {
	var r hostif.CMIDsReply
	for _, one := range ss.s.cmIDs(ss.peer.uid) {
		for _, ref := range one.refs {
			if one.res.ID < req.AfterSession || (one.res.ID == req.AfterSession && ref.handle <= req.AfterID) {
				continue
			}
			if r.Count == hostif.CMIDsPerReply {
				return r, nil, nil
			}
			r.ID[r.Count] = cmIDRecord(one.res, ref)
			r.Count++
		}
	}
	return r, nil, nil
}

// cmIDRecord describes ref of the session whose record is res.
func cmIDRecord(res *hostif.SessionResources, ref cmIDRef) hostif.CMIDRecord {
	id := ref.id
	local, peer := id.LocalAddr(), id.PeerAddr()
	rec := hostif.CMIDRecord{Session: res.ID, PID: res.PID, Comm: res.Comm, ID: ref.handle,
		State: id.KernelState(), PortSpace: uint16(id.PortSpace()),
		LocalPort: local.Port(), PeerPort: peer.Port(),
		Local: hostif.CMAddr(local.Addr()), Peer: hostif.CMAddr(peer.Addr())}
	if qp := id.QP(); qp != nil {
		rec.QPN, rec.QPType = qp.QPN(), ibvQPType(qp.Type())
	}
	return rec
}

// ibvQPType numbers a QP type as enum ibv_qp_type does (RC 2, UC 3, UD 4,
// XRC_SEND 9, XRC_RECV 10), leaving 0 for "no QP".
func ibvQPType(t verbs.QPType) uint8 {
	switch t {
	case verbs.QPTypeUC:
		return 3
	case verbs.QPTypeUD:
		return 4
	case verbs.QPTypeXRCSend:
		return 9
	case verbs.QPTypeXRCRecv:
		return 10
	default:
		return 2
	}
}
