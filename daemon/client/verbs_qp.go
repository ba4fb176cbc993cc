package client

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/verbs"
)

// CreateQP makes the QP in the daemon.
func (p *dialedPD) CreateQP(q *verbs.QP, init *verbs.QPInitAttr) (verbs.QPOps, error) {
	return p.createQPThrough(q, init, (*session.Conn).CreateQP)
}

// createQPThrough makes a QP with create, which sends the command that
// makes it in the daemon (create_qp, or cm_create_qp for an rdma_cm ID).
func (p *dialedPD) createQPThrough(front *verbs.QP, init *verbs.QPInitAttr,
	create func(*session.Conn, hostif.CreateQPRequest) (*session.QP, error)) (*dialedQP, error) {
	c := init.Cap
	var srq *dialedSRQ
	var srqHandle uint32
	if init.SRQ != nil {
		srq = init.SRQ.Backend().(*dialedSRQ) // of this PD, so of this device
		srqHandle = srq.s.Handle
	}
	r := p.r
	h := r.objects.handle()
	sendCQ := init.SendCQ.Backend().(*dialedCQ)
	var recvCQ uint32 // none on an XRC send QP
	maxRecv := uint32(max(c.MaxRecvWR, 1))
	if init.RecvCQ != nil {
		recvCQ = init.RecvCQ.Backend().(*dialedCQ).handle
	} else {
		maxRecv = 0
	}
	req := hostif.CreateQPRequest{PD: p.handle, Type: uint32(init.Type), SendCQ: sendCQ.handle, RecvCQ: recvCQ,
		SRQ: srqHandle, MaxSendWR: uint32(c.MaxSendWR), MaxRecvWR: maxRecv, MaxSendSGE: uint32(c.MaxSendSGE),
		MaxRecvSGE: uint32(c.MaxRecvSGE), MaxInline: uint32(c.MaxInlineData), UserHandle: h}
	var q *session.QP
	err := r.call(func(cl *session.Conn) (err error) { q, err = create(cl, req); return err })
	if err != nil {
		return nil, fmt.Errorf("create QP: %w", daemonErr(err))
	}
	c.MaxInlineData = int(q.MaxInline) // rounded up, as in process
	rq := &dialedQP{qp: front, q: q, r: r, handle: h, cap: c, typ: init.Type, sigAll: init.SigAll, srq: srq}
	r.objects.add(h, rq)
	return rq, nil
}

// dialedQP is a QP the daemon runs. Posts go into its shared rings; the
// state is the daemon's, as last set through Modify, or ERR once this
// process learned that the QP went there by itself (failed).
type dialedQP struct {
	qp     *verbs.QP // the API's session.QP, which events name
	q      *session.QP
	r      *dialed
	handle uint64 // the user handle its events carry
	cap    verbs.QPCap
	typ    verbs.QPType
	sigAll bool
	srq    *dialedSRQ
	mu     sync.Mutex // serialises posters, as the transport's poster locks do
	attr   verbs.QPAttr
	// failed is set by a QP_FATAL or LAST_WQE_REACHED event and by an
	// error completion of an RC QP (dialedObjects.noteCompletions), and
	// cleared by Modify: the daemon publishes the state in the QP's ring
	// only when this process modifies it.
	failed atomic.Bool
	// counters stay zero: the daemon's engines count.
	counters ibv.QPCounters
}

// state is the QP's state as far as this process knows. A QP in RESET or
// INIT sends and receives nothing, so it cannot have failed since: an
// event about its previous life that came late does not count.
func (r *dialedQP) State() verbs.QPState {
	s := verbs.QPState(r.q.State())
	if r.failed.Load() && s != verbs.QPSReset && s != verbs.QPSInit {
		return verbs.QPSErr
	}
	return s
}

// checkSend refuses what the transport's QP refuses at post time, before
// the daemon would fail the QP for it: a QP not ready to send, what
// ibv.CheckSendWR refuses, and a UD send without an AH of this
// device, whose daemon handle it returns. A device whose daemon is gone
// gets that error first, whatever the QP's last known state.
func (r *dialedQP) checkSend(wr *verbs.SendWR) (ah uint32, err error) {
	if err := r.r.Err(); err != nil {
		return 0, err
	}
	switch st := r.State(); st {
	case verbs.QPSReset, verbs.QPSInit, verbs.QPSRTR:
		return 0, fmt.Errorf("post send on session.QP %d: %w (%v)", r.q.QPN, verbs.ErrInvalidState, st)
	}
	lim := ibv.SendLimits{MaxSGE: max(r.cap.MaxSendSGE, 1), MaxInline: r.cap.MaxInlineData}
	if err := ibv.CheckSendWR(r.typ, lim, wr); err != nil || r.typ != verbs.QPTypeUD {
		return 0, err
	}
	h, ok := r.r.ahHandle(wr.AH)
	if wr.AH == nil || !ok {
		return 0, fmt.Errorf("post send: UD send without a valid AH: %w", verbs.ErrInvalidArgument)
	}
	return h, nil
}

