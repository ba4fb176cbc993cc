package verbs

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/ibtransport/cm"
	"github.com/softnic/softnic/roce"
)

// remote is a device reached through a softnic daemon (Dial): its objects
// live in the daemon, which runs their transport; this process posts and
// polls through shared rings (docs/HOST-INTERFACE.md) and hears of
// completion and async events through the pipes the daemon writes
// (remote_events.go, remote_cq.go).
type remote struct {
	d  *Device
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
	var r *remote
	newDevice(func(d *Device) deviceOps {
		r = &remote{d: d, c: c}
		return r
	})
	r.objects.init()
	if err := r.pipes.start(c.Async, r.readAsync); err != nil {
		c.Close()
		return nil, fmt.Errorf("softnic daemon at %s: async events: %w", socket, err)
	}
	return r.d, nil
}

// Remote reports whether the device is reached through a daemon (Dial):
// its transport runs in another process, and MR.RemoteWriteSeq does not
// move.
func (d *Device) Remote() bool {
	_, ok := d.ops.(*remote)
	return ok
}

// call runs a control call under the device's lock.
func (r *remote) call(fn func(c *client.Conn) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fn(r.c)
}

// Close ends the session (the daemon destroys its objects) and the pipe
// readers; a second Close does nothing.
func (r *remote) Close() error {
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

// A dialed device has no engine, QP1 or connection manager of its own:
// they are the daemon's, and so are the counters.
func (r *remote) Poll() bool                                   { return false }
func (r *remote) Unpoll()                                      {}
func (r *remote) Done() <-chan struct{}                        { return r.c.Done() }
func (r *remote) Err() error                                   { return r.c.Err() }
func (r *remote) QPs() int                                     { return 0 }
func (r *remote) GSICounters() *GSICounters                    { return &GSICounters{} }
func (r *remote) Counters() *ibtransport.Counters              { return &ibtransport.Counters{} }
func (r *remote) DeviceCounters() []counters.Counter           { return nil }
func (r *remote) QPCounters(uint32) ([]counters.Counter, bool) { return nil, false }
func (r *remote) QPCounterRefs() []ibtransport.QPCountersRef   { return nil }
func (r *remote) NodeGUID() uint64                             { return r.c.Device.NodeGUID }
func (r *remote) RoCE() *roce.Device                           { return nil }
func (r *remote) CM() *cm.Manager                              { return nil }
func (r *remote) OnCommEst(*QP, func())                        {}
func (r *remote) SetLinkUp(bool) bool                          { return false }
func (r *remote) ActiveMTU() MTU                               { return MTU(r.c.Device.ActiveMTU) }

func (r *remote) GID(index int) (GID, error) {
	var g GID
	err := r.call(func(c *client.Conn) (err error) { g, err = c.QueryGID(index); return err })
	return g, err
}

func (r *remote) Query() DeviceAttr {
	h := r.c.Device
	return DeviceAttr{MaxQPWR: int(h.MaxQPWR), MaxSGE: int(h.MaxSGE), MaxCQE: int(h.MaxCQE), MaxInlineData: int(h.MaxInline),
		MaxQPRdAtom: int(h.MaxRdAtomic), MaxMsgSize: 1 << 31, AtomicHostOrder: true, PhysPortCnt: 1}
}

// PortState asks the daemon, and says PortDown if it cannot.
func (r *remote) PortState() PortState {
	var p hostif.QueryPortReply
	if err := r.call(func(c *client.Conn) (err error) { p, err = c.QueryPort(); return err }); err != nil {
		return PortDown
	}
	return PortState(p.State)
}

// remotePD is a protection domain of the daemon's.
type remotePD struct {
	r      *remote
	pd     *PD
	handle uint32
}

func (r *remote) AllocPD(pd *PD) pdOps {
	p := &remotePD{r: r, pd: pd}
	r.call(func(c *client.Conn) (err error) { p.handle, err = c.AllocPD(); return err })
	return p // a failed allocation leaves handle 0, which every later call gets ENOENT for
}

func (p *remotePD) RegMR(buf []byte, access Access) (*MR, error) {
	var r client.MR
	err := p.r.call(func(c *client.Conn) (err error) { r, err = c.RegMR(p.handle, buf, access); return err })
	if err != nil {
		return nil, fmt.Errorf("register MR: %w", daemonErr(err))
	}
	m := &MR{pd: p.pd, buf: buf, size: uint64(len(buf)), addr: r.Addr, access: access, lkey: r.LKey, rkey: r.RKey,
		ops: &remoteMR{r: p.r, handle: r.Handle}, valid: true}
	m.rkeyValid.Store(true)
	return m, nil
}

// remoteMR is a region the daemon registered.
type remoteMR struct {
	r      *remote
	handle uint32
}

func (m *remoteMR) Dereg() error {
	err := m.r.call(func(c *client.Conn) error { return c.DeregMR(m.handle) })
	if err != nil {
		return fmt.Errorf("deregister MR: %w", daemonErr(err))
	}
	return nil
}
