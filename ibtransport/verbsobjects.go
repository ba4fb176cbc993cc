package ibtransport

import "github.com/softnic/softnic/ibtransport/ibv"

// The engine executes requests against memory regions and reports work
// completions, but those objects belong to package verbs (protection
// domains, memory regions, completion queues, shared receive queues). The
// interfaces below are all the engine needs of them. The engine goroutine is
// their only caller, once per packet at most, so implementations must not
// block, lock or allocate.

// Memory resolves memory keys for one protection domain (a verbs PD): the
// regions it returns belong to that domain and grant the access asked for.
type Memory interface {
	// LocalRegion returns the region registered under lkey if it grants
	// every right in access (0 asks for local read only) and holds the n
	// bytes at virtual address va; nil otherwise. Work requests' SGEs
	// are resolved with it.
	LocalRegion(lkey uint32, va uint64, n uint32, access ibv.Access) Region
	// RemoteRegion is LocalRegion for a peer's request arriving on qp: the
	// region whose rkey is rkey, which must still be valid (not
	// invalidated by a SEND_WITH_INV), or the memory window bound with
	// rkey, whose range and rights it must be in, and which, of type 2,
	// must be bound to qp.
	RemoteRegion(qp *QP, rkey uint32, va uint64, n uint32, access ibv.Access) Region
	// RemoteKeyGrants reports whether rkey names a valid region of the
	// domain granting every right in access, wherever its range: a FLUSH
	// of a whole region checks no addresses.
	RemoteKeyGrants(rkey uint32, access ibv.Access) bool
	// InvalidateRKey invalidates rkey, for a SEND_WITH_INV arriving on qp
	// (remote) or a LOCAL_INV qp posted, and reports false if no region or
	// type 2 window of the domain has it (or, remote, the window is bound
	// to another QP).
	InvalidateRKey(qp *QP, rkey uint32, remote bool) bool
	// BindMW executes a BIND_MW work request qp posted, binding the
	// window b names (a type 2 window to qp), and reports false if the
	// bind breaks a rule of IBA 10.6.7 (the completion is then
	// MW_BIND_ERR).
	BindMW(qp *QP, b *ibv.MWBind) bool
}

// Region is a registered memory region as the engine holds it between
// packets: the only way the engine touches registered memory. The memory
// may be another process's (the daemon's clients'), so the engine copies
// through the region rather than holding its bytes.
//
// Each method reports false, having copied nothing or part, if the bytes
// lie outside the region, the region was deregistered since it was looked
// up (or, found by rkey, its rkey invalidated), or its memory cannot be
// reached any more (its process exited).
type Region interface {
	// ReadAt copies the len(dst) bytes at virtual address va into dst.
	ReadAt(dst []byte, va uint64) bool
	// WriteAt copies src to virtual address va.
	WriteAt(src []byte, va uint64) bool
	// Atomic executes a CompareSwap (cas) or FetchAdd on the 8-byte word
	// at va, which is aligned, and returns the word's original value.
	Atomic(va uint64, cas bool, compare, swapAdd uint64) (uint64, bool)
	// AtomicWrite stores the 8 bytes b, unchanged, into the aligned word
	// at va as one single-copy atomic store (IBTA 1.5 ATOMIC_WRITE): an
	// observer sees the whole old word or the whole new one.
	AtomicWrite(va uint64, b [8]byte) bool
	// RemoteWritten is called after a peer's RDMA WRITE message (its last
	// packet) or atomic has changed bytes of the region, so that a local
	// poller watching the region can learn it without racing the engine.
	RemoteWritten()
}

// CompletionQueue takes a QP's work completions (a verbs CQ).
type CompletionQueue interface {
	// Push adds wc; solicited marks the receive completion of a message
	// with the solicited event bit (for solicited-only notification). It
	// reports false when the queue is full: the completion is lost, and
	// the engine moves the QP to ERR, as IBA makes a CQ overrun an error
	// of the QPs using the CQ.
	Push(wc ibv.WC, solicited bool) bool
}

// SharedRecvQueue is a receive queue several QPs take receives from (a
// verbs SRQ).
type SharedRecvQueue interface {
	// RecvQueue returns the ring of posted receives.
	RecvQueue() *RecvQueue
	// Consumed is called after the engine took a receive from the ring
	// (the SRQ limit event is checked there).
	Consumed()
}
