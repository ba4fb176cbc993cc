package ibtransport

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Access is a set of memory region (and QP) access rights (ibv_access_flags).
type Access uint32

// Access rights, with libibverbs' values.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
)

// Errors returned by the verbs calls.
var (
	ErrInvalidArgument = errors.New("ibtransport: invalid argument")
	ErrQueueFull       = errors.New("ibtransport: work queue full")
	ErrInvalidState    = errors.New("ibtransport: operation not allowed in the QP state")
	ErrCQOverflow      = errors.New("ibtransport: completion queue overrun")
	ErrClosed          = errors.New("ibtransport: engine closed")
)

// PD is a protection domain: memory regions and queue pairs that may be used
// together.
type PD struct {
	e  *Engine
	id uint32
}

// Engine returns the engine the PD belongs to.
func (pd *PD) Engine() *Engine { return pd.e }

// MR is a registered memory region: a byte slice the transport may read and
// write on behalf of local work requests (through LKey) and of remote peers
// (through RKey), as its access rights allow.
type MR struct {
	pd     *PD
	buf    []byte
	addr   uint64
	access Access
	lkey   uint32
	rkey   uint32
	// valid is owned by the engine goroutine: false once deregistered or
	// remotely invalidated, which every access checks.
	valid bool
	// rkeyValid is false once a SEND_WITH_INV invalidated the rkey.
	rkeyValid bool
}

// LKey returns the local key, for SGEs.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the remote key a peer uses in RDMA and atomic requests.
func (m *MR) RKey() uint32 { return m.rkey }

// Addr returns the virtual address of the first byte of the region: the
// address SGEs and remote requests use.
func (m *MR) Addr() uint64 { return m.addr }

// Len returns the length of the region.
func (m *MR) Len() int { return len(m.buf) }

// Bytes returns the registered memory.
func (m *MR) Bytes() []byte { return m.buf }

// Access returns the region's access rights.
func (m *MR) Access() Access { return m.access }

// PD returns the region's protection domain.
func (m *MR) PD() *PD { return m.pd }

// SGE returns the scatter/gather element for n bytes at offset off.
func (m *MR) SGE(off, n int) SGE {
	return SGE{Addr: m.addr + uint64(off), Length: uint32(n), LKey: m.lkey}
}

// slice returns the n bytes at virtual address va, if they lie inside the
// region. It is the only way the engine touches registered memory.
func (m *MR) slice(va uint64, n uint32) ([]byte, bool) {
	if va < m.addr {
		return nil, false
	}
	off := va - m.addr
	if off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		return nil, false
	}
	return m.buf[off : off+uint64(n)], true
}

// keyTable maps lkeys and rkeys to regions. Keys are random 32-bit values,
// so a peer cannot guess a valid rkey from another and a stale rkey does not
// come back. Only the engine goroutine reads or writes the maps.
type keyTable struct {
	lkeys map[uint32]*MR
	rkeys map[uint32]*MR
}

// keySource generates memory keys; registration is not on the packet path,
// so a mutex is fine.
type keySource struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func newKeySource() *keySource {
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		panic(fmt.Sprintf("ibtransport: no entropy for memory keys: %v", err))
	}
	return &keySource{rng: rand.New(rand.NewChaCha8(seed))}
}

func (k *keySource) next() uint32 {
	k.mu.Lock()
	defer k.mu.Unlock()
	for {
		if v := k.rng.Uint32(); v != 0 {
			return v
		}
	}
}

// RegMR registers buf in pd with the given access rights (ibv_reg_mr).
// Remote write and remote atomic access need local write access, as in
// libibverbs.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if access&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic) != 0 {
		return nil, fmt.Errorf("register MR: unknown access flags %#x: %w", access, ErrInvalidArgument)
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return nil, fmt.Errorf("register MR: remote write/atomic access needs local write: %w", ErrInvalidArgument)
	}
	m := &MR{pd: pd, buf: buf, access: access, valid: true, rkeyValid: true}
	if len(buf) > 0 {
		m.addr = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	}
	e := pd.e
	err := e.do(func() error {
		for {
			m.lkey = e.keys.next()
			if _, dup := e.mrs.lkeys[m.lkey]; !dup {
				break
			}
		}
		for {
			m.rkey = e.keys.next()
			if _, dup := e.mrs.rkeys[m.rkey]; !dup && m.rkey != m.lkey {
				break
			}
		}
		e.mrs.lkeys[m.lkey] = m
		e.mrs.rkeys[m.rkey] = m
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("register MR: %w", err)
	}
	return m, nil
}

