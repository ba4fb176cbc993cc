package daemon

import (
	"encoding/binary"
	"errors"
	"sync/atomic"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/verbs"
)

// hostQueues is the clients' side of the engine (roce.HostQueues): on
// every pass of the first engine it looks at each session's doorbell and
// takes the work posted to that session's QPs. Only the first engine's
// goroutine calls its methods; the sessions change the list it reads by
// swapping it whole.
type hostQueues struct {
	list atomic.Pointer[[]*session]
	// backlog are queues whose engine queue was full: their remaining
	// entries are taken on the next passes without a doorbell.
	backlog []fetcher
}

// fetcher is a client's work queue the engine takes entries from: a QP's
// send and receive queues, or an SRQ.
type fetcher interface {
	// fetch takes the queue's posted entries to the engine and reports
	// whether some must wait for room there.
	fetch() (full bool)
	state() *fetchState
}

// fetchState is what the engine keeps about a fetcher.
type fetchState struct {
	// gone is set before the queue's ring is unmapped.
	gone atomic.Bool
	// Engine goroutine only: the client broke a queue's indices; the
	// queue waits in the backlog.
	broken, backlogged bool
}

func (f *fetchState) state() *fetchState { return f }

func (h *hostQueues) init() { h.list.Store(&[]*session{}) }

// add and remove change the session list; the server's mu is held.
func (h *hostQueues) add(ss *session) {
	old := *h.list.Load()
	next := append(append(make([]*session, 0, len(old)+1), old...), ss)
	h.list.Store(&next)
}

func (h *hostQueues) remove(ss *session) {
	var next []*session
	for _, o := range *h.list.Load() {
		if o != ss {
			next = append(next, o)
		}
	}
	h.list.Store(&next)
}

func (h *hostQueues) Poll() bool {
	worked := h.retryBacklog()
	for _, ss := range *h.list.Load() {
		db := atomic.LoadUint32(ss.word(hostif.PageDoorbell))
		if db == ss.seenDoorbell {
			continue
		}
		ss.seenDoorbell = db
		worked = true
		for _, f := range *ss.fetchers.Load() {
			if st := f.state(); f.fetch() && !st.backlogged {
				st.backlogged = true
				h.backlog = append(h.backlog, f)
			}
		}
	}
	return worked
}

func (h *hostQueues) retryBacklog() bool {
	if len(h.backlog) == 0 {
		return false
	}
	left := h.backlog[:0]
	for _, f := range h.backlog {
		st := f.state()
		if st.backlogged = !st.gone.Load() && f.fetch(); st.backlogged {
			left = append(left, f)
		}
	}
	clear(h.backlog[len(left):])
	h.backlog = left
	return true
}

// Sleep tells every session to ring the doorbell eventfd, then looks at
// the doorbells once more (the client increments its doorbell, then reads
// sleeping; the engine sets sleeping, then reads the doorbell: one of the
// two sees the other's store).
func (h *hostQueues) Sleep() bool {
	if len(h.backlog) > 0 {
		return false
	}
	list := *h.list.Load()
	for _, ss := range list {
		atomic.StoreUint32(ss.word(hostif.PageSleeping), 1)
	}
	for _, ss := range list {
		if atomic.LoadUint32(ss.word(hostif.PageDoorbell)) != ss.seenDoorbell {
			return false
		}
	}
	return true
}

func (h *hostQueues) Awake() {
	for _, ss := range *h.list.Load() {
		atomic.StoreUint32(ss.word(hostif.PageSleeping), 0)
	}
}

// hostQP is a session's QP as the daemon holds it: the verbs QP that runs
// it and the rings its client posts to.
type hostQP struct {
	handle uint32
	qp     *verbs.QP
	ring   *ring
	sq, rq *hostif.WorkQueue
	sdec   *hostif.SendDecoder
	rdec   *hostif.RecvDecoder
	send   ibv.SendWR
	recv   ibv.RecvWR
	// sqDone and rqDone keep the rings' consumer indices at the work
	// requests done (rqDone nil on an SRQ); entries dropped here count.
	sqDone, rqDone *ibtransport.RetiredMirror
	fetchState
	pd, sc, rc, srq uint32
	// xrcd is an XRC receive QP's domain handle; such a QP has no queues
	// for the engine to fetch from.
	xrcd uint32
	// mcast is the groups the QP is attached to (attach_mcast), which
	// count against its user's McastAttachments.
	mcast map[ibv.GID]struct{}
}

