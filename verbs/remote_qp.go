package verbs

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport"
)

// CreateQP makes the QP in the daemon.
func (p *remotePD) CreateQP(q *QP, init *QPInitAttr) (qpOps, error) {
	return p.createQPThrough(q, init, (*client.Conn).CreateQP)
}

// createQPThrough makes a QP with create, which sends the command that
// makes it in the daemon (create_qp, or cm_create_qp for an rdma_cm ID).
func (p *remotePD) createQPThrough(front *QP, init *QPInitAttr,
	create func(*client.Conn, hostif.CreateQPRequest) (*client.QP, error)) (*remoteQP, error) {
	c := init.Cap
	var srq *remoteSRQ
	var srqHandle uint32
	if init.SRQ != nil {
		srq = init.SRQ.ops.(*remoteSRQ) // of this PD, so of this device
		srqHandle = srq.s.Handle
	}
	r := p.r
	h := r.objects.handle()
	sendCQ, recvCQ := init.SendCQ.ops.(*remoteCQ), init.RecvCQ.ops.(*remoteCQ)
	req := hostif.CreateQPRequest{PD: p.handle, Type: uint32(init.Type), SendCQ: sendCQ.handle, RecvCQ: recvCQ.handle,
		SRQ: srqHandle, MaxSendWR: uint32(c.MaxSendWR), MaxRecvWR: uint32(max(c.MaxRecvWR, 1)), MaxSendSGE: uint32(c.MaxSendSGE),
		MaxRecvSGE: uint32(c.MaxRecvSGE), MaxInline: uint32(c.MaxInlineData), UserHandle: h}
	var q *client.QP
	err := r.call(func(cl *client.Conn) (err error) { q, err = create(cl, req); return err })
	if err != nil {
		return nil, fmt.Errorf("create QP: %w", daemonErr(err))
	}
	c.MaxInlineData = int(q.MaxInline) // rounded up, as in process
	rq := &remoteQP{qp: front, q: q, r: r, handle: h, cap: c, typ: init.Type, sigAll: init.SigAll, srq: srq}
	r.objects.add(h, rq)
	return rq, nil
}

// remoteQP is a QP the daemon runs. Posts go into its shared rings; the
// state is the daemon's, as last set through Modify, or ERR once this
// process learned that the QP went there by itself (failed).
type remoteQP struct {
	qp     *QP // the API's QP, which events name
	q      *client.QP
	r      *remote
	handle uint64 // the user handle its events carry
	cap    QPCap
	typ    QPType
	sigAll bool
	srq    *remoteSRQ
	mu     sync.Mutex // serialises posters, as the transport's poster locks do
	attr   QPAttr
	// failed is set by a QP_FATAL or LAST_WQE_REACHED event and by an
	// error completion of an RC QP (remoteObjects.noteCompletions), and
	// cleared by Modify: the daemon publishes the state in the QP's ring
	// only when this process modifies it.
	failed atomic.Bool
	// counters stay zero: the daemon's engines count.
	counters ibtransport.QPCounters
}

// state is the QP's state as far as this process knows. A QP in RESET or
// INIT sends and receives nothing, so it cannot have failed since: an
// event about its previous life that came late does not count.
func (r *remoteQP) State() QPState {
	s := QPState(r.q.State())
	if r.failed.Load() && s != QPSReset && s != QPSInit {
		return QPSErr
	}
	return s
}

// checkSend refuses what the transport's QP refuses at post time, before
// the daemon would fail the QP for it: a QP not ready to send, what
// ibtransport.CheckSendWR refuses, and a UD send without an AH of this
// device, whose daemon handle it returns. A device whose daemon is gone
// gets that error first, whatever the QP's last known state.
func (r *remoteQP) checkSend(wr *SendWR) (ah uint32, err error) {
	if err := r.r.Err(); err != nil {
		return 0, err
	}
	switch st := r.State(); st {
	case QPSReset, QPSInit, QPSRTR:
		return 0, fmt.Errorf("post send on QP %d: %w (%v)", r.q.QPN, ErrInvalidState, st)
	}
	lim := ibtransport.SendLimits{MaxSGE: max(r.cap.MaxSendSGE, 1), MaxInline: r.cap.MaxInlineData}
	if err := ibtransport.CheckSendWR(r.typ, lim, wr); err != nil || r.typ != QPTypeUD {
		return 0, err
	}
	h, ok := r.r.objects.ahHandle(wr.AH)
	if wr.AH == nil || !ok {
		return 0, fmt.Errorf("post send: UD send without a valid AH: %w", ErrInvalidArgument)
	}
	return h, nil
}

