package ibtransport

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// Multicast: a UD datagram to QP 0xFFFFFF goes to every QP attached to
// its DGID (ibv_attach_mcast). The engines read the attachments on every
// such packet, so they are an immutable table behind an atomic pointer,
// replaced whole by attach and detach (rare, and off the packet path): a
// receive takes no lock and allocates nothing.

// mcastTable is the device's attachments: its groups' QPs.
type mcastTable struct {
	groups map[ibv.GID][]*QP
	total  int // attachments, over every group
}

// mcastState is the Group's side of multicast.
type mcastState struct {
	mu    sync.Mutex // one writer at a time; readers only Load
	table atomic.Pointer[mcastTable]
	// join is told when the device joins a group (its first QP attaches)
	// or leaves it (its last detaches): the link's filters (SetMcastJoin).
	join func(gid ibv.GID, joined bool) error
}

// SetMcastJoin makes fn hear of every group the device joins (joined) or
// leaves: the RoCE device steers the group's frames to itself and joins
// it on the link. An error of a join fails the attach.
func (g *Group) SetMcastJoin(fn func(gid ibv.GID, joined bool) error) {
	g.mc.mu.Lock()
	g.mc.join = fn
	g.mc.mu.Unlock()
}

// McastGroups returns the groups that have QPs attached, for the RoCE
// device's receive filter and for tests.
func (g *Group) McastGroups() []ibv.GID {
	t := g.mc.table.Load()
	if t == nil {
		return nil
	}
	return slices.Collect(maps.Keys(t.groups))
}

// McastAttached reports whether any QP is attached to group gid: the RoCE
// device takes the group's frames then. It takes no lock.
func (g *Group) McastAttached(gid ibv.GID) bool {
	t := g.mc.table.Load()
	return t != nil && len(t.groups[gid]) > 0
}

// AttachMcast attaches the QP to multicast group gid (ibv_attach_mcast):
// its datagrams to QP 0xFFFFFF with that DGID reach the QP. Only UD QPs
// attach, to multicast GIDs (ErrInvalidArgument); attaching twice is
// allowed and does nothing, as in rxe. lid is ignored: RoCE has no LIDs.
func (q *QP) AttachMcast(gid ibv.GID, lid uint16) error {
	_ = lid
	if err := q.checkMcast(gid); err != nil {
		return fmt.Errorf("attach multicast: %w", err)
	}
	g := q.home.Load().g
	m := &g.mc
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.table.Load()
	if old == nil {
		old = &mcastTable{}
	}
	qps := old.groups[gid]
	switch {
	case slices.Contains(qps, q):
		return nil
	case len(qps) == 0 && len(old.groups) >= ibv.MaxMcastGroups,
		len(qps) >= ibv.MaxMcastQPAttach, old.total >= ibv.MaxTotalMcastQPAttach:
		return fmt.Errorf("attach multicast %v: %w", gid, ibv.ErrMcastLimit)
	}
	// A QP destroyed meanwhile would stay in the table: Destroy detaches
	// under m.mu too, so check under it.
	if g.qpOf(q) != q {
		return fmt.Errorf("attach multicast: QP %d destroyed: %w", q.qpn, ibv.ErrInvalidArgument)
	}
	m.table.Store(old.with(gid, append(slices.Clip(qps), q)))
	// The link joins once the QP takes the group's datagrams: whoever
	// sees the interface in the group may send.
	if len(qps) == 0 && m.join != nil {
		if err := m.join(gid, true); err != nil {
			m.table.Store(old)
			return fmt.Errorf("attach multicast %v: join: %w", gid, err)
		}
	}
	return nil
}

// DetachMcast detaches the QP from group gid (ibv_detach_mcast); a QP not
// attached to it fails with ErrInvalidArgument, as rxe's does.
func (q *QP) DetachMcast(gid ibv.GID, lid uint16) error {
	_ = lid
	if err := q.checkMcast(gid); err != nil {
		return fmt.Errorf("detach multicast: %w", err)
	}
	g := q.home.Load().g
	g.mc.mu.Lock()
	defer g.mc.mu.Unlock()
	if !g.detachLocked(q, gid) {
		return fmt.Errorf("detach multicast: QP %d not attached to %v: %w", q.qpn, gid, ibv.ErrInvalidArgument)
	}
	return nil
}