func (r *dialedQP) PostSend(wr *verbs.SendWR) error {
	ah, err := r.checkSend(wr)
	if err != nil {
		return err
	}
	if r.sigAll && wr.Flags&verbs.SendSignaled == 0 {
		w := *wr
		w.Flags |= verbs.SendSignaled
		wr = &w
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.q.PostSendTo(wr, ah); err != nil {
		return fmt.Errorf("post send on session.QP %d: %w", r.q.QPN, ringErr(err))
	}
	return nil
}

func (r *dialedQP) PostRecv(wr *verbs.RecvWR) error {
	if err := r.r.Err(); err != nil {
		return err
	}
	switch {
	case r.typ.IsXRC():
		return fmt.Errorf("post receive on XRC QP %d: it has no receive queue: %w", r.q.QPN, verbs.ErrInvalidArgument)
	case r.srq != nil:
		return fmt.Errorf("post receive on session.QP %d: the session.QP uses an SRQ: %w", r.q.QPN, verbs.ErrInvalidArgument)
	case r.State() == verbs.QPSReset:
		return fmt.Errorf("post receive on session.QP %d: %w (RESET)", r.q.QPN, verbs.ErrInvalidState)
	case len(wr.SGL) > max(r.cap.MaxRecvSGE, 1):
		return fmt.Errorf("post receive: %d SGEs, at most %d: %w", len(wr.SGL), r.cap.MaxRecvSGE, verbs.ErrInvalidArgument)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.q.PostRecv(wr); err != nil {
		return fmt.Errorf("post receive on session.QP %d: %w", r.q.QPN, ringErr(err))
	}
	return nil
}

// ringErr maps a full ring to the error the transport's queues give, and
// an entry the ring cannot hold to a bad argument.
func ringErr(err error) error {
	switch {
	case err == session.ErrQueueFull:
		return verbs.ErrQueueFull
	case errors.Is(err, hostif.ErrBadEntry):
		return fmt.Errorf("%w: %w", verbs.ErrInvalidArgument, err)
	}
	return err
}

// modify sets the QP's attributes in the daemon. From then on the state
// word of the QP's ring is the daemon's word again: what the QP was known
// to have done before does not count, unless the daemon refused the change.
// An event that comes during the call is kept.
func (r *dialedQP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	failed := r.failed.Swap(false)
	err := r.r.call(func(*session.Conn) error { return r.q.Modify(attr, mask) })
	if err != nil {
		if failed {
			r.failed.Store(true)
		}
		return fmt.Errorf("modify session.QP %d: %w", r.q.QPN, daemonErr(err))
	}
	r.mu.Lock()
	r.attr.Merge(attr, mask)
	r.mu.Unlock()
	return nil
}

func (r *dialedQP) Destroy() error {
	err := r.r.call(func(*session.Conn) error { return r.q.Destroy() })
	if err != nil {
		return fmt.Errorf("destroy session.QP %d: %w", r.q.QPN, daemonErr(err))
	}
	r.r.objects.remove(r.handle)
	return nil
}

func (r *dialedQP) AttachMcast(gid verbs.GID, lid uint16) error {
	err := r.r.call(func(*session.Conn) error { return r.q.AttachMcast(gid, lid) })
	if errors.Is(err, unix.ENOMEM) { // past the device's or the user's multicast bounds
		return fmt.Errorf("attach multicast: %w: %w", verbs.ErrMcastLimit, err)
	}
	if err != nil {
		return fmt.Errorf("attach multicast: %w", daemonErr(err))
	}
	return nil
}

func (r *dialedQP) DetachMcast(gid verbs.GID, lid uint16) error {
	err := r.r.call(func(*session.Conn) error { return r.q.DetachMcast(gid, lid) })
	if err != nil {
		return fmt.Errorf("detach multicast: %w", daemonErr(err))
	}
	return nil
}

// postEach posts wrs one by one into a ring with post; it returns how
// many it posted (on an error, wrs[n] failed), as the List verbs do.
func postEach[WR any](wrs []WR, post func(*WR) error) (int, error) {
	for i := range wrs {
		if err := post(&wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

func (r *dialedQP) PostSendList(wrs []verbs.SendWR) (int, error) { return postEach(wrs, r.PostSend) }
func (r *dialedQP) PostRecvList(wrs []verbs.RecvWR) (int, error) { return postEach(wrs, r.PostRecv) }

// Query returns the attributes this process set, with the state as far
// as it knows.
func (r *dialedQP) Query() verbs.QPAttr {
	r.mu.Lock()
	a := r.attr
	r.mu.Unlock()
	a.State = r.State()
	return a
}

func (r *dialedQP) QPN() uint32        { return r.q.QPN }
func (r *dialedQP) Type() verbs.QPType { return r.typ }
func (r *dialedQP) Cap() verbs.QPCap   { return r.cap }
func (r *dialedQP) EngineIndex() int   { return 0 }

// Counters are the daemon's (softnic stat): here they stay zero, as
// CongestionRate does.
func (r *dialedQP) Counters() *ibv.QPCounters { return &r.counters }
func (r *dialedQP) CongestionRate() uint64    { return 0 }

func (r *dialedQP) String() string {
	return fmt.Sprintf("QP %d (%v, through the daemon)", r.q.QPN, r.State())
}

func (r *dialedQP) DebugState() string { return r.String() }
