package client

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// A dialed device's CQs are rings the daemon fills (hostif.CompletionQueue).
// Each is attached to a completion channel of the daemon: the program's
// (CreateCQ with a CompChannel), or the device's own (dialed.waitChannel).
// When an armed ring gets its completion, the daemon writes the CQ's user
// handle to the channel's pipe; a goroutine per channel reads it
// (readChannel) and hands the event to the CQ (dialedCQ.event). The ring has
// one arm, which RequestNotify and Wait share.

// dialedChannel is a completion channel of a dialed device: the daemon's
// channel, or why it could not be made (NewCompChannel returns no error:
// CreateCQ with the channel does).
type dialedChannel struct {
	r   *dialed
	ch  *session.Channel
	err error
}

// dialedCQ is a dialed device's CQ: the ring the daemon fills, and the
// waiters' wake-up.
type dialedCQ struct {
	cq  *verbs.CQ // the API's session.CQ, which events name
	r   *dialed
	scq *session.CQ
	// ring is scq's ring, which Resize replaces while it holds mu.
	ring   atomic.Pointer[hostif.CompletionQueue]
	handle uint32
	armed  atomic.Uint32 // the program's arm: 0, hostif.ArmNext or hostif.ArmSolicited
	mu     sync.Mutex    // serialises pollers
	wake   broadcast
}

func (r *dialed) NewCompChannel(*verbs.CompChannel) verbs.ChannelOps {
	ch, err := r.openChannel()
	return &dialedChannel{r: r, ch: ch, err: err}
}

// openChannel makes a completion channel in the daemon and starts reading
// its pipe.
func (r *dialed) openChannel() (*session.Channel, error) {
	var ch *session.Channel
	err := r.call(func(c *session.Conn) (err error) { ch, err = c.CreateCompChannel(); return err })
	if err != nil {
		return nil, fmt.Errorf("create completion channel: %w", daemonErr(err))
	}
	err = r.pipes.start(ch.File, r.readChannel)
	ch.File.Close() // the reader has its own descriptor
	if err != nil {
		return nil, fmt.Errorf("create completion channel: %w", err)
	}
	return ch, nil
}

// channelFor returns the daemon's channel a new CQ is attached to: ch's,
// or without one the device's own, made with the first such CQ.
func (r *dialed) channelFor(ch *verbs.CompChannel) (*session.Channel, error) {
	if ch != nil {
		rc := ch.Backend().(*dialedChannel) // of this device (CreateCQ checked)
		return rc.ch, rc.err
	}
	r.waitMu.Lock()
	defer r.waitMu.Unlock()
	if r.waitChannel == nil {
		c, err := r.openChannel()
		if err != nil {
			return nil, err
		}
		r.waitChannel = c
	}
	return r.waitChannel, nil
}

func (r *dialed) CreateCQ(front *verbs.CQ, n int) (verbs.CQOps, error) {
	dch, err := r.channelFor(front.Channel())
	if err != nil {
		return nil, fmt.Errorf("create CQ: %w", err)
	}
	h := r.objects.handle()
	var cq *session.CQ
	err = r.call(func(c *session.Conn) (err error) { cq, err = c.CreateCQ(n, dch, h); return err })
	if err != nil {
		return nil, fmt.Errorf("create CQ: %w", daemonErr(err))
	}
	c := &dialedCQ{cq: front, r: r, scq: cq, handle: cq.Handle}
	if front.Timestamps() {
		cq.Ring().SetTimestamps() // before any QP uses it
	}
	c.ring.Store(cq.Ring())
	r.objects.add(h, c)
	return c, nil
}

// readChannel reads a channel's completion events (CQ user handles) until
// its pipe ends: at Close, or when the daemon ended the session.
func (r *dialed) readChannel(f *os.File) {
	var b [8]byte
	for {
		if _, err := io.ReadFull(f, b[:]); err != nil {
			return
		}
		if cq, ok := r.objects.object(binary.LittleEndian.Uint64(b[:])).(*dialedCQ); ok {
			cq.event()
		}
	}
}

// event is the daemon's completion event for the CQ: the ring's arm
// was taken by a completion. A pending RequestNotify gets it on the CQ's
// channel, and the waiters of Wait look at the ring again. An event may
// come for an arm Wait made just before RequestNotify: the program's
// event then comes early, never late.
func (c *dialedCQ) event() {
	if c.armed.Swap(0) != 0 {
		c.cq.SendEvent()
	}
	c.wake.signal()
}