// Dereg deregisters the region (ibv_dereg_mr). When it returns, the engine
// no longer reads or writes the memory, and its keys are rejected.
func (m *MR) Dereg() error {
	e := m.pd.e
	return e.do(func() error {
		if !m.valid && e.mrs.lkeys[m.lkey] != m {
			return fmt.Errorf("deregister MR: %w", ErrInvalidArgument)
		}
		m.valid = false
		delete(e.mrs.lkeys, m.lkey)
		delete(e.mrs.rkeys, m.rkey)
		return nil
	})
}

// CompChannel delivers completion events of the CQs attached to it
// (ibv_comp_channel): after CQ.RequestNotify, the next completion sends the
// CQ on C.
type CompChannel struct {
	C chan *CQ
}

// NewCompChannel returns a completion channel.
func NewCompChannel() *CompChannel { return &CompChannel{C: make(chan *CQ, 256)} }

// Get waits for the next event (ibv_get_cq_event).
func (ch *CompChannel) Get(ctx context.Context) (*CQ, error) {
	select {
	case cq := <-ch.C:
		return cq, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// CQ is a completion queue. The engine adds completions; any goroutine may
// poll them.
type CQ struct {
	slots    []WC
	mask     uint64
	head     atomic.Uint64 // next to poll
	tail     atomic.Uint64 // next to fill
	mu       sync.Mutex    // serialises pollers
	overflow atomic.Bool
	waiters  atomic.Int32
	notify   chan struct{}
	channel  *CompChannel
	armed    atomic.Uint32 // 0 not armed, 1 any completion, 2 solicited only
	// owner is the engine whose QPs use the CQ: its goroutine is the only
	// producer, which is what lets push go without a lock.
	owner atomic.Pointer[Engine]
	// Context is free for the user (ibv_cq's cq_context).
	Context any
}

// NewCQ returns a CQ holding at least n completions, attached to ch (which
// may be nil).
func NewCQ(n int, ch *CompChannel) (*CQ, error) {
	if n <= 0 || n > MaxCQE {
		return nil, fmt.Errorf("create CQ of %d entries: %w", n, ErrInvalidArgument)
	}
	size := 1 << bits.Len(uint(n-1))
	return &CQ{slots: make([]WC, size), mask: uint64(size - 1), notify: make(chan struct{}, 1), channel: ch}, nil
}

// Cap returns the number of completions the CQ holds.
func (c *CQ) Cap() int { return len(c.slots) }

// bind makes e the CQ's producer; a CQ serves the QPs of one device only.
func (c *CQ) bind(e *Engine) bool {
	return c.owner.CompareAndSwap(nil, e) || c.owner.Load() == e
}

// push adds a completion and reports false if the CQ overran; only the
// engine goroutine calls it.
func (c *CQ) push(wc *WC) bool {
	t := c.tail.Load()
	if t-c.head.Load() >= uint64(len(c.slots)) {
		if c.overflow.CompareAndSwap(false, true) {
			if e := c.owner.Load(); e != nil {
				e.emit(Event{Type: EventCQErr, CQ: c})
			}
		}
		return false
	}
	c.slots[t&c.mask] = *wc
	c.tail.Store(t + 1)
	if c.waiters.Load() > 0 {
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
	if a := c.armed.Load(); a != 0 && (a == 1 || wc.solicited || wc.Status != WCSuccess) {
		if c.armed.CompareAndSwap(a, 0) && c.channel != nil {
			select {
			case c.channel.C <- c:
			default:
			}
		}
	}
	return true
}

// Poll moves up to len(wcs) completions into wcs and returns how many
// (ibv_poll_cq). After an overrun it returns ErrCQOverflow.
func (c *CQ) Poll(wcs []WC) (int, error) {
	if c.overflow.Load() {
		return 0, ErrCQOverflow
	}
	c.mu.Lock()
	h := c.head.Load()
	n := int(min(c.tail.Load()-h, uint64(len(wcs))))
	for i := range n {
		wcs[i] = c.slots[(h+uint64(i))&c.mask]
	}
	c.head.Store(h + uint64(n))
	c.mu.Unlock()
	return n, nil
}

// Wait polls like Poll but blocks until at least one completion is there or
// ctx ends.
func (c *CQ) Wait(ctx context.Context, wcs []WC) (int, error) {
	for {
		if n, err := c.Poll(wcs); n > 0 || err != nil {
			return n, err
		}
		c.waiters.Add(1)
		if n, err := c.Poll(wcs); n > 0 || err != nil {
			c.waiters.Add(-1)
			return n, err
		}
		select {
		case <-c.notify:
			c.waiters.Add(-1)
		case <-ctx.Done():
			c.waiters.Add(-1)
			return 0, ctx.Err()
		}
	}
}

// RequestNotify arms the CQ (ibv_req_notify_cq): the next completion, or
// with solicitedOnly the next solicited or error completion, sends the CQ on
// its completion channel once.
func (c *CQ) RequestNotify(solicitedOnly bool) error {
	if c.channel == nil {
		return fmt.Errorf("request CQ notification: no completion channel: %w", ErrInvalidArgument)
	}
	v := uint32(1)
	if solicitedOnly {
		v = 2
	}
	c.armed.Store(v)
	return nil
}

// recvWQE is a posted receive.
type recvWQE struct {
	id  uint64
	sge []SGE
}

// recvQueue is a ring of receive WQEs: posters (any goroutine, serialised
// by mu) fill it, the engine goroutine consumes it without locking.
type recvQueue struct {
	mu     sync.Mutex
	slots  []recvWQE
	mask   uint32
	maxSGE int
	tail   atomic.Uint32
	head   atomic.Uint32
}

func (r *recvQueue) init(n, maxSGE int) {
	size := 1 << bits.Len(uint(max(n, 1)-1))
	r.slots = make([]recvWQE, size)
	r.mask = uint32(size - 1)
	r.maxSGE = maxSGE
	backing := make([]SGE, size*maxSGE)
	for i := range r.slots {
		r.slots[i].sge = backing[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
	}
}

func (r *recvQueue) post(wr *RecvWR) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.postLocked(wr)
}

// postList posts wrs in order and returns how many it posted.
func (r *recvQueue) postList(wrs []RecvWR) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range wrs {
		if err := r.postLocked(&wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

func (r *recvQueue) postLocked(wr *RecvWR) error {
	if len(wr.SGL) > r.maxSGE {
		return fmt.Errorf("post receive: %d SGEs, at most %d: %w", len(wr.SGL), r.maxSGE, ErrInvalidArgument)
	}
	t := r.tail.Load()
	if t-r.head.Load() >= uint32(len(r.slots)) {
		return fmt.Errorf("post receive: %w", ErrQueueFull)
	}
	s := &r.slots[t&r.mask]
	s.id = wr.ID
	s.sge = append(s.sge[:0], wr.SGL...)
	r.tail.Store(t + 1)
	return nil
}

// peek returns the oldest posted receive, or nil; engine only.
func (r *recvQueue) peek() *recvWQE {
	h := r.head.Load()
	if h == r.tail.Load() {
		return nil
	}
	return &r.slots[h&r.mask]
}

func (r *recvQueue) pop() { r.head.Add(1) }

func (r *recvQueue) count() int { return int(r.tail.Load() - r.head.Load()) }

// SRQ is a shared receive queue: receives any QP attached to it consumes.
type SRQ struct {
	pd    *PD
	rq    recvQueue
	limit atomic.Int32 // armed limit, 0 when not armed
}

// NewSRQ creates a shared receive queue of at least maxWR receives of at
// most maxSGE elements each (ibv_create_srq).
func (pd *PD) NewSRQ(maxWR, maxSGE int) (*SRQ, error) {
	if maxWR <= 0 || maxSGE <= 0 || maxWR > 1<<16 || maxSGE > 256 {
		return nil, fmt.Errorf("create SRQ (%d WRs, %d SGEs): %w", maxWR, maxSGE, ErrInvalidArgument)
	}
	s := &SRQ{pd: pd}
	s.rq.init(maxWR, maxSGE)
	return s, nil
}

// PostRecv posts a receive (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wr *RecvWR) error {
	if err := s.rq.post(wr); err != nil {
		return err
	}
	s.pd.e.wake()
	return nil
}

// PostRecvList posts several receives with one doorbell; it returns how
// many it posted (on an error, wrs[n] failed).
func (s *SRQ) PostRecvList(wrs []RecvWR) (int, error) {
	n, err := s.rq.postList(wrs)
	if n > 0 {
		s.pd.e.wake()
	}
	return n, err
}

// Len returns the number of receives posted and not yet consumed.
func (s *SRQ) Len() int { return s.rq.count() }

// randUint32 is a crypto-seeded helper for initial values such as QPNs.
func randUint32() uint32 {
	var b [4]byte
	_, _ = crand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:])
}
