package rdmacm

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// Remote mode: a CM over a device reached through a softnic daemon
// (client.DialDevice) runs its IDs in the daemon, as librdmacm runs them in the
// kernel through rdma_ucm. Each ID here is a handle of the daemon's; each
// event channel is one of the daemon's, whose pipe a goroutine watches
// and drains with cm_get_event into the channel's queue. The daemon moves
// the IDs' QPs through their states, and publishes each state before the
// event that follows it reaches this process.

// remoteCM is the daemon backend of a CM: its side of the daemon's IDs.
type remoteCM struct {
	hooks Hooks
	dev   *verbs.Device // the CM's only device
	// route is the CM's Config.Route, which ResolveAddr asks.
	route func(dst netip.Addr) (netip.Addr, error)

	mu  sync.Mutex
	ids map[uint32]*remoteID // by the daemon's handle
}

// remoteChannel is an event channel's daemon half: the daemon's channel
// whose events it takes; err is why it could not be made.
type remoteChannel struct {
	rc     *remoteCM
	handle uint32
	file   *os.File
	err    error
	done   chan struct{}
}

func newRemoteCM(cfg Config, h Hooks) *remoteCM {
	return &remoteCM{hooks: h, dev: cfg.Devices[0], route: cfg.Route, ids: map[uint32]*remoteID{}}
}

// call runs a control call of the daemon's session.
func (rc *remoteCM) call(fn func(*client.Conn) error) error {
	return remoteErr(client.Control(rc.dev, fn))
}

// remoteErr gives a command's errno the error of this package it stands
// for (the daemon's reply stays in the chain).
func remoteErr(err error) error {
	var ce *client.Error
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	if e := errnoErr(ce.Errno); e != nil {
		return fmt.Errorf("%w: %w", e, err)
	}
	return err
}

// errnoErr is the error of this package an errno stands for, or nil.
func errnoErr(e unix.Errno) error {
	switch e {
	case unix.EINVAL:
		return ErrInvalidArgument
	case unix.EADDRINUSE:
		return ErrAddrInUse
	case unix.EADDRNOTAVAIL:
		return ErrNoDevice
	case unix.ENODEV:
		return ErrNotOnDevice
	case unix.ENETUNREACH, unix.EHOSTUNREACH:
		return ErrNoRoute
	case unix.ECONNREFUSED:
		return ErrRefused
	case unix.ETIMEDOUT:
		return ErrTimedOut
	case unix.EBADF:
		return ErrClosed
	case unix.ENOSYS:
		return ErrNotSupported
	}
	return nil
}

// OpenChannel makes the daemon's channel behind ch and starts draining
// it into post; a failure is kept for CreateID to report.
func (rc *remoteCM) OpenChannel(_ *EventChannel, post func(Event)) ChannelBackend {
	var dc *client.CMChannel
	err := rc.call(func(c *client.Conn) (err error) { dc, err = c.CMCreateChannel(); return err })
	if err != nil {
		return &remoteChannel{err: fmt.Errorf("rdmacm: event channel in the daemon: %w", err)}
	}
	r := &remoteChannel{rc: rc, handle: dc.Handle, file: dc.File, done: make(chan struct{})}
	go rc.drain(post, r)
	return r
}

// drain waits for the channel's pipe and takes every event queued each
// time it is readable, until the channel is closed or the daemon goes.
func (rc *remoteCM) drain(post func(Event), r *remoteChannel) {
	defer close(r.done)
	buf := make([]byte, 64)
	for {
		if _, err := r.file.Read(buf); err != nil {
			return
		}
		for {
			var rec hostif.CMEvent
			var ok bool
			err := rc.call(func(c *client.Conn) (err error) { rec, ok, err = c.CMGetEvent(r.handle); return err })
			if err != nil || !ok {
				break
			}
			if ev, ok := rc.event(&rec); ok {
				post(ev)
			}
		}
	}
}

// Close stops draining the channel and destroys it in the daemon, where
// it holds a descriptor (refused while an ID still sends events there:
// the session's end then takes it).
func (r *remoteChannel) Close() {
	if r.file != nil {
		r.file.Close()
		<-r.done
		r.rc.call(func(c *client.Conn) error { return c.CMDestroyChannel(r.handle) })
	}
}