func (c *dialedCQ) Cap() int { return c.ring.Load().Depth() }

// Resize has the daemon move the CQ's completions to a new ring (resize_cq)
// while it holds the pollers' and arms' lock, so that none is taken from
// the old ring meanwhile.
func (c *dialedCQ) Resize(n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.r.call(func(*session.Conn) error { return c.scq.Resize(n) })
	if err != nil {
		return fmt.Errorf("resize CQ: %w", daemonErr(err))
	}
	c.ring.Store(c.scq.Ring())
	return nil
}

// arm arms the ring, with the pollers' lock: not in a ring Resize is
// leaving.
func (c *dialedCQ) arm(solicitedOnly bool) {
	c.mu.Lock()
	c.ring.Load().Arm(solicitedOnly)
	c.mu.Unlock()
}

// Poll polls the ring. As on a CQ of this process, one that overran gives
// ErrCQOverflow from then on; one whose daemon is gone gives
// ErrDaemonGone once it is empty.
func (c *dialedCQ) Poll(wcs []verbs.WC) (int, error) {
	if c.ring.Load().Overrun() {
		return 0, verbs.ErrCQOverflow
	}
	c.mu.Lock()
	n := c.ring.Load().Poll(wcs)
	c.mu.Unlock()
	if n > 0 {
		c.r.objects.noteCompletions(wcs[:n])
		return n, nil
	}
	return 0, c.r.Err()
}

// RequestNotify arms the ring for the program's event. A Wait
// sleeping on an arm for any completion is woken to look again: the arm
// for a solicited completion replaced it.
func (c *dialedCQ) RequestNotify(solicitedOnly bool) {
	v := uint32(hostif.ArmNext)
	if solicitedOnly {
		v = hostif.ArmSolicited
	}
	c.armed.Store(v)
	c.arm(solicitedOnly)
	if solicitedOnly {
		c.wake.signal()
	}
}

// Wait on a dialed device's CQ it arms the ring and sleeps
// until the daemon's event, the daemon's end or ctx's. While the program's
// RequestNotify for a solicited completion is pending, arming the ring for
// any completion would answer it early, so Wait looks at the ring between
// sleeps of 10 µs growing to 1 ms instead.
func (c *dialedCQ) Wait(ctx context.Context, wcs []verbs.WC) (int, error) {
	for pause := 10 * time.Microsecond; ; pause = min(2*pause, time.Millisecond) {
		woken := c.wake.channel()
		n, armed, err := c.armAndTake(wcs)
		if n > 0 || err != nil {
			return n, err
		}
		if err := c.sleepRemote(ctx, woken, armed, pause); err != nil {
			return 0, err
		}
	}
}

// armAndTake polls the ring and, if it is empty and not the program's to
// arm, arms it and polls again: a completion that came before the arm is
// seen then, one after it sends the event. It reports whether it armed.
func (c *dialedCQ) armAndTake(wcs []verbs.WC) (n int, armed bool, err error) {
	if n, err := c.Poll(wcs); n > 0 || err != nil {
		return n, false, err
	}
	if c.armed.Load() == hostif.ArmSolicited {
		return 0, false, nil
	}
	c.arm(false)
	n, err = c.Poll(wcs)
	return n, true, err
}

// sleepRemote waits for woken, or for pause when the ring was not armed,
// or for the daemon's end (after which Poll returns ErrDaemonGone),
// or for ctx's.
func (c *dialedCQ) sleepRemote(ctx context.Context, woken <-chan struct{}, armed bool, pause time.Duration) error {
	var timeout <-chan time.Time
	if !armed {
		t := time.NewTimer(pause)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-woken:
	case <-timeout:
	case <-c.r.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// broadcast wakes every goroutine waiting at the time of signal: each
// takes the channel before it looks at what it waits for, and signal
// closes it.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *broadcast) channel() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) signal() {
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}

// Destroy destroys the daemon's channel, which no CQ may use any more
// (ibv_destroy_comp_channel): it holds a descriptor of the daemon's.
func (ch *dialedChannel) Destroy() error {
	if ch.ch == nil {
		return nil // it never opened: nothing is held
	}
	err := ch.r.call(func(c *session.Conn) error { return c.DestroyCompChannel(ch.ch.Handle) })
	if err != nil {
		return fmt.Errorf("destroy completion channel: %w", daemonErr(err))
	}
	return nil
}