// fetch takes the QP's posted entries to the engine and reports whether
// some must wait for room in the engine's queues.
func (q *hostQP) fetch() (full bool) {
	if q.broken {
		return false
	}
	full = q.fetchSends()
	if q.rq != nil && q.fetchRecvs() {
		full = true
	}
	return full
}

func (q *hostQP) fetchSends() (full bool) {
	n, ok := q.sq.Pending()
	if !ok {
		q.breakQP()
		return false
	}
	cons := q.sq.Taken()
	for i := range n {
		e := q.sq.Entry(cons + i)
		err := q.sdec.Decode(e, &q.send)
		if err == nil {
			err = q.qp.PostSend(&q.send)
		}
		if err != nil && !errors.Is(err, verbs.ErrQueueFull) && !errors.Is(err, verbs.ErrInvalidState) {
			// An entry the daemon cannot decode, or one the QP refuses
			// (too many SGEs, an AH destroyed...): a LOC_QP_OP_ERR
			// completion and the QP in the error state.
			err = q.qp.Transport().PostSendError(binary.LittleEndian.Uint64(e), verbs.WCLocQPOpErr)
		}
		if errors.Is(err, verbs.ErrQueueFull) {
			q.sq.Take(i)
			return true
		}
		if err != nil {
			// A QP not yet in RTS drops the entry (the client's
			// provider checks the QP's state before it posts): done.
			q.sqDone.Skip(1)
		}
	}
	q.sq.Take(n)
	return false
}

func (q *hostQP) fetchRecvs() (full bool) {
	full, ok := fetchRecvs(q.rq, q.rdec, &q.recv, q.qp.PostRecv, q.rqDone)
	if !ok {
		q.breakQP()
	}
	return full
}

// fetchRecvs takes the receive entries of wq to post, and reports whether
// some must wait for room in the engine's queue, and false if the client
// broke wq's indices. An entry that cannot be decoded is posted with
// memory no region has (poisonSGL). One the queue refuses (a QP in RESET)
// is dropped, and counted done in done.
func fetchRecvs(wq *hostif.WorkQueue, dec *hostif.RecvDecoder, wr *ibv.RecvWR, post func(*ibv.RecvWR) error,
	done *ibtransport.RetiredMirror) (full, ok bool) {
	n, ok := wq.Pending()
	if !ok {
		return false, false
	}
	cons := wq.Taken()
	for i := range n {
		e := wq.Entry(cons + i)
		if err := dec.Decode(e, wr); err != nil {
			*wr = ibv.RecvWR{ID: binary.LittleEndian.Uint64(e), SGL: poisonSGL[:]}
		}
		err := post(wr)
		if errors.Is(err, verbs.ErrQueueFull) {
			wq.Take(i)
			return true, true
		}
		if err != nil && done != nil {
			done.Skip(1)
		}
	}
	wq.Take(n)
	return false, true
}

// hostSRQ is a session's shared receive queue: the verbs SRQ the engines
// take receives from, and the ring its client posts to.
type hostSRQ struct {
	srq  *verbs.SRQ
	ring *ring
	wq   *hostif.WorkQueue
	dec  *hostif.RecvDecoder
	recv ibv.RecvWR
	pd   uint32
	// xrcd is an XRC SRQ's domain handle, 0 on others; cq the handle of
	// an XRC or tag matching SRQ's CQ.
	xrcd, cq uint32
	// done keeps the ring's consumer index at the receives the engines
	// took; entries dropped here count.
	done *ibtransport.RetiredMirror
	// A tag matching SRQ's: the tagged buffers it holds of the user's
	// budget (Limits.TMTags).
	tags int
	fetchState
}

func (s *hostSRQ) fetch() (full bool) {
	if s.broken {
		return false
	}
	full, ok := fetchRecvs(s.wq, s.dec, &s.recv, s.srq.PostRecv, s.done)
	s.broken = !ok // its QPs go on with the receives already posted
	return full
}

// poisonSGL names memory no region has (keys are never 0): a receive the
// daemon could not decode takes it, and completes with a local protection
// error when a message arrives for it.
var poisonSGL = [1]ibv.SGE{{Length: 1}}

// breakQP handles a queue whose indices the client broke: an error
// completion (wr_id 0) moves the QP to the error state, and its queues are
// not looked at again.
func (q *hostQP) breakQP() {
	q.broken = true
	q.qp.Transport().PostSendError(0, verbs.WCLocQPOpErr)
}