// checkMcast checks what ibv_attach_mcast and ibv_detach_mcast refuse
// with EINVAL: a QP other than UD, a GID that is not multicast.
func (q *QP) checkMcast(gid ibv.GID) error {
	switch {
	case q.typ != ibv.QPTypeUD || q.qpn == gsiQPN:
		return fmt.Errorf("%v QP %d: %w", q.typ, q.qpn, ibv.ErrInvalidArgument)
	case !gid.IsMulticast():
		return fmt.Errorf("GID %v is not multicast: %w", gid, ibv.ErrInvalidArgument)
	}
	return nil
}

// detachLocked removes q from group gid, leaving the group when q was its
// last QP; it reports whether q was attached. Called with mc.mu held.
func (g *Group) detachLocked(q *QP, gid ibv.GID) bool {
	m := &g.mc
	old := m.table.Load()
	if old == nil {
		return false
	}
	qps := old.groups[gid]
	i := slices.Index(qps, q)
	if i < 0 {
		return false
	}
	rest := slices.Delete(slices.Clone(qps), i, i+1)
	m.table.Store(old.with(gid, rest))
	if len(rest) == 0 && m.join != nil {
		// Nothing to undo if leaving fails: the filter lets through
		// frames no QP takes, which the engine drops.
		_ = m.join(gid, false)
	}
	return true
}

// detachAllMcast detaches q from every group, before it is destroyed.
func (g *Group) detachAllMcast(q *QP) {
	m := &g.mc
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.table.Load()
	if t == nil {
		return
	}
	for gid, qps := range t.groups {
		if slices.Contains(qps, q) {
			g.detachLocked(q, gid)
		}
	}
}

// with returns a copy of t in which group gid has qps (none: the group
// is gone).
func (t *mcastTable) with(gid ibv.GID, qps []*QP) *mcastTable {
	n := &mcastTable{groups: make(map[ibv.GID][]*QP, len(t.groups)+1), total: t.total - len(t.groups[gid]) + len(qps)}
	for k, v := range t.groups {
		n.groups[k] = v
	}
	if len(qps) == 0 {
		delete(n.groups, gid)
	} else {
		n.groups[gid] = qps
	}
	return n
}

// qpOf returns the group's QP of q's number, if q is still there.
func (g *Group) qpOf(q *QP) *QP {
	var got *QP
	g.Do(func() error { got = g.qps[q.qpn]; return nil })
	return got
}

// receiveMcast delivers a multicast datagram to every QP attached to its
// DGID: those of this engine now, and a copy to each other engine that
// has some, once per engine; a forwarded copy goes to this engine's QPs
// only (the engine it arrived at forwarded it to the others).
func (e *Engine) receiveMcast(ib []byte, p *header.Packet, info *RecvInfo, forwarded bool) {
	t := e.g.mc.table.Load()
	var qps []*QP
	if t != nil {
		qps = t.groups[info.DGID]
	}
	if len(qps) == 0 {
		inc(&e.Ctr.RxNoQP)
		return
	}
	var sent uint64 // the engines (by index, below 64) a copy went to
	for i, q := range qps {
		if q.e != e {
			if !forwarded && !forwardedBefore(qps[:i], q.e, sent) {
				if q.e.index < 64 {
					sent |= 1 << q.e.index
				}
				e.forwardTo(q.e, ib, info)
			}
			continue
		}
		inc(&q.ctr.RxPackets)
		add(&q.ctr.RxBytes, uint64(len(ib)))
		if q.st < ibv.QPSRTR || q.st == ibv.QPSErr {
			inc(&e.Ctr.RxFiltered)
			continue
		}
		e.ud.receive(q, p, info) // checks the Q_Key of each QP
	}
}

// forwardedBefore reports whether a copy already went to engine to: its
// bit in sent, or, past 64 engines, a QP of to earlier in the group.
func forwardedBefore(earlier []*QP, to *Engine, sent uint64) bool {
	if to.index < 64 {
		return sent&(1<<to.index) != 0
	}
	for _, q := range earlier {
		if q.e == to {
			return true
		}
	}
	return false
}
