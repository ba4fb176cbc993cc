package verbs

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/ibtransport"
)

// remote is a device reached through a softnic daemon (Dial): its objects
// live in the daemon, which runs their transport; this process posts and
// polls through shared rings (docs/HOST-INTERFACE.md) and hears of
// completion and async events through the pipes the daemon writes
// (remote_events.go, remote_cq.go).
type remote struct {
	mu sync.Mutex // serialises control calls
	c  *client.Conn
	// objects are the device's objects by the names the daemon gives
	// them; pipes read its event pipes.
	objects remoteObjects
	pipes   pipeReaders
	// waitChannel is the completion channel of the CQs made without one
	// of the program's, on which CQ.Wait sleeps; made with the first.
	waitMu      sync.Mutex
	waitChannel *client.Channel
	// ahGroup makes the AHs programs hold (remoteAH); it has no engine.
	ahGroup   ibtransport.Group
	closeOnce sync.Once
	closeErr  error
}

// Dial opens the device a softnic daemon serves on socket
// (/run/softnic/DEVICE.sock; OpenDevice finds it by the device's name).
// Its QPs are RC, UC and UD, with SRQs, address handles, completion
// channels and async events as on a device opened with Open. Its QP1 and
// Device.CM are the daemon's: package rdmacm connects its QPs through the
// daemon's connection manager instead.
func Dial(socket string) (*Device, error) {
	c, err := client.Dial(socket)
	if err != nil {
		return nil, err
	}
	d := &Device{remote: &remote{c: c}, events: make(chan Event, 256)}
	d.remote.objects.init()
	if err := d.remote.pipes.start(c.Async, d.readAsync); err != nil {
		c.Close()
		return nil, fmt.Errorf("softnic daemon at %s: async events: %w", socket, err)
	}
	return d, nil
}

// Remote reports whether the device is reached through a daemon (Dial):
// its transport runs in another process, and MR.RemoteWriteSeq does not
// move.
func (d *Device) Remote() bool { return d.remote != nil }

// remoteGone returns client.ErrDaemonGone once the daemon serving a
// device reached through Dial has gone (its CQs then give it when empty,
// as its posts do), and nil for every other device.
func (d *Device) remoteGone() error {
	if d.remote == nil {
		return nil
	}
	return d.remote.c.Err()
}

// call runs a control call under the device's lock.
func (r *remote) call(fn func(c *client.Conn) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fn(r.c)
}

// close ends the session (the daemon destroys its objects) and the pipe
// readers; a second close does nothing.
func (r *remote) close() error {
	r.closeOnce.Do(func() {
		r.pipes.close()
		r.closeErr = r.c.Close()
	})
	return r.closeErr
}

// daemonErr gives a command's errno the verbs error it stands for, so
// that errors.Is finds the same errors on both kinds of device; the
// daemon's error stays in the chain.
func daemonErr(err error) error {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return err
	}
	switch ce.Errno {
	case unix.EINVAL, unix.ENOENT, unix.EBUSY:
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return err
}

func (d *Device) remoteGID(index int) (GID, error) {
	var g GID
	err := d.remote.call(func(c *client.Conn) (err error) { g, err = c.QueryGID(index); return err })
	return g, err
}

func (d *Device) remoteQuery() DeviceAttr {
	h := d.remote.c.Device
	return DeviceAttr{MaxQPWR: int(h.MaxQPWR), MaxSGE: int(h.MaxSGE), MaxCQE: int(h.MaxCQE), MaxInlineData: int(h.MaxInline),
		MaxQPRdAtom: int(h.MaxRdAtomic), MaxMsgSize: 1 << 31, AtomicHostOrder: true, PhysPortCnt: 1}
}

func (d *Device) remotePD() *PD {
	pd := &PD{dev: d, id: d.nextPD.Add(1)}
	d.remote.call(func(c *client.Conn) (err error) { pd.handle, err = c.AllocPD(); return err })
	return pd // a failed allocation leaves handle 0, which every later call gets ENOENT for
}

func (pd *PD) remoteMR(buf []byte, access Access) (*MR, error) {
	var r client.MR
	err := pd.dev.remote.call(func(c *client.Conn) (err error) { r, err = c.RegMR(pd.handle, buf, access); return err })
	if err != nil {
		return nil, fmt.Errorf("register MR: %w", daemonErr(err))
	}
	m := &MR{pd: pd, buf: buf, size: uint64(len(buf)), addr: r.Addr, access: access, lkey: r.LKey, rkey: r.RKey,
		handle: r.Handle, valid: true}
	m.rkeyValid.Store(true)
	return m, nil
}

func (m *MR) remoteDereg() error {
	err := m.pd.dev.remote.call(func(c *client.Conn) error { return c.DeregMR(m.handle) })
	if err != nil {
		return fmt.Errorf("deregister MR: %w", daemonErr(err))
	}
	return nil
}
