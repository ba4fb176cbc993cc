package verbs

import (
	"fmt"
	"math/bits"

	"github.com/softnic/softnic/hostif"
)

// Resize gives an in-process CQ a ring of slots of the new size. It runs
// while the engines are paused between passes (Group.Do), so no completion
// is being pushed, and with the pollers' lock, so none is being taken: the
// completions the CQ holds move to the same indices of the new ring.
func (c *engineCQ) Resize(n int) error {
	if c.ring != nil {
		return fmt.Errorf("resize CQ: a shared CQ is resized with its ring (Device.ResizeSharedCQ): %w", ErrInvalidArgument)
	}
	return c.e.group.Do(func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.pushMu.Lock()
		defer c.pushMu.Unlock()
		h, t := c.head.Load(), c.tail.Load()
		if t-h > uint64(n) {
			return fmt.Errorf("resize CQ to %d entries holding %d: %w", n, t-h, ErrInvalidArgument)
		}
		size := 1 << bits.Len(uint(n-1))
		slots, mask := make([]WC, size), uint64(size-1)
		for i := h; i != t; i++ {
			slots[i&mask] = c.slots[i&c.mask]
		}
		c.slots, c.mask = slots, mask
		return nil
	})
}

// ResizeSharedCQ moves a CQ made by CreateSharedCQ to ring, a new ring in
// memory shared with the same client (resize_cq, docs/HOST-INTERFACE.md):
// with the engines paused, the completions the client has not polled move
// to the same indices of ring (hostif.CompletionQueue.MoveTo), and the
// engines write only ring from then on. ErrInvalidArgument when ring has
// no room for them, or the client's consumer index cannot be believed;
// the CQ then keeps its ring.
func (d *Device) ResizeSharedCQ(cq *CQ, ring *hostif.CompletionQueue) error {
	c, ok := cq.ops.(*engineCQ)
	if !ok || c.ring == nil || c.e.d != d {
		return fmt.Errorf("resize shared CQ: not a shared CQ of this device: %w", ErrInvalidArgument)
	}
	return c.e.group.Do(func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.pushMu.Lock()
		defer c.pushMu.Unlock()
		if held := c.ring.Held(); !c.ring.MoveTo(ring) {
			return fmt.Errorf("resize CQ to %d entries holding %d: %w", ring.Depth(), held, ErrInvalidArgument)
		}
		c.ring = ring
		return nil
	})
}
