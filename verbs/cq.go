package verbs

import (
	"context"
	"errors"
	"fmt"
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
	ops ChannelOps
}

// NewCompChannel creates a completion event channel
// (ibv_create_comp_channel).
func (d *Device) NewCompChannel() *CompChannel {
	ch := &CompChannel{C: make(chan *CQ, 256), dev: d}
	ch.ops = d.ops.NewCompChannel(ch)
	return ch
}

// Destroy destroys the channel (ibv_destroy_comp_channel) once no CQ uses
// it: on a device reached through a daemon the daemon's channel goes,
// with the descriptor it held (ErrInvalidArgument while a CQ still uses
// it).
func (ch *CompChannel) Destroy() error { return ch.ops.Destroy() }

// Get waits for the next event (ibv_get_cq_event).
func (ch *CompChannel) Get(ctx context.Context) (*CQ, error) {
	select {
	case cq := <-ch.C:
		return cq, nil
	default:
	}
	ch.dev.Unpoll() // the engine goroutine must deliver the event
	select {
	case cq := <-ch.C:
		return cq, nil
	case <-ch.dev.ops.Done():
		return nil, ch.dev.ops.Err()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// CQ is a completion queue (ibv_cq): a ring the device's engines fill and
// any goroutine polls.
type CQ struct {
	dev     *Device
	channel *CompChannel
	ops     CQOps
	// timestamps: the completions carry WC.Timestamp (CreateCQEx).
	timestamps bool
	// Context is free for the user (ibv_cq's cq_context).
	Context any
}

// CreateCQ creates a completion queue of at least n entries (ibv_create_cq),
// attached to ch for events if ch is not nil. Its QPs must be of the same
// device.
func (d *Device) CreateCQ(n int, ch *CompChannel) (*CQ, error) {
	return d.CreateCQEx(CQInitAttr{CQE: n, Channel: ch})
}

// CQInitAttr is what a CQ is made with (ibv_cq_init_attr_ex): at least CQE
// entries, the completion channel (nil for none), and whether each
// completion carries the device clock's time the engine made it at
// (WC.Timestamp; IBV_WC_EX_WITH_COMPLETION_TIMESTAMP and its _WALLCLOCK,
// which are the same clock here).
type CQInitAttr struct {
	CQE        int
	Channel    *CompChannel
	Timestamps bool
}

// CreateCQEx creates a completion queue (ibv_create_cq_ex).
func (d *Device) CreateCQEx(attr CQInitAttr) (*CQ, error) {
	n, ch := attr.CQE, attr.Channel
	if n <= 0 || n > MaxCQE {
		return nil, fmt.Errorf("create CQ of %d entries: %w", n, ErrInvalidArgument)
	}
	if ch != nil && ch.dev != d {
		return nil, fmt.Errorf("create CQ: completion channel of another device: %w", ErrInvalidArgument)
	}
	c := &CQ{dev: d, channel: ch, timestamps: attr.Timestamps}
	ops, err := d.ops.CreateCQ(c, n)
	if err != nil {
		return nil, err
	}
	c.ops = ops
	return c, nil
}

// Cap returns the number of completions the CQ holds.
func (c *CQ) Cap() int { return c.ops.Cap() }

// Timestamps reports whether the CQ's completions carry WC.Timestamp.
func (c *CQ) Timestamps() bool { return c.timestamps }

// Resize makes the CQ hold at least n completions (ibv_resize_cq), larger
// or smaller, keeping those it holds: ErrInvalidArgument for n out of
// 1..MaxCQE or fewer than the completions it holds now. Cap then says
// what it holds.
func (c *CQ) Resize(n int) error {
	if n <= 0 || n > MaxCQE {
		return fmt.Errorf("resize CQ to %d entries: %w", n, ErrInvalidArgument)
	}
	return c.ops.Resize(n)
}

// Poll moves up to len(wcs) completions into wcs and returns how many
// (ibv_poll_cq). After an overrun it returns ErrCQOverflow. When the CQ is
// empty, Poll runs a pass of the device's engine in the caller's goroutine
// (see Device.Poll), so an application that polls is the one that
// receives, transmits and completes.
func (c *CQ) Poll(wcs []WC) (int, error) { return c.ops.Poll(wcs) }

// Wait polls like Poll but blocks until at least one completion is there or
// ctx ends.
func (c *CQ) Wait(ctx context.Context, wcs []WC) (int, error) { return c.ops.Wait(ctx, wcs) }

// RequestNotify arms the CQ (ibv_req_notify_cq): the next completion, or
// with solicitedOnly the next solicited or error completion, sends the CQ on
// its completion channel once.
func (c *CQ) RequestNotify(solicitedOnly bool) error {
	if c.channel == nil {
		return fmt.Errorf("request CQ notification: no completion channel: %w", ErrInvalidArgument)
	}
	c.ops.RequestNotify(solicitedOnly)
	return nil
}

// SendEvent sends the CQ on its completion channel, if it has one and the
// channel has room (an event is a hint: a full channel holds enough): a
// backend calls it when an armed CQ got its completion.
func (c *CQ) SendEvent() {
	if c.channel == nil {
		return
	}
	select {
	case c.channel.C <- c:
	default:
	}
}
