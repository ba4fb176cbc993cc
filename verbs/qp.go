package verbs

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport"
)

// QP is a queue pair (ibv_qp). On a device opened with Open its methods
// are the transport's QP's (ibtransport.QP); on one reached through a
// daemon (Dial) they go to the daemon's QP through the shared rings.
type QP struct {
	*ibtransport.QP
	remote *remoteQP
}

// newQP wraps a transport QP the device created.
func newQP(t *ibtransport.QP) *QP {
	q := &QP{QP: t}
	t.Owner = q
	return q
}

// qpOf returns the verbs QP of a transport QP.
func qpOf(t *ibtransport.QP) *QP {
	q, _ := t.Owner.(*QP)
	return q
}

// PostSend posts a send work request (ibv_post_send).
func (q *QP) PostSend(wr *SendWR) error {
	if q.remote != nil {
		return q.remote.postSend(wr)
	}
	return q.QP.PostSend(wr)
}

// PostSendList posts several send work requests in order; it returns how
// many it posted (on an error, wrs[n] failed).
func (q *QP) PostSendList(wrs []SendWR) (int, error) {
	if q.remote == nil {
		return q.QP.PostSendList(wrs)
	}
	for i := range wrs {
		if err := q.remote.postSend(&wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

// PostRecv posts a receive work request (ibv_post_recv).
func (q *QP) PostRecv(wr *RecvWR) error {
	if q.remote != nil {
		return q.remote.postRecv(wr)
	}
	return q.QP.PostRecv(wr)
}

// PostRecvList posts several receives; it returns how many it posted.
func (q *QP) PostRecvList(wrs []RecvWR) (int, error) {
	if q.remote == nil {
		return q.QP.PostRecvList(wrs)
	}
	for i := range wrs {
		if err := q.remote.postRecv(&wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

// Modify changes the QP's attributes (ibv_modify_qp).
func (q *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	if q.remote != nil {
		return q.remote.modify(attr, mask)
	}
	return q.QP.Modify(attr, mask)
}

// Query returns the QP's attributes (ibv_query_qp); through a daemon,
// those this process set.
func (q *QP) Query() QPAttr {
	if q.remote != nil {
		q.remote.mu.Lock()
		defer q.remote.mu.Unlock()
		a := q.remote.attr
		a.State = q.State()
		return a
	}
	return q.QP.Query()
}

// QPN returns the QP number.
func (q *QP) QPN() uint32 {
	if q.remote != nil {
		return q.remote.q.QPN
	}
	return q.QP.QPN()
}

// State returns the QP's state; through a daemon, as the daemon last
// published it, or ERR once the QP's events or error completions said it
// went there.
func (q *QP) State() QPState {
	if q.remote != nil {
		return q.remote.state()
	}
	return q.QP.State()
}

// Type returns the QP's transport service.
func (q *QP) Type() QPType {
	if q.remote != nil {
		return q.remote.typ
	}
	return q.QP.Type()
}

// Cap returns the QP's queue sizes.
func (q *QP) Cap() QPCap {
	if q.remote != nil {
		return q.remote.cap
	}
	return q.QP.Cap()
}

// EngineIndex returns the index of the engine that runs the QP; 0 through
// a daemon, whose engines this process does not see.
func (q *QP) EngineIndex() int {
	if q.remote != nil {
		return 0
	}
	return q.QP.EngineIndex()
}

// Destroy destroys the QP (ibv_destroy_qp).
func (q *QP) Destroy() error {
	if q.remote != nil {
		return q.remote.destroy()
	}
	return q.QP.Destroy()
}

// String names the QP and its state.
func (q *QP) String() string {
	if q.remote != nil {
		return fmt.Sprintf("QP %d (%v, through the daemon)", q.QPN(), q.State())
	}
	return q.QP.String()
}

// DebugState describes the QP's protocol state, for diagnostics.
func (q *QP) DebugState() string {
	if q.remote != nil {
		return q.String()
	}
	return q.QP.DebugState()
}
