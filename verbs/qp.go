package verbs

import (
	"fmt"
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce"
)

// QP is a queue pair (ibv_qp). Its backend runs it: on a device opened
// with Open, the transport's QP (ibtransport.QP); on one reached through
// a daemon (client.DialDevice), the daemon's QP, which this process posts to through
// the shared rings (remoteQP).
type QP struct {
	ops QPOps
	dev *Device
	// flows counts the QP's flows (flow.go): while it has any, Destroy
	// fails with ErrBusy, as the kernel's uverbs refuses it.
	flows atomic.Int32
	// rss is set on an RSS QP (rss.go): its flows spread frames over
	// table; tables counts the RSS QPs whose table holds this QP (one per
	// entry), which keep it from being destroyed, as the kernel keeps a
	// work queue of an indirection table.
	rss    *roce.RSS
	table  []*QP
	tables atomic.Int32
}

// qpOf returns the verbs QP of a transport QP.
func qpOf(t *ibtransport.QP) *QP {
	q, _ := t.Owner.(*QP)
	return q
}

// Transport returns the transport's QP behind q on a device opened with
// Open, and nil through a daemon: the daemon, which hosts its clients'
// QPs on its own device, mirrors their rings with it.
func (q *QP) Transport() *ibtransport.QP {
	switch o := q.ops.(type) {
	case *ibtransport.QP:
		return o
	case *xrcQP:
		return o.QP
	}
	return nil
}

// PostSend posts a send work request (ibv_post_send).
func (q *QP) PostSend(wr *SendWR) error { return q.ops.PostSend(wr) }

// PostSendList posts several send work requests in order; it returns how
// many it posted (on an error, wrs[n] failed).
func (q *QP) PostSendList(wrs []SendWR) (int, error) { return q.ops.PostSendList(wrs) }

// PostRecv posts a receive work request (ibv_post_recv).
func (q *QP) PostRecv(wr *RecvWR) error { return q.ops.PostRecv(wr) }

// PostRecvList posts several receives; it returns how many it posted.
func (q *QP) PostRecvList(wrs []RecvWR) (int, error) { return q.ops.PostRecvList(wrs) }

// Modify changes the QP's attributes (ibv_modify_qp).
func (q *QP) Modify(attr *QPAttr, mask QPAttrMask) error { return q.ops.Modify(attr, mask) }

// Query returns the QP's attributes (ibv_query_qp); through a daemon,
// those this process set.
func (q *QP) Query() QPAttr { return q.ops.Query() }

// QPN returns the QP number.
func (q *QP) QPN() uint32 { return q.ops.QPN() }

// State returns the QP's state; through a daemon, as the daemon last
// published it, or ERR once the QP's events or error completions said it
// went there.
func (q *QP) State() QPState { return q.ops.State() }

// Type returns the QP's transport service.
func (q *QP) Type() QPType { return q.ops.Type() }

// Cap returns the QP's queue sizes.
func (q *QP) Cap() QPCap { return q.ops.Cap() }

// EngineIndex returns the index of the engine that runs the QP; 0 through
// a daemon, whose engines this process does not see.
func (q *QP) EngineIndex() int { return q.ops.EngineIndex() }

// Counters returns the QP's transport counters; through a daemon all zero,
// as they are the daemon's (softnic stat).
func (q *QP) Counters() *ibv.QPCounters { return q.ops.Counters() }

// CongestionRate returns the rate DCQCN holds the QP's sends to, in
// bits per second, or 0 while it is not rate limited (always 0 through a
// daemon, whose engines run the QP).
func (q *QP) CongestionRate() uint64 { return q.ops.CongestionRate() }

// Destroy destroys the QP (ibv_destroy_qp).
func (q *QP) Destroy() error {
	if err := q.Busy(); err != nil {
		return err
	}
	if err := q.ops.Destroy(); err != nil {
		return err
	}
	for _, w := range q.table {
		w.tables.Add(-1)
	}
	q.table = nil
	return nil
}

// Busy says why Destroy would fail with ErrBusy, nil when it would not:
// the QP has flows, or is in an RSS QP's table.
func (q *QP) Busy() error {
	if n := q.flows.Load(); n > 0 {
		return fmt.Errorf("destroy QP %d: %d flows: %w", q.QPN(), n, ErrBusy)
	}
	if n := q.tables.Load(); n > 0 {
		return fmt.Errorf("destroy QP %d: in %d entries of RSS tables: %w", q.QPN(), n, ErrBusy)
	}
	return nil
}

// AttachMcast attaches the QP to multicast group gid (ibv_attach_mcast):
// datagrams to the group (QP 0xFFFFFF, DGID gid) reach it, from the link
// and from the device's own QPs. Only UD QPs attach, to multicast GIDs
// (ErrInvalidArgument); past the device's multicast limits
// (DeviceAttr.MaxMcastGrp ...) it fails with ErrMcastLimit. lid is
// ignored on RoCE.
func (q *QP) AttachMcast(gid GID, lid uint16) error { return q.ops.AttachMcast(gid, lid) }

// DetachMcast detaches the QP from group gid (ibv_detach_mcast); a QP not
// attached to it fails with ErrInvalidArgument. Destroying the QP
// detaches it from every group.
func (q *QP) DetachMcast(gid GID, lid uint16) error { return q.ops.DetachMcast(gid, lid) }

// String names the QP and its state.
func (q *QP) String() string { return q.ops.String() }

// DebugState describes the QP's protocol state, for diagnostics.
func (q *QP) DebugState() string { return q.ops.DebugState() }
