package client

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/cm"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// dialed is the backend of a device reached through a softnic daemon
// (DialDevice): its objects live in the daemon, which runs their
// transport; this process posts and polls through shared rings
// (docs/HOST-INTERFACE.md) and hears of completion and async events
// through the pipes the daemon writes (verbs_events.go, verbs_cq.go).
type dialed struct {
	d    *verbs.Device
	emit func(verbs.Event)
	mu   sync.Mutex // serialises control calls
	c    *session.Conn
	// objects are the device's objects by the names the daemon gives
	// them; pipes read its event pipes.
	objects dialedObjects
	pipes   pipeReaders
	// waitChannel is the completion channel of the CQs made without one
	// of the program's, on which CQ.Wait sleeps; made with the first.
	waitMu      sync.Mutex
	waitChannel *session.Channel
	closeOnce   sync.Once
	closeErr    error
}

// DialDevice opens the device a softnic daemon serves on socket
// (/run/softnic/DEVICE.sock; OpenDevice finds it by the device's name).
// Its QPs are RC, UC and UD, with SRQs, address handles, completion
// channels and async events as on a device opened with verbs.Open. Its
// QP1 and verbs.Device.CM are the daemon's: package rdmacm connects its QPs
// through the daemon's connection manager instead (rdmacm*.go).
func DialDevice(socket string) (*verbs.Device, error) {
	c, err := session.Dial(socket)
	if err != nil {
		return nil, err
	}
	var r *dialed
	verbs.NewDevice(func(d *verbs.Device, emit func(verbs.Event)) verbs.DeviceOps {
		r = &dialed{d: d, emit: emit, c: c}
		return r
	})
	r.objects.init()
	if err := r.pipes.start(c.Async, r.readAsync); err != nil {
		c.Close()
		return nil, fmt.Errorf("softnic daemon at %s: async events: %w", socket, err)
	}
	return r.d, nil
}

// call runs a control call under the device's lock.
func (r *dialed) call(fn func(c *session.Conn) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fn(r.c)
}

// Close ends the session (the daemon destroys its objects) and the pipe
// readers; a second Close does nothing.
func (r *dialed) Close() error {
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
	var ce *session.Error
	if !errors.As(err, &ce) {
		return err
	}
	switch ce.Errno {
	case unix.EBUSY:
		return fmt.Errorf("%w: %w: %w", verbs.ErrBusy, verbs.ErrInvalidArgument, err)
	case unix.EINVAL:
		return fmt.Errorf("%w: %w", verbs.ErrInvalidArgument, err)
	case unix.ENOENT: // no such object; for advise_mr, no such ODP region
		return fmt.Errorf("%w: %w: %w", verbs.ErrInvalidArgument, verbs.ErrNoRegion, err)
	case unix.EFAULT:
		return fmt.Errorf("%w: %w", verbs.ErrFault, err)
	case unix.EOPNOTSUPP:
		return fmt.Errorf("%w: %w", verbs.ErrNotSupported, err)
	}
	return err
}

// A dialed device has no engine, QP1 or connection manager of its own:
// they are the daemon's, and so are the counters.
func (r *dialed) Poll() bool                                   { return false }
func (r *dialed) Unpoll()                                      {}
func (r *dialed) Done() <-chan struct{}                        { return r.c.Done() }
func (r *dialed) Err() error                                   { return r.c.Err() }
func (r *dialed) QPs() int                                     { return 0 }
func (r *dialed) GSICounters() *verbs.GSICounters              { return &verbs.GSICounters{} }
func (r *dialed) Counters() *ibv.Counters                      { return &ibv.Counters{} }
func (r *dialed) DeviceCounters() []counters.Counter           { return nil }
func (r *dialed) QPCounters(uint32) ([]counters.Counter, bool) { return nil, false }
func (r *dialed) QPCounterRefs() []ibv.QPCountersRef           { return nil }
func (r *dialed) NodeGUID() uint64                             { return r.c.Device.NodeGUID }
func (r *dialed) RoCE() *roce.Device                           { return nil }
func (r *dialed) CM() *cm.Manager                              { return nil }
func (r *dialed) OnCommEst(*verbs.QP, func())                  {}
func (r *dialed) SetLinkUp(bool) bool                          { return false }