func (r *remoteQP) PostSend(wr *SendWR) error {
	ah, err := r.checkSend(wr)
	if err != nil {
		return err
	}
	if r.sigAll && wr.Flags&SendSignaled == 0 {
		w := *wr
		w.Flags |= SendSignaled
		wr = &w
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.q.PostSendTo(wr, ah); err != nil {
		return fmt.Errorf("post send on QP %d: %w", r.q.QPN, remoteErr(err))
	}
	return nil
}

func (r *remoteQP) PostRecv(wr *RecvWR) error {
	if err := r.r.Err(); err != nil {
		return err
	}
	switch {
	case r.srq != nil:
		return fmt.Errorf("post receive on QP %d: the QP uses an SRQ: %w", r.q.QPN, ErrInvalidArgument)
	case r.State() == QPSReset:
		return fmt.Errorf("post receive on QP %d: %w (RESET)", r.q.QPN, ErrInvalidState)
	case len(wr.SGL) > max(r.cap.MaxRecvSGE, 1):
		return fmt.Errorf("post receive: %d SGEs, at most %d: %w", len(wr.SGL), r.cap.MaxRecvSGE, ErrInvalidArgument)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.q.PostRecv(wr); err != nil {
		return fmt.Errorf("post receive on QP %d: %w", r.q.QPN, remoteErr(err))
	}
	return nil
}

// remoteErr maps a full ring to the error the transport's queues give, and
// an entry the ring cannot hold to a bad argument.
func remoteErr(err error) error {
	switch {
	case err == client.ErrQueueFull:
		return ErrQueueFull
	case errors.Is(err, hostif.ErrBadEntry):
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return err
}

// modify sets the QP's attributes in the daemon. From then on the state
// word of the QP's ring is the daemon's word again: what the QP was known
// to have done before does not count, unless the daemon refused the change.
// An event that comes during the call is kept.
func (r *remoteQP) Modify(attr *QPAttr, mask QPAttrMask) error {
	failed := r.failed.Swap(false)
	err := r.r.call(func(*client.Conn) error { return r.q.Modify(attr, mask) })
	if err != nil {
		if failed {
			r.failed.Store(true)
		}
		return fmt.Errorf("modify QP %d: %w", r.q.QPN, daemonErr(err))
	}
	r.mu.Lock()
	r.attr.Merge(attr, mask)
	r.mu.Unlock()
	return nil
}

func (r *remoteQP) Destroy() error {
	err := r.r.call(func(*client.Conn) error { return r.q.Destroy() })
	if err != nil {
		return fmt.Errorf("destroy QP %d: %w", r.q.QPN, daemonErr(err))
	}
	r.r.objects.remove(r.handle)
	return nil
}

// PostSendList posts wrs one by one into the ring.
func (r *remoteQP) PostSendList(wrs []SendWR) (int, error) {
	for i := range wrs {
		if err := r.PostSend(&wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

// PostRecvList posts wrs one by one into the ring.
func (r *remoteQP) PostRecvList(wrs []RecvWR) (int, error) {
	for i := range wrs {
		if err := r.PostRecv(&wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

// Query returns the attributes this process set, with the state as far
// as it knows.
func (r *remoteQP) Query() QPAttr {
	r.mu.Lock()
	a := r.attr
	r.mu.Unlock()
	a.State = r.State()
	return a
}

func (r *remoteQP) QPN() uint32      { return r.q.QPN }
func (r *remoteQP) Type() QPType     { return r.typ }
func (r *remoteQP) Cap() QPCap       { return r.cap }
func (r *remoteQP) EngineIndex() int { return 0 }

// Counters are the daemon's (softnic stat): here they stay zero, as
// CongestionRate does.
func (r *remoteQP) Counters() *ibtransport.QPCounters { return &r.counters }
func (r *remoteQP) CongestionRate() uint64            { return 0 }

func (r *remoteQP) String() string {
	return fmt.Sprintf("QP %d (%v, through the daemon)", r.q.QPN, r.State())
}

func (r *remoteQP) DebugState() string { return r.String() }
