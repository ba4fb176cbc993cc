package hostif

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// ErrLayout is returned for a ring whose memory does not fit its depth and
// stride.
var ErrLayout = errors.New("hostif: ring does not fit its memory")

// word returns the u32 at off of mem for atomic access. mem comes from mmap
// or a large allocation, so every header offset is aligned.
func word(mem []byte, off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&mem[off]))
}

// checkRing checks that mem holds a header and depth entries of stride
// bytes, depth a power of two.
func checkRing(mem []byte, depth, stride int) error {
	if depth <= 0 || bits.OnesCount(uint(depth)) != 1 || stride < 16 || stride%8 != 0 ||
		len(mem) < HeaderSize || (len(mem)-HeaderSize)/stride < depth ||
		uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%8 != 0 {
		return fmt.Errorf("%w: %d bytes for %d entries of %d", ErrLayout, len(mem), depth, stride)
	}
	return nil
}

// Pow2 returns the least power of two not below n (1 for n below 1): ring
// depths and entry strides are powers of two.
func Pow2(n int) int { return 1 << bits.Len(uint(max(n, 1)-1)) }

// RingSize returns the bytes a ring of depth entries of stride bytes needs.
func RingSize(depth, stride int) int { return HeaderSize + depth*stride }

// WorkQueue is a send or receive queue in shared memory: the client fills
// entries and moves the producer index; the daemon takes them, and moves the
// consumer index as their slots become the client's again: when it takes
// them, or, for a QP's queues, as the engine retires them (RetiredWord).
type WorkQueue struct {
	mem    []byte
	mask   uint32
	stride int
	// next is the client's next entry to fill, published by Publish.
	next uint32
	// Daemon side: taken is the next entry to take; the consumer index
	// follows it unless the engine keeps that index (engineRetires).
	taken         uint32
	engineRetires bool
}

// NewWorkQueue returns the queue in mem.
func NewWorkQueue(mem []byte, depth, stride int) (*WorkQueue, error) {
	if err := checkRing(mem, depth, stride); err != nil {
		return nil, err
	}
	q := &WorkQueue{mem: mem, mask: uint32(depth - 1), stride: stride}
	q.next = atomic.LoadUint32(word(mem, offProducer))
	q.taken = atomic.LoadUint32(word(mem, offConsumer))
	return q, nil
}

// Depth returns the number of entries.
func (q *WorkQueue) Depth() int { return int(q.mask) + 1 }

// Stride returns the size of an entry.
func (q *WorkQueue) Stride() int { return q.stride }

// Entry returns the entry of index i (the slot i mod depth).
func (q *WorkQueue) Entry(i uint32) []byte {
	off := HeaderSize + int(i&q.mask)*q.stride
	return q.mem[off : off+q.stride : off+q.stride]
}

// Producer returns the published producer index (acquire).
func (q *WorkQueue) Producer() uint32 { return atomic.LoadUint32(word(q.mem, offProducer)) }

// Consumer returns the consumer index (acquire).
func (q *WorkQueue) Consumer() uint32 { return atomic.LoadUint32(word(q.mem, offConsumer)) }

// Client side.

// Next returns the next entry to fill, or false if the queue is full. The
// entry is the client's until Publish.
func (q *WorkQueue) Next() ([]byte, bool) {
	if q.next-q.Consumer() > q.mask {
		return nil, false
	}
	e := q.Entry(q.next)
	q.next++
	return e, true
}

// Publish makes the entries Next returned visible to the daemon (release).
func (q *WorkQueue) Publish() { atomic.StoreUint32(word(q.mem, offProducer), q.next) }

// Daemon side.

// Pending returns how many published entries the daemon has not taken, and
// false if the producer index cannot be right (more than depth ahead of
// the consumer's): the client broke its queue.
func (q *WorkQueue) Pending() (uint32, bool) {
	p := q.Producer()
	n := p - q.taken
	return n, n <= q.mask+1 && p-q.Consumer() <= q.mask+1
}

// Taken returns the index of the first entry not taken.
func (q *WorkQueue) Taken() uint32 { return q.taken }

// Take takes n entries, and unless the engine retires the queue's entries
// (RetiredWord) moves the consumer index past them (release): their slots
// are the client's again.
func (q *WorkQueue) Take(n uint32) {
	q.taken += n
	if !q.engineRetires {
		atomic.StoreUint32(word(q.mem, offConsumer), q.taken)
	}
}

// RetiredWord hands the consumer index to the engine, which keeps it at
// the number of the queue's entries it retired (ibtransport's
// QP.MirrorRetired): from then on a slot is the client's again once its work
// request is done, not when it is taken, and a QP holds no more than its
// depth.
func (q *WorkQueue) RetiredWord() *uint32 {
	q.engineRetires = true
	return word(q.mem, offConsumer)
}

// SetState publishes the QP's state for the client (ibv_qp_state).
func (q *WorkQueue) SetState(s uint32) { atomic.StoreUint32(word(q.mem, offState), s) }

// StateWord is the word SetState stores to, for the engine to keep current
// (ibtransport.QP.MirrorState).
func (q *WorkQueue) StateWord() *uint32 { return word(q.mem, offState) }

// State returns the QP's state as the daemon published it.
func (q *WorkQueue) State() uint32 { return atomic.LoadUint32(word(q.mem, offState)) }
