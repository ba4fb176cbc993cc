package verbs

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
)

func (pd *PD) remoteQP(init *QPInitAttr) (*QP, error) {
	return pd.remoteQPThrough(init, (*client.Conn).CreateQP)
}

// remoteQPThrough makes a QP with create, which sends the command that
// makes it in the daemon (create_qp, or cm_create_qp for an rdma_cm ID).
func (pd *PD) remoteQPThrough(init *QPInitAttr, create func(*client.Conn, hostif.CreateQPRequest) (*client.QP, error)) (*QP, error) {
	c := init.Cap
	var srq uint32
	if init.SRQ != nil {
		if init.SRQ.pd != pd || init.SRQ.remote == nil {
			return nil, fmt.Errorf("create QP: SRQ of another protection domain: %w", ErrInvalidArgument)
		}
		srq = init.SRQ.remote.s.Handle
	}
	r := pd.dev.remote
	h := r.objects.handle()
	req := hostif.CreateQPRequest{PD: pd.handle, Type: uint32(init.Type), SendCQ: init.SendCQ.handle, RecvCQ: init.RecvCQ.handle,
		SRQ: srq, MaxSendWR: uint32(c.MaxSendWR), MaxRecvWR: uint32(max(c.MaxRecvWR, 1)), MaxSendSGE: uint32(c.MaxSendSGE),
		MaxRecvSGE: uint32(c.MaxRecvSGE), MaxInline: uint32(c.MaxInlineData), UserHandle: h}
	var q *client.QP
	err := r.call(func(cl *client.Conn) (err error) { q, err = create(cl, req); return err })
	if err != nil {
		return nil, fmt.Errorf("create QP: %w", daemonErr(err))
	}
	c.MaxInlineData = int(q.MaxInline) // rounded up, as in process
	qp := &QP{remote: &remoteQP{q: q, dev: pd.dev, handle: h, cap: c, typ: init.Type, sigAll: init.SigAll, srq: init.SRQ}}
	r.objects.add(h, qp)
	return qp, nil
}

// remoteQP is a QP the daemon runs. Posts go into its shared rings; the
// state is the daemon's, as last set through Modify, or ERR once this
// process learned that the QP went there by itself (failed).
type remoteQP struct {
	q      *client.QP
	dev    *Device
	handle uint64 // the user handle its events carry
	cap    QPCap
	typ    QPType
	sigAll bool
	srq    *SRQ
	mu     sync.Mutex // serialises posters, as the transport's poster locks do
	attr   QPAttr
	// failed is set by a QP_FATAL or LAST_WQE_REACHED event and by an
	// error completion of an RC QP (remoteObjects.noteCompletions), and
	// cleared by Modify: the daemon publishes the state in the QP's ring
	// only when this process modifies it.
	failed atomic.Bool
}

// state is the QP's state as far as this process knows. A QP in RESET or
// INIT sends and receives nothing, so it cannot have failed since: an
// event about its previous life that came late does not count.
func (r *remoteQP) state() QPState {
	s := QPState(r.q.State())
	if r.failed.Load() && s != QPSReset && s != QPSInit {
		return QPSErr
	}
	return s
}

// checkSend refuses what the transport's QP refuses at post time, before
// the daemon would fail the QP for it: a QP not ready to send, what
// ibv.CheckSendWR refuses, and a UD send without an AH of this
// device, whose daemon handle it returns. A device whose daemon is gone
// gets that error first, whatever the QP's last known state.
func (r *remoteQP) checkSend(wr *SendWR) (ah uint32, err error) {
	if err := r.dev.remoteGone(); err != nil {
		return 0, err
	}
	switch st := r.state(); st {
	case QPSReset, QPSInit, QPSRTR:
		return 0, fmt.Errorf("post send on QP %d: %w (%v)", r.q.QPN, ErrInvalidState, st)
	}
	lim := ibv.SendLimits{MaxSGE: max(r.cap.MaxSendSGE, 1), MaxInline: r.cap.MaxInlineData}
	if err := ibv.CheckSendWR(r.typ, lim, wr); err != nil || r.typ != QPTypeUD {
		return 0, err
	}
	h, ok := r.dev.remote.objects.ahHandle(wr.AH)
	if wr.AH == nil || !ok {
		return 0, fmt.Errorf("post send: UD send without a valid AH: %w", ErrInvalidArgument)
	}
	return h, nil
}

func (r *remoteQP) postSend(wr *SendWR) error {
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

func (r *remoteQP) postRecv(wr *RecvWR) error {
	if err := r.dev.remoteGone(); err != nil {
		return err
	}
	switch {
	case r.srq != nil:
		return fmt.Errorf("post receive on QP %d: the QP uses an SRQ: %w", r.q.QPN, ErrInvalidArgument)
	case r.state() == QPSReset:
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
func (r *remoteQP) modify(attr *QPAttr, mask QPAttrMask) error {
	failed := r.failed.Swap(false)
	err := r.dev.remote.call(func(*client.Conn) error { return r.q.Modify(attr, mask) })
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

func (r *remoteQP) destroy() error {
	err := r.dev.remote.call(func(*client.Conn) error { return r.q.Destroy() })
	if err != nil {
		return fmt.Errorf("destroy QP %d: %w", r.q.QPN, daemonErr(err))
	}
	r.dev.remote.objects.remove(r.handle)
	return nil
}
