package verbs

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/hostif"
)

// MaxCQE is the most completions a CQ holds.
const MaxCQE = 1 << 22

// ErrCQOverflow is what polling a CQ that overran returns.
var ErrCQOverflow = errors.New("verbs: completion queue overrun")

// CompChannel delivers completion events of the CQs attached to it
// (ibv_comp_channel): after CQ.RequestNotify, the next completion sends the
// CQ on C.
type CompChannel struct {
	C   chan *CQ
	dev *Device
	// remote is the daemon's channel, on a device reached through one.
	remote *remoteChannel
}

// NewCompChannel creates a completion event channel
// (ibv_create_comp_channel).
func (d *Device) NewCompChannel() *CompChannel {
	if d.remote != nil {
		return d.remoteCompChannel()
	}
	return &CompChannel{C: make(chan *CQ, 256), dev: d}
}

// Destroy destroys the channel (ibv_destroy_comp_channel) once no CQ uses
// it: on a device reached through a daemon the daemon's channel goes,
// with the descriptor it held (ErrInvalidArgument while a CQ still uses
// it).
func (ch *CompChannel) Destroy() error {
	if ch.remote == nil {
		return nil
	}
	return ch.dev.destroyRemoteChannel(ch)
}

// Get waits for the next event (ibv_get_cq_event).
func (ch *CompChannel) Get(ctx context.Context) (*CQ, error) {
	select {
	case cq := <-ch.C:
		return cq, nil
	default:
	}
	ch.dev.Unpoll() // the engine goroutine must deliver the event
	var gone <-chan struct{}
	if ch.dev.remote != nil {
		gone = ch.dev.remote.c.Done()
	}
	select {
	case cq := <-ch.C:
		return cq, nil
	case <-gone:
		return nil, ch.dev.remoteGone()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// CQ is a completion queue (ibv_cq): a ring the device's engines fill and
// any goroutine polls.
type CQ struct {
	dev   *Device
	slots []WC
	mask  uint64
	head  atomic.Uint64 // next to poll
	tail  atomic.Uint64 // next to fill
	mu    sync.Mutex    // serialises pollers
	// pushMu serialises the engines' pushes when the device has several
	// (a CQ's QPs may live on different engines); with one engine it is
	// the only producer and takes no lock.
	pushMu   sync.Mutex
	shared   bool
	overflow atomic.Bool
	waiters  atomic.Int32
	notify   chan struct{}
	channel  *CompChannel
	armed    atomic.Uint32 // 0 not armed, 1 any completion, 2 solicited only
	// ring, if set, holds the completions instead of slots: memory shared
	// with a client of the daemon, who polls and arms it there; onArmed is
	// called when an armed ring gets its completion.
	ring    *hostif.CompletionQueue
	onArmed func()
	// handle is the daemon's, and remote what Wait sleeps on, for a CQ of
	// a device reached through one.
	handle uint32
	remote *remoteCQ
	// Context is free for the user (ibv_cq's cq_context).
	Context any
}

// CreateCQ creates a completion queue of at least n entries (ibv_create_cq),
// attached to ch for events if ch is not nil. Its QPs must be of the same
// device.
func (d *Device) CreateCQ(n int, ch *CompChannel) (*CQ, error) {
	if n <= 0 || n > MaxCQE {
		return nil, fmt.Errorf("create CQ of %d entries: %w", n, ErrInvalidArgument)
	}
	if d.remote != nil {
		return d.remoteCQ(n, ch)
	}
	size := 1 << bits.Len(uint(n-1))
	return &CQ{dev: d, slots: make([]WC, size), mask: uint64(size - 1), notify: make(chan struct{}, 1), channel: ch,
		shared: d.dev.Engines() > 1}, nil
}

// CreateSharedCQ creates a completion queue whose completions go to ring,
// in memory shared with another process, which polls and arms it (the
// daemon's side of a client's CQ, docs/HOST-INTERFACE.md). notify is called
// on the engine goroutine when the ring was armed and its completion came.
func (d *Device) CreateSharedCQ(ring *hostif.CompletionQueue, notify func()) *CQ {
	return &CQ{dev: d, ring: ring, onArmed: notify, shared: d.dev.Engines() > 1}
}

// Cap returns the number of completions the CQ holds.
func (c *CQ) Cap() int {
	if c.ring != nil {
		return c.ring.Depth()
	}
	return len(c.slots)
}

// cqSink is the CQ as the engine sees it (ibtransport.CompletionQueue).
type cqSink CQ

// Push adds a completion. It reports false if the CQ overran.
func (s *cqSink) Push(wc WC, solicited bool) bool {
	c := (*CQ)(s)
	if c.shared {
		c.pushMu.Lock()
		defer c.pushMu.Unlock()
	}
	if c.ring != nil {
		return c.pushShared(&wc, solicited)
	}
	t := c.tail.Load()
	if t-c.head.Load() >= uint64(len(c.slots)) {
		if c.overflow.CompareAndSwap(false, true) {
			c.dev.emit(Event{Type: EventCQErr, CQ: c})
		}
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
		if c.armed.CompareAndSwap(a, 0) && c.channel != nil {
			select {
			case c.channel.C <- c:
			default:
			}
		}
	}
	return true
}

// pushShared adds a completion to the shared ring.
func (c *CQ) pushShared(wc *WC, solicited bool) bool {
	if !c.ring.Push(wc) {
		c.ring.SetOverrun()
		if c.overflow.CompareAndSwap(false, true) {
			c.dev.emit(Event{Type: EventCQErr, CQ: c})
		}
		return false
	}
	if c.ring.TakeArm(solicited || wc.Status != WCSuccess) && c.onArmed != nil {
		c.onArmed()
	}
	return true
}

// Poll moves up to len(wcs) completions into wcs and returns how many
// (ibv_poll_cq). After an overrun it returns ErrCQOverflow. When the CQ is
// empty, Poll runs a pass of the device's engine in the caller's goroutine
// (see Device.Poll), so an application that polls is the one that
// receives, transmits and completes.
func (c *CQ) Poll(wcs []WC) (int, error) {
	n, err := c.take(wcs)
	// Like the engine goroutine, go on while the passes find work: a
	// sender that polls right after a burst of posts transmits the burst
	// here and takes the first completions as soon as they come.
	for i := 0; n == 0 && err == nil && len(wcs) > 0 && i < maxPollPasses && c.dev.Poll(); i++ {
		n, err = c.take(wcs)
	}
	return n, err
}

// maxPollPasses bounds the engine passes one Poll of an empty CQ runs.
const maxPollPasses = 64

func (c *CQ) take(wcs []WC) (int, error) {
	if c.overflow.Load() {
		return 0, ErrCQOverflow
	}
	if c.ring != nil {
		return c.takeRing(wcs)
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
	if c.dev.remote != nil {
		return c.waitRemote(ctx, wcs)
	}
	for {
		if n, err := c.take(wcs); n > 0 || err != nil {
			return n, err
		}
		c.waiters.Add(1)
		c.dev.Unpoll() // the engine goroutine must fill the CQ
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

// RequestNotify arms the CQ (ibv_req_notify_cq): the next completion, or
// with solicitedOnly the next solicited or error completion, sends the CQ on
// its completion channel once.
func (c *CQ) RequestNotify(solicitedOnly bool) error {
	if c.channel == nil {
		return fmt.Errorf("request CQ notification: no completion channel: %w", ErrInvalidArgument)
	}
	if c.remote != nil {
		c.remoteRequestNotify(solicitedOnly)
		return nil
	}
	v := uint32(1)
	if solicitedOnly {
		v = 2
	}
	c.armed.Store(v)
	return nil
}
