package verbs

import (
	"fmt"
	"sync"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/hostif"
)

// remote is a device reached through a softnic daemon (Dial): its objects
// live in the daemon, which runs their transport; this process posts and
// polls through shared rings (docs/HOST-INTERFACE.md).
type remote struct {
	mu sync.Mutex // serialises control calls
	c  *client.Conn
}

// Dial opens the device a softnic daemon serves on socket
// (/run/softnic/DEVICE.sock). Its QPs are RC and UC; SRQs, UD QPs, address
// handles and the connection manager are not reached through it yet.
func Dial(socket string) (*Device, error) {
	c, err := client.Dial(socket)
	if err != nil {
		return nil, err
	}
	return &Device{remote: &remote{c: c}, events: make(chan Event, 256)}, nil
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

func (d *Device) remoteCQ(n int) (*CQ, error) {
	var cq *client.CQ
	err := d.remote.call(func(c *client.Conn) (err error) { cq, err = c.CreateCQ(n, nil, 0); return err })
	if err != nil {
		return nil, fmt.Errorf("create CQ: %w", err)
	}
	return &CQ{dev: d, ring: cq.Ring(), handle: cq.Handle, notify: make(chan struct{}, 1)}, nil
}

func (pd *PD) remoteMR(buf []byte, access Access) (*MR, error) {
	var r client.MR
	err := pd.dev.remote.call(func(c *client.Conn) (err error) { r, err = c.RegMR(pd.handle, buf, access); return err })
	if err != nil {
		return nil, fmt.Errorf("register MR: %w", err)
	}
	m := &MR{pd: pd, buf: buf, size: uint64(len(buf)), addr: r.Addr, access: access, lkey: r.LKey, rkey: r.RKey,
		handle: r.Handle, valid: true}
	m.rkeyValid.Store(true)
	return m, nil
}

func (m *MR) remoteDereg() error {
	return m.pd.dev.remote.call(func(c *client.Conn) error { return c.DeregMR(m.handle) })
}

func (pd *PD) remoteQP(init *QPInitAttr) (*QP, error) {
	if init.SRQ != nil || init.Type == QPTypeUD {
		return nil, fmt.Errorf("create QP: SRQs and UD QPs through the daemon: %w", ErrInvalidArgument)
	}
	c := init.Cap
	req := hostif.CreateQPRequest{PD: pd.handle, Type: uint32(init.Type), SendCQ: init.SendCQ.handle, RecvCQ: init.RecvCQ.handle,
		MaxSendWR: uint32(c.MaxSendWR), MaxRecvWR: uint32(max(c.MaxRecvWR, 1)), MaxSendSGE: uint32(c.MaxSendSGE),
		MaxRecvSGE: uint32(c.MaxRecvSGE), MaxInline: uint32(c.MaxInlineData)}
	var q *client.QP
	err := pd.dev.remote.call(func(cl *client.Conn) (err error) { q, err = cl.CreateQP(req); return err })
	if err != nil {
		return nil, fmt.Errorf("create QP: %w", err)
	}
	return &QP{remote: &remoteQP{q: q, dev: pd.dev, cap: c, typ: init.Type, sigAll: init.SigAll}}, nil
}

// remoteQP is a QP the daemon runs. Posts go into its shared rings; the
// state is the daemon's, as last set through Modify.
type remoteQP struct {
	q      *client.QP
	dev    *Device
	cap    QPCap
	typ    QPType
	sigAll bool
	mu     sync.Mutex // serialises posters, as the transport's poster locks do
	attr   QPAttr
}

func (r *remoteQP) postSend(wr *SendWR) error {
	if r.sigAll && wr.Flags&SendSignaled == 0 {
		w := *wr
		w.Flags |= SendSignaled
		wr = &w
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.q.PostSend(wr); err != nil {
		return fmt.Errorf("post send on QP %d: %w", r.q.QPN, remoteErr(err))
	}
	return nil
}

func (r *remoteQP) postRecv(wr *RecvWR) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.q.PostRecv(wr); err != nil {
		return fmt.Errorf("post receive on QP %d: %w", r.q.QPN, remoteErr(err))
	}
	return nil
}

// remoteErr maps a full ring to the error the transport's queues give.
func remoteErr(err error) error {
	if err == client.ErrQueueFull {
		return ErrQueueFull
	}
	return err
}

func (r *remoteQP) modify(attr *QPAttr, mask QPAttrMask) error {
	err := r.dev.remote.call(func(*client.Conn) error { return r.q.Modify(attr, mask) })
	if err == nil {
		r.mu.Lock()
		mergeAttr(&r.attr, attr, mask)
		r.mu.Unlock()
	}
	return err
}

// mergeAttr copies the attributes mask selects from attr into into.
func mergeAttr(into, attr *QPAttr, mask QPAttrMask) {
	if mask&QPAttrState != 0 {
		into.State = attr.State
	}
	if mask&QPAttrDestQPN != 0 {
		into.DestQPN = attr.DestQPN
	}
	if mask&QPAttrPathMTU != 0 {
		into.PathMTU = attr.PathMTU
	}
	if mask&QPAttrAV != 0 {
		into.AV = attr.AV
	}
	if mask&QPAttrSQPSN != 0 {
		into.SQPSN = attr.SQPSN
	}
	if mask&QPAttrRQPSN != 0 {
		into.RQPSN = attr.RQPSN
	}
}

func (r *remoteQP) destroy() error {
	return r.dev.remote.call(func(*client.Conn) error { return r.q.Destroy() })
}
