package ibtransport

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// recvWQE is a posted receive.
type recvWQE struct {
	id  uint64
	sge []ibv.SGE
}

// RecvQueue is a ring of posted receives: a QP's own receive queue, or the
// ring inside a verbs SRQ. Posters (any goroutine, serialised by a mutex)
// fill it; the engine goroutine consumes it without locking.
type RecvQueue struct {
	mu     sync.Mutex
	slots  []recvWQE
	mask   uint32
	maxSGE int
	tail   atomic.Uint32
	head   atomic.Uint32
}

// Init sizes the ring for at least n receives of at most maxSGE elements.
func (r *RecvQueue) Init(n, maxSGE int) {
	size := 1 << bits.Len(uint(max(n, 1)-1))
	r.slots = make([]recvWQE, size)
	r.mask = uint32(size - 1)
	r.maxSGE = maxSGE
	backing := make([]ibv.SGE, size*maxSGE)
	for i := range r.slots {
		r.slots[i].sge = backing[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
	}
}

// Post posts a receive; its SGL is copied.
func (r *RecvQueue) Post(wr *ibv.RecvWR) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.postLocked(wr)
}

// PostList posts wrs in order and returns how many it posted.
func (r *RecvQueue) PostList(wrs []ibv.RecvWR) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range wrs {
		if err := r.postLocked(&wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

func (r *RecvQueue) postLocked(wr *ibv.RecvWR) error {
	if len(wr.SGL) > r.maxSGE {
		return fmt.Errorf("post receive: %d SGEs, at most %d: %w", len(wr.SGL), r.maxSGE, ibv.ErrInvalidArgument)
	}
	t := r.tail.Load()
	if t-r.head.Load() >= uint32(len(r.slots)) {
		return fmt.Errorf("post receive: %w", ibv.ErrQueueFull)
	}
	s := &r.slots[t&r.mask]
	s.id = wr.ID
	s.sge = append(s.sge[:0], wr.SGL...)
	r.tail.Store(t + 1)
	return nil
}

// peek returns the oldest posted receive, or nil; engine only.
func (r *RecvQueue) peek() *recvWQE {
	h := r.head.Load()
	if h == r.tail.Load() {
		return nil
	}
	return &r.slots[h&r.mask]
}

func (r *RecvQueue) pop() { r.head.Add(1) }

// Len returns the number of receives posted and not yet consumed.
func (r *RecvQueue) Len() int { return int(r.tail.Load() - r.head.Load()) }

// Cap returns the number of receives the ring holds.
func (r *RecvQueue) Cap() int { return len(r.slots) }

// MaxSGE returns the most SGEs a receive may have.
func (r *RecvQueue) MaxSGE() int { return r.maxSGE }
