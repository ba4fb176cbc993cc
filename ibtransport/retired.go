package ibtransport

import "sync/atomic"

// A RetiredMirror keeps a word in memory shared with a QP's owner (a
// daemon's client, whose ring it is) at the number of one work queue's
// entries that are done: retired by the engine, or skipped by the owner's
// fetcher without reaching the engine (Skip). The client reuses a ring slot
// only once this count has passed it, so a QP never holds more work requests
// than its depth, ring and engine queue together, as a hardware queue does
// not; and since the engine stores it before it posts the completion, a
// client that has polled a completion finds the slot free.
//
// Two goroutines store to the word: the QP's engine at each retirement and
// the fetcher at each skip. Each computes retired plus skipped from its
// own loads and stores it only if larger than the word (a CAS loop): the
// engine stores the retired index and then loads skipped, the fetcher adds
// to skipped and then loads the retired index, so (the loads and stores
// being sequentially consistent) at least one of the two sees both, and the
// word never goes back.
type RetiredMirror struct {
	word    *uint32
	retired *atomic.Uint32 // the queue's head
	skipped atomic.Uint32
}

// NewRecvRetiredMirror keeps *word at the number of rq's receives taken,
// counted from the word's value now, which must be rq's index: for an
// SRQ's owner, whose SharedRecvQueue.Consumed calls Publish.
func NewRecvRetiredMirror(word *uint32, rq *RecvQueue) *RetiredMirror {
	return newRetiredMirror(word, &rq.head)
}

// newRetiredMirror keeps word at head's count plus what the word is ahead
// of it now.
func newRetiredMirror(word *uint32, head *atomic.Uint32) *RetiredMirror {
	m := &RetiredMirror{word: word, retired: head}
	m.skipped.Store(atomic.LoadUint32(word) - head.Load())
	return m
}

// Publish brings the word up to the queue's count; from any goroutine.
func (m *RetiredMirror) Publish() { m.publish() }

// publish stores retired plus skipped in the word unless it holds more.
func (m *RetiredMirror) publish() {
	v := m.retired.Load() + m.skipped.Load()
	for {
		cur := atomic.LoadUint32(m.word)
		if int32(v-cur) <= 0 || atomic.CompareAndSwapUint32(m.word, cur, v) {
			return
		}
	}
}

// Skip counts n entries of the ring that the fetcher took but that never
// became work requests of the engine (posted to a QP in a state that takes
// none): they are done too.
func (m *RetiredMirror) Skip(n uint32) {
	m.skipped.Add(n)
	m.publish()
}

// ownerMirrors are the words a QP keeps current for its owner: the state,
// and its send and receive queues' retired counts (rq nil on an SRQ). Each
// Mirror call stores a new copy (setup, before the QP runs).
type ownerMirrors struct {
	state  *uint32
	sq, rq *RetiredMirror
}

// ownerMirrors returns a copy of q's mirrors, or new ones.
func (q *QP) ownerMirrors() *ownerMirrors {
	if m := q.mirrors.Load(); m != nil {
		c := *m
		return &c
	}
	return &ownerMirrors{}
}

// MirrorRetired keeps *sq and *rq (nil for a QP on an SRQ) at the number of
// the QP's send and receive work requests done from now until Destroy,
// counted from the words' values now, which must be the QP's queues'
// indices (0 for a new QP; see RetiredMirror). It returns the mirrors, for
// the fetcher's Skip. Call it before the QP leaves RESET.
func (q *QP) MirrorRetired(sq, rq *uint32) (sqm, rqm *RetiredMirror) {
	m := q.ownerMirrors()
	m.sq = newRetiredMirror(sq, &q.sq.head)
	if rq != nil && q.srq == nil {
		m.rq = NewRecvRetiredMirror(rq, &q.rq)
	}
	q.mirrors.Store(m)
	return m.sq, m.rq
}

// publishRetired brings the owner's words up to the queues' heads.
func (q *QP) publishRetired() {
	m := q.mirrors.Load()
	if m == nil {
		return
	}
	if m.sq != nil {
		m.sq.publish()
	}
	if m.rq != nil {
		m.rq.publish()
	}
}

// publishRecvRetired brings the owner's receive queue word up to its head.
func (q *QP) publishRecvRetired() {
	if m := q.mirrors.Load(); m != nil && m.rq != nil {
		m.rq.publish()
	}
}
