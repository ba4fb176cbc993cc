package client

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/verbs"
)

// The daemon backend of package rdmacm: a CM over a device reached
// through DialDevice runs its IDs in the daemon, as librdmacm runs them
// in the kernel through rdma_ucm; the device's backend is the
// rdmacm.BackendProvider that rdmacm.New finds. Each ID here is a handle
// of the daemon's; each event channel is one of the daemon's, whose pipe
// a goroutine watches and drains with cm_get_event into the channel's
// queue. The daemon moves the IDs' QPs through their states, and
// publishes each state before the event that follows it reaches this
// process.

// dialedCM is the daemon backend of a CM: its side of the daemon's IDs.
type dialedCM struct {
	r     *dialed
	hooks rdmacm.Hooks
	dev   *verbs.Device // the CM's only device
	// route is the CM's Config.Route, which ResolveAddr asks.
	route func(dst netip.Addr) (netip.Addr, error)

	mu  sync.Mutex
	ids map[uint32]*dialedID // by the daemon's handle
}

// dialedEventChannel is an event channel's daemon half: the daemon's
// channel whose events it takes; err is why it could not be made.
type dialedEventChannel struct {
	rc     *dialedCM
	handle uint32
	file   *os.File
	err    error
	done   chan struct{}
}

// NewCMBackend makes the backend of an rdmacm CM over the device: its
// IDs run in the daemon.
func (r *dialed) NewCMBackend(cfg rdmacm.Config, h rdmacm.Hooks) rdmacm.CMBackend {
	return &dialedCM{r: r, hooks: h, dev: r.d, route: cfg.Route, ids: map[uint32]*dialedID{}}
}

// call runs a control call of the daemon's session.
func (rc *dialedCM) call(fn func(*session.Conn) error) error {
	return cmErr(rc.r.call(fn))
}

// cmErr gives a command's errno the error of package rdmacm it stands
// for (the daemon's reply stays in the chain).
func cmErr(err error) error {
	var ce *session.Error
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	if e := cmErrnoErr(ce.Errno); e != nil {
		return fmt.Errorf("%w: %w", e, err)
	}
	return err
}

// cmErrnoErr is the error of package rdmacm an errno stands for, or nil.
func cmErrnoErr(e unix.Errno) error {
	switch e {
	case unix.EINVAL:
		return rdmacm.ErrInvalidArgument
	case unix.EADDRINUSE:
		return rdmacm.ErrAddrInUse
	case unix.EADDRNOTAVAIL:
		return rdmacm.ErrNoDevice
	case unix.ENODEV:
		return rdmacm.ErrNotOnDevice
	case unix.ENETUNREACH, unix.EHOSTUNREACH:
		return rdmacm.ErrNoRoute
	case unix.ECONNREFUSED:
		return rdmacm.ErrRefused
	case unix.ETIMEDOUT:
		return rdmacm.ErrTimedOut
	case unix.EBADF:
		return rdmacm.ErrClosed
	case unix.ENOSYS:
		return rdmacm.ErrNotSupported
	}
	return nil
}

// OpenChannel makes the daemon's channel behind ch and starts draining
// it into post; a failure is kept for CreateID to report.
func (rc *dialedCM) OpenChannel(_ *rdmacm.EventChannel, post func(rdmacm.Event)) rdmacm.ChannelBackend {
	var dc *session.CMChannel
	err := rc.call(func(c *session.Conn) (err error) { dc, err = c.CMCreateChannel(); return err })
	if err != nil {
		return &dialedEventChannel{err: fmt.Errorf("rdmacm: event channel in the daemon: %w", err)}
	}
	r := &dialedEventChannel{rc: rc, handle: dc.Handle, file: dc.File, done: make(chan struct{})}
	go rc.drain(post, r)
	return r
}

// drain waits for the channel's pipe and takes every event queued each
// time it is readable, until the channel is closed or the daemon goes.
func (rc *dialedCM) drain(post func(rdmacm.Event), r *dialedEventChannel) {
	defer close(r.done)
	buf := make([]byte, 64)
	for {
		if _, err := r.file.Read(buf); err != nil {
			return
		}
		for {
			var rec hostif.CMEvent
			var ok bool
			err := rc.call(func(c *session.Conn) (err error) { rec, ok, err = c.CMGetEvent(r.handle); return err })
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
func (r *dialedEventChannel) Close() {
	if r.file != nil {
		r.file.Close()
		<-r.done
		r.rc.call(func(c *session.Conn) error { return c.CMDestroyChannel(r.handle) })
	}
}
