package verbs

import (
	"context"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/hostif"
)

// engineCQ is a CQ of an in-process device, and the CQ as the engines see
// it (ibtransport.CompletionQueue): a ring of slots, or a ring in memory
// shared with a client of the daemon (CreateSharedCQ).
type engineCQ struct {
	cq    *CQ
	e     *engine
	slots []WC
	mask  uint64
	head  atomic.Uint64 // next to poll
	tail  atomic.Uint64 // next to fill
	mu    sync.Mutex    // serialises pollers
	// pushMu serialises the engines' pushes when the device has several
	// (a CQ's QPs may live on different engines); with one engine it is
	// the only producer and takes no lock.
	pushMu sync.Mutex
	shared bool
	stamp  bool // set WC.Timestamp

	overflow atomic.Bool
	waiters  atomic.Int32
	notify   chan struct{}
	armed    atomic.Uint32 // 0 not armed, 1 any completion, 2 solicited only
	// ring, if set, holds the completions instead of slots: memory shared
	// with a client of the daemon, who polls and arms it there; onArmed is
	// called when an armed ring gets its completion.
	ring    *hostif.CompletionQueue
	onArmed func()
}

func (e *engine) CreateCQ(c *CQ, n int) (CQOps, error) {
	size := 1 << bits.Len(uint(n-1))
	return &engineCQ{cq: c, e: e, slots: make([]WC, size), mask: uint64(size - 1), notify: make(chan struct{}, 1),
		shared: e.dev.Engines() > 1, stamp: c.timestamps}, nil
}

// CreateSharedCQ creates a completion queue whose completions go to ring,
// in memory shared with another process, which polls and arms it (the
// daemon's side of a client's CQ, docs/HOST-INTERFACE.md). notify is called
// on the engine goroutine when the ring was armed and its completion came.
// Only a device opened in process hosts such a CQ.
func (d *Device) CreateSharedCQ(ring *hostif.CompletionQueue, notify func()) (*CQ, error) {
	e, err := engineOf(d, "create shared CQ")
	if err != nil {
		return nil, err
	}
	c := &CQ{dev: d}
	// The client asks for timestamps in the ring (pushShared).
	c.ops = &engineCQ{cq: c, e: e, ring: ring, onArmed: notify, shared: e.dev.Engines() > 1}
	return c, nil
}

func (c *engineCQ) Cap() int {
	c.mu.Lock() // Resize replaces the ring with it held
	defer c.mu.Unlock()
	if c.ring != nil {
		return c.ring.Depth()
	}
	return len(c.slots)
}

// Push adds a completion. It reports false if the CQ overran.
func (c *engineCQ) Push(wc WC, solicited bool) bool {
	if c.stamp {
		wc.Timestamp = deviceClock() // made now, whenever it is polled
	}
	if c.shared {
		c.pushMu.Lock()
		defer c.pushMu.Unlock()
	}
	if c.ring != nil {
		return c.pushShared(&wc, solicited)
	}
	t := c.tail.Load()
	if t-c.head.Load() >= uint64(len(c.slots)) {
		c.overran()
		return false
	}
	c.slots[t&c.mask] = wc
	c.tail.Store(t + 1)
	if c.waiters.Load() > 0 {
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
	if a := c.armed.Load(); a != 0 && (a == 1 || solicited || wc.Status != WCSuccess) {
		if c.armed.CompareAndSwap(a, 0) {
			c.cq.SendEvent()
		}
	}
	return true
}

// overran raises the CQ's one EventCQErr.
func (c *engineCQ) overran() {
	if c.overflow.CompareAndSwap(false, true) {
		c.e.d.emit(Event{Type: EventCQErr, CQ: c.cq})
	}
}

// pushShared adds a completion to the shared ring.
func (c *engineCQ) pushShared(wc *WC, solicited bool) bool {
	if c.ring.WantsTimestamps() {
		wc.Timestamp = deviceClock()
	}
	if !c.ring.Push(wc) {
		c.ring.SetOverrun()
		c.overran()
		return false
	}
	if c.ring.TakeArm(solicited || wc.Status != WCSuccess) && c.onArmed != nil {
		c.onArmed()
	}
	return true
}

func (c *engineCQ) Poll(wcs []WC) (int, error) {
	n, err := c.take(wcs)
	// Like the engine goroutine, go on while the passes find work: a
	// sender that polls right after a burst of posts transmits the burst
	// here and takes the first completions as soon as they come.
	for i := 0; n == 0 && err == nil && len(wcs) > 0 && i < maxPollPasses && c.e.Poll(); i++ {
		n, err = c.take(wcs)
	}
	return n, err
}

// maxPollPasses bounds the engine passes one Poll of an empty CQ runs.
const maxPollPasses = 64

func (c *engineCQ) take(wcs []WC) (int, error) {
	if c.overflow.Load() {
		return 0, ErrCQOverflow
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ring != nil {
		return c.ring.Poll(wcs), nil
	}
	h := c.head.Load()
	n := int(min(c.tail.Load()-h, uint64(len(wcs))))
	for i := range n {
		wcs[i] = c.slots[(h+uint64(i))&c.mask]
	}
	c.head.Store(h + uint64(n))
	return n, nil
}

func (c *engineCQ) Wait(ctx context.Context, wcs []WC) (int, error) {
	for {
		if n, err := c.take(wcs); n > 0 || err != nil {
			return n, err
		}
		c.waiters.Add(1)
		c.e.Unpoll() // the engine goroutine must fill the CQ
		if n, err := c.take(wcs); n > 0 || err != nil {
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

func (c *engineCQ) RequestNotify(solicitedOnly bool) {
	v := uint32(1)
	if solicitedOnly {
		v = 2
	}
	c.armed.Store(v)
}