func (r *dialed) GID(index int) (verbs.GID, error) {
	var g verbs.GID
	err := r.call(func(c *session.Conn) (err error) { g, err = c.QueryGID(index); return err })
	return g, err
}

func (r *dialed) Query() verbs.DeviceAttr {
	h := r.c.Device
	return verbs.DeviceAttr{MaxQPWR: int(h.MaxQPWR), MaxSGE: int(h.MaxSGE), MaxCQE: int(h.MaxCQE), MaxInlineData: int(h.MaxInline),
		MaxQPRdAtom: int(h.MaxRdAtomic), MaxMsgSize: 1 << 31, AtomicHostOrder: true, PhysPortCnt: 1,
		ODP: verbs.ODPCaps{General: hostif.ODPGeneral, RC: hostif.ODPRC, UC: hostif.ODPUC, UD: hostif.ODPUD,
			MaxImplicitB: math.MaxUint64}, MaxDMSize: hostif.MaxDMSize}.WithMcast()
}

// PortState asks the daemon, and says PortDown if it cannot.
// ActiveMTU asks the daemon, whose port follows its interface's MTU; the
// hello's, if it cannot.
func (r *dialed) ActiveMTU() verbs.MTU {
	var p hostif.QueryPortReply
	if err := r.call(func(c *session.Conn) (err error) { p, err = c.QueryPort(); return err }); err != nil {
		return verbs.MTU(r.c.Device.ActiveMTU)
	}
	return verbs.MTU(p.ActiveMTU)
}

func (r *dialed) PortState() verbs.PortState {
	var p hostif.QueryPortReply
	if err := r.call(func(c *session.Conn) (err error) { p, err = c.QueryPort(); return err }); err != nil {
		return verbs.PortDown
	}
	return verbs.PortState(p.State)
}

// dialedPD is a protection domain of the daemon's.
type dialedPD struct {
	r      *dialed
	pd     *verbs.PD
	handle uint32
}

func (r *dialed) AllocPD(pd *verbs.PD) verbs.PDOps {
	p := &dialedPD{r: r, pd: pd}
	r.call(func(c *session.Conn) (err error) { p.handle, err = c.AllocPD(); return err })
	return p // a failed allocation leaves handle 0, which every later call gets ENOENT for
}

func (p *dialedPD) RegMR(buf []byte, access verbs.Access) (*verbs.MR, error) {
	var r session.MR
	err := p.r.call(func(c *session.Conn) (err error) { r, err = c.RegMR(p.handle, buf, access); return err })
	if err != nil {
		return nil, fmt.Errorf("register MR: %w", daemonErr(err))
	}
	return verbs.NewMR(p.pd, verbs.RegisteredMR{Buf: buf, Addr: r.Addr, LKey: r.LKey, RKey: r.RKey, Access: access},
		&dialedMR{r: p.r, handle: r.Handle}), nil
}

// dialedMR is a region the daemon registered.
type dialedMR struct {
	r      *dialed
	handle uint32
}

func (m *dialedMR) Dereg() error {
	err := m.r.call(func(c *session.Conn) error { return c.DeregMR(m.handle) })
	if err != nil {
		return fmt.Errorf("deregister MR: %w", daemonErr(err))
	}
	return nil
}

func (p *dialedPD) AllocMW(mw *verbs.MW, typ verbs.MWType) (verbs.MWOps, uint32, error) {
	var h, rkey uint32
	err := p.r.call(func(c *session.Conn) (err error) { h, rkey, err = c.AllocMW(p.handle, typ); return err })
	if err != nil {
		return nil, 0, fmt.Errorf("allocate MW: %w", daemonErr(err))
	}
	return &dialedMW{r: p.r, handle: h}, rkey, nil
}

// dialedMW is a memory window of the daemon's; binds go through the send
// queue, naming the window by its rkey.
type dialedMW struct {
	r      *dialed
	handle uint32
}

func (w *dialedMW) Dealloc() error {
	err := w.r.call(func(c *session.Conn) error { return c.DeallocMW(w.handle) })
	if err != nil {
		return fmt.Errorf("deallocate MW: %w", daemonErr(err))
	}
	return nil
}
