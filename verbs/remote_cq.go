package verbs

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/hostif"
)

// A dialed device's CQs are rings the daemon fills (hostif.CompletionQueue).
// Each is attached to a completion channel of the daemon: the program's
// (CreateCQ with a CompChannel), or the device's own (remote.waitChannel).
// When an armed ring gets its completion, the daemon writes the CQ's user
// handle to the channel's pipe; a goroutine per channel reads it
// (readChannel) and hands the event to the CQ (remoteEvent). The ring has
// one arm, which RequestNotify and Wait share.

// remoteChannel is a completion channel of a dialed device: the daemon's
// channel, or why it could not be made (NewCompChannel returns no error:
// CreateCQ with the channel does).
type remoteChannel struct {
	ch  *client.Channel
	err error
}

// remoteCQ is what a dialed device's CQ adds: the waiters' wake-up.
type remoteCQ struct {
	wake broadcast
}

func (d *Device) remoteCompChannel() *CompChannel {
	ch, err := d.remote.openChannel(d)
	return &CompChannel{C: make(chan *CQ, 256), dev: d, remote: &remoteChannel{ch: ch, err: err}}
}

// openChannel makes a completion channel in the daemon and starts reading
// its pipe.
func (r *remote) openChannel(d *Device) (*client.Channel, error) {
	var ch *client.Channel
	err := r.call(func(c *client.Conn) (err error) { ch, err = c.CreateCompChannel(); return err })
	if err != nil {
		return nil, fmt.Errorf("create completion channel: %w", daemonErr(err))
	}
	err = r.pipes.start(ch.File, d.readChannel)
	ch.File.Close() // the reader has its own descriptor
	if err != nil {
		return nil, fmt.Errorf("create completion channel: %w", err)
	}
	return ch, nil
}

// channelFor returns the daemon's channel a new CQ is attached to: ch's,
// or without one the device's own, made with the first such CQ.
func (r *remote) channelFor(d *Device, ch *CompChannel) (*client.Channel, error) {
	if ch != nil {
		if ch.dev != d || ch.remote == nil {
			return nil, fmt.Errorf("completion channel of another device: %w", ErrInvalidArgument)
		}
		return ch.remote.ch, ch.remote.err
	}
	r.waitMu.Lock()
	defer r.waitMu.Unlock()
	if r.waitChannel == nil {
		c, err := r.openChannel(d)
		if err != nil {
			return nil, err
		}
		r.waitChannel = c
	}
	return r.waitChannel, nil
}

func (d *Device) remoteCQ(n int, ch *CompChannel) (*CQ, error) {
	r := d.remote
	dch, err := r.channelFor(d, ch)
	if err != nil {
		return nil, fmt.Errorf("create CQ: %w", err)
	}
	h := r.objects.handle()
	var cq *client.CQ
	err = r.call(func(c *client.Conn) (err error) { cq, err = c.CreateCQ(n, dch, h); return err })
	if err != nil {
		return nil, fmt.Errorf("create CQ: %w", daemonErr(err))
	}
	c := &CQ{dev: d, ring: cq.Ring(), handle: cq.Handle, channel: ch, remote: &remoteCQ{}}
	r.objects.add(h, c)
	return c, nil
}

// readChannel reads a channel's completion events (CQ user handles) until
// its pipe ends: at Close, or when the daemon ended the session.
func (d *Device) readChannel(f *os.File) {
	var b [8]byte
	for {
		if _, err := io.ReadFull(f, b[:]); err != nil {
			return
		}
		if cq, ok := d.remote.objects.object(binary.LittleEndian.Uint64(b[:])).(*CQ); ok {
			cq.remoteEvent()
		}
	}
}

// remoteEvent is the daemon's completion event for the CQ: the ring's arm
// was taken by a completion. A pending RequestNotify gets it on the CQ's
// channel, and the waiters of Wait look at the ring again. An event may
// come for an arm Wait made just before RequestNotify: the program's
// event then comes early, never late.
func (c *CQ) remoteEvent() {
	if c.armed.Swap(0) != 0 && c.channel != nil {
		select {
		case c.channel.C <- c:
		default:
		}
	}
	c.remote.wake.signal()
}

// takeRing polls a CQ whose completions are in a shared ring: a dialed
// device's. As on a CQ of this process, one that overran gives
// ErrCQOverflow from then on; one whose daemon is gone gives
// client.ErrDaemonGone once it is empty.
func (c *CQ) takeRing(wcs []WC) (int, error) {
	if c.ring.Overrun() {
		return 0, ErrCQOverflow
	}
	c.mu.Lock()
	n := c.ring.Poll(wcs)
	c.mu.Unlock()
	if n > 0 {
		if c.dev.remote != nil {
			c.dev.remote.objects.noteCompletions(wcs[:n])
		}
		return n, nil
	}
	return 0, c.dev.remoteGone()
}

// remoteRequestNotify arms the ring for the program's event. A Wait
// sleeping on an arm for any completion is woken to look again: the arm
// for a solicited completion replaced it.
func (c *CQ) remoteRequestNotify(solicitedOnly bool) {
	v := uint32(hostif.ArmNext)
	if solicitedOnly {
		v = hostif.ArmSolicited
	}
	c.armed.Store(v)
	c.ring.Arm(solicitedOnly)
	if solicitedOnly {
		c.remote.wake.signal()
	}
}

// waitRemote is Wait on a dialed device's CQ: it arms the ring and sleeps
// until the daemon's event, the daemon's end or ctx's. While the program's
// RequestNotify for a solicited completion is pending, arming the ring for
// any completion would answer it early, so Wait looks at the ring between
// sleeps of 10 µs growing to 1 ms instead.
func (c *CQ) waitRemote(ctx context.Context, wcs []WC) (int, error) {
	for pause := 10 * time.Microsecond; ; pause = min(2*pause, time.Millisecond) {
		woken := c.remote.wake.channel()
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
func (c *CQ) armAndTake(wcs []WC) (n int, armed bool, err error) {
	if n, err := c.take(wcs); n > 0 || err != nil {
		return n, false, err
	}
	if c.armed.Load() == hostif.ArmSolicited {
		return 0, false, nil
	}
	c.ring.Arm(false)
	n, err = c.take(wcs)
	return n, true, err
}

// sleepRemote waits for woken, or for pause when the ring was not armed,
// or for the daemon's end (after which take returns client.ErrDaemonGone),
// or for ctx's.
func (c *CQ) sleepRemote(ctx context.Context, woken <-chan struct{}, armed bool, pause time.Duration) error {
	var timeout <-chan time.Time
	if !armed {
		t := time.NewTimer(pause)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-woken:
	case <-timeout:
	case <-c.dev.remote.c.Done():
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

// destroyRemoteChannel destroys the daemon's channel behind ch, which no
// CQ may use any more (ibv_destroy_comp_channel): it holds a descriptor
// of the daemon's.
func (d *Device) destroyRemoteChannel(ch *CompChannel) error {
	if ch.remote.ch == nil {
		return nil // it never opened: nothing is held
	}
	err := d.remote.call(func(c *client.Conn) error { return c.DestroyCompChannel(ch.remote.ch.Handle) })
	if err != nil {
		return fmt.Errorf("destroy completion channel: %w", daemonErr(err))
	}
	return nil
}
