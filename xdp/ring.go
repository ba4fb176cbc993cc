package xdp

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The four AF_XDP rings are single-producer/single-consumer queues in memory
// shared with the kernel. Each side owns one index and only reads the
// other's. Publishing needs release semantics (the entries we wrote, or
// finished reading, must be visible to the kernel before it sees the new
// index) and reading the peer's index needs acquire semantics (entries the
// kernel wrote before moving its index must be visible to our later loads).
// Go's sync/atomic loads and stores are sequentially consistent, which is
// at least acquire/release, and also stop the compiler from caching or
// reordering the index accesses; plain loads and stores would allow both.
// This mirrors smp_load_acquire/smp_store_release in the kernel's xsk_queue.h.
//
// The cached copies of the peer's index avoid touching the shared cache line
// on every call: they are refreshed only when they say the ring is full
// (producer) or empty (consumer).
type ring struct {
	producer *uint32
	consumer *uint32
	flags    *uint32
	mask     uint32
	size     uint32
	// For a ring we produce into: our next producer index and the last
	// consumer index we read. For a ring we consume: the last producer
	// index we read and our next consumer index.
	cachedProd uint32
	cachedCons uint32
	mem        []byte // the mmapped region, for munmap
}

func (r *ring) init(mem []byte, off unix.XDPRingOffset, size uint32) {
	r.mem = mem
	r.producer = (*uint32)(unsafe.Pointer(&mem[off.Producer]))
	r.consumer = (*uint32)(unsafe.Pointer(&mem[off.Consumer]))
	r.flags = (*uint32)(unsafe.Pointer(&mem[off.Flags]))
	r.size = size
	r.mask = size - 1
	r.cachedProd = atomic.LoadUint32(r.producer)
	r.cachedCons = atomic.LoadUint32(r.consumer)
}

// needWakeup reports whether the kernel asks for a syscall to make progress
// on this ring (XDP_USE_NEED_WAKEUP).
func (r *ring) needWakeup() bool {
	return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0
}

// prodFree returns how many entries a producer may write, at least n if
// possible, refreshing the consumer index only when the cache is short.
func (r *ring) prodFree(n uint32) uint32 {
	free := r.size - (r.cachedProd - r.cachedCons)
	if free >= n {
		return free
	}
	r.cachedCons = atomic.LoadUint32(r.consumer) // acquire
	return r.size - (r.cachedProd - r.cachedCons)
}

// prodSubmit publishes n entries written at cachedProd onwards.
func (r *ring) prodSubmit(n uint32) {
	r.cachedProd += n
	atomic.StoreUint32(r.producer, r.cachedProd) // release
}

// prodOutstanding is how many produced entries the kernel has not consumed.
func (r *ring) prodOutstanding() uint32 {
	r.cachedCons = atomic.LoadUint32(r.consumer)
	return r.cachedProd - r.cachedCons
}

// published is how many entries are between the shared producer and
// consumer indexes; any goroutine may call it.
func (r *ring) published() uint32 {
	return atomic.LoadUint32(r.producer) - atomic.LoadUint32(r.consumer)
}

// consAvail returns how many entries a consumer may read.
func (r *ring) consAvail() uint32 {
	avail := r.cachedProd - r.cachedCons
	if avail == 0 {
		r.cachedProd = atomic.LoadUint32(r.producer) // acquire
		avail = r.cachedProd - r.cachedCons
	}
	return avail
}

// consRelease hands n read entries back to the kernel.
func (r *ring) consRelease(n uint32) {
	r.cachedCons += n
	atomic.StoreUint32(r.consumer, r.cachedCons) // release
}

// addrRing is the fill or the completion ring: UMEM addresses.
type addrRing struct {
	ring
	addrs []uint64
}

// descRing is the RX or the TX ring: descriptors.
type descRing struct {
	ring
	descs []Desc
}
