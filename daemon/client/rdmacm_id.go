package client

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/verbs"
)

// The IDs of a remote CM: each call is the daemon's command; what the ID
// knows here (its addresses, device and QP) is what the replies and
// events said.

// dialedID is an ID's daemon half: its handle there, and what the
// replies and events said of it.
type dialedID struct {
	rc     *dialedCM
	front  *rdmacm.ID
	handle uint32

	mu        sync.Mutex
	local     netip.AddrPort
	peer      netip.AddrPort
	dev       *verbs.Device
	qp        *verbs.QP
	pd        *verbs.PD
	destroyed bool
}

// CreateID makes the ID in the daemon, its events going to the daemon's
// channel behind chb.
func (rc *dialedCM) CreateID(front *rdmacm.ID, chb rdmacm.ChannelBackend) (rdmacm.IDBackend, error) {
	r, ok := chb.(*dialedEventChannel)
	if !ok {
		return nil, fmt.Errorf("create ID: channel of another CM: %w", rdmacm.ErrInvalidArgument)
	}
	if r.err != nil {
		return nil, r.err
	}
	var h uint32
	if err := rc.call(func(cl *session.Conn) (err error) {
		h, err = cl.CMCreateID(r.handle, uint16(front.PortSpace()), 0)
		return err
	}); err != nil {
		return nil, fmt.Errorf("create ID: %w", err)
	}
	id := &dialedID{rc: rc, front: front, handle: h}
	rc.register(id)
	return id, nil
}

// register makes id the one the daemon's events for its handle are for.
func (rc *dialedCM) register(id *dialedID) {
	rc.mu.Lock()
	rc.ids[id.handle] = id
	rc.mu.Unlock()
}

// isUD reports whether the ID's port space has UD QPs.
func (id *dialedID) isUD() bool { return id.front.PortSpace() == rdmacm.PortSpaceUDP }

func (id *dialedID) Device() *verbs.Device {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.dev
}

func (id *dialedID) QP() *verbs.QP {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.qp
}

func (id *dialedID) LocalAddr() netip.AddrPort {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.local
}

func (id *dialedID) PeerAddr() netip.AddrPort {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.peer
}

// Listening and KernelState know only what this side does: the daemon
// keeps the ID's state, this side whether it is bound.
func (id *dialedID) Listening() bool { return false }

func (id *dialedID) KernelState() uint8 {
	if id.LocalAddr().IsValid() {
		return 7 // RDMA_CM_ADDR_BOUND
	}
	return 0 // RDMA_CM_IDLE
}

// RequestTaken has nothing to count: the daemon's backlog counts the
// requests this side has not yet taken from it.
func (id *dialedID) RequestTaken() {}

// AttachQP is refused: the daemon makes the QP of an ID of its own
// (CreateQP).
func (id *dialedID) AttachQP(*verbs.QP) error {
	return fmt.Errorf("attach QP: %w", rdmacm.ErrInvalidArgument)
}

// setAddrs records the addresses a reply or an event gave.
func (id *dialedID) setAddrs(local, peer netip.AddrPort) {
	id.mu.Lock()
	id.local, id.peer = local, peer
	id.mu.Unlock()
}

func (id *dialedID) Bind(ap netip.AddrPort) error {
	rc := id.rc
	var a session.CMAddrs
	if err := rc.call(func(c *session.Conn) (err error) { a, err = c.CMBind(id.handle, ap); return err }); err != nil {
		return fmt.Errorf("bind %v: %w", ap, err)
	}
	id.setAddrs(a.Local, a.Peer)
	if !rc.hooks.AnyAddr(ap.Addr()) { // a wildcard or loopback bind attaches no device
		id.mu.Lock()
		id.dev = rc.dev
		id.mu.Unlock()
	}
	return nil
}

// ResolveAddr asks the CM's Route, if it has one, for the source
// the daemon is not told otherwise (the program's routing table is the
// one that counts), but for a loopback or wildcard destination, which the
// daemon resolves to its device; the daemon finds the peers.
func (id *dialedID) ResolveAddr(src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	rc, local := id.rc, id.LocalAddr()
	if !src.IsValid() && (!local.IsValid() || rc.hooks.AnyAddr(local.Addr())) && !rc.hooks.AnyAddr(dst.Addr()) && rc.route != nil {
		var err error
		if src, err = rc.route(dst.Addr()); err != nil {
			return fmt.Errorf("resolve address %v: %w", dst, err)
		}
	}
	err := rc.call(func(c *session.Conn) error { return c.CMResolveAddr(id.handle, src, dst, timeout) })
	if err != nil {
		return fmt.Errorf("resolve address %v: %w", dst, err)
	}
	return nil
}

func (id *dialedID) ResolveRoute(timeout time.Duration) error {
	if err := id.rc.call(func(c *session.Conn) error { return c.CMResolveRoute(id.handle, timeout) }); err != nil {
		return fmt.Errorf("resolve route: %w", err)
	}
	return nil
}

// CreateQP makes the ID's QP on pd through cm_create_qp: a QP of the
// device like any other, which the daemon moved to INIT.
func (id *dialedID) CreateQP(pd *verbs.PD, init *verbs.QPInitAttr) (*verbs.QP, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	pd, err := id.rc.hooks.QPPD(id.dev, id.qp, id.front.PortSpace(), pd, init)
	if err != nil {
		return nil, err
	}
	qp, err := cmCreateQP(pd, init, id.handle)
	if err != nil {
		return nil, fmt.Errorf("create QP: %w", cmErr(err))
	}
	id.qp, id.pd = qp, pd
	return qp, nil
}

// cmCreateQP creates the QP of the daemon's ID handle on pd as
// PD.CreateQP does, through cm_create_qp: the QP is then like any other
// of the device's.
func cmCreateQP(pd *verbs.PD, init *verbs.QPInitAttr, handle uint32) (*verbs.QP, error) {
	p, ok := pd.Backend().(*dialedPD)
	if !ok {
		return nil, fmt.Errorf("PD of no device a daemon serves: %w", rdmacm.ErrInvalidArgument)
	}
	create := func(c *session.Conn, req hostif.CreateQPRequest) (*session.QP, error) {
		return c.CMCreateQP(handle, req)
	}
	return pd.CreateQPWith(init, func(q *verbs.QP) (verbs.QPOps, error) { return p.createQPThrough(q, init, create) })
}

func (id *dialedID) DestroyQP() error {
	id.mu.Lock()
	qp := id.qp
	id.qp = nil
	id.mu.Unlock()
	if qp == nil {
		return fmt.Errorf("destroy QP: no QP: %w", rdmacm.ErrState)
	}
	if err := id.rc.call(func(c *session.Conn) error { return c.CMDetachQP(id.handle) }); err != nil {
		return fmt.Errorf("destroy QP: %w", err)
	}
	return qp.Destroy()
}

// connParam encodes p for the daemon.
func (id *dialedID) connParam(p *rdmacm.ConnParam, maxPrivate int) (hostif.CMConnParam, error) {
	if len(p.PrivateData) > maxPrivate {
		return hostif.CMConnParam{}, fmt.Errorf("%d bytes of private data, at most %d: %w", len(p.PrivateData), maxPrivate, rdmacm.ErrInvalidArgument)
	}
	cp := hostif.CMConnParam{ID: id.handle, ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RetryCount: p.RetryCount, RNRRetryCount: p.RNRRetryCount, PrivateLen: uint32(len(p.PrivateData)), QPNum: p.QPNum}
	copy(cp.Private[:], p.PrivateData)
	return cp, nil
}

func (id *dialedID) Connect(p *rdmacm.ConnParam) error {
	room := mad.CMAUserDataLen
	if id.isUD() {
		room = mad.SIDRREQPrivateDataLen - mad.CMAHeaderLen
	}
	cp, err := id.connParam(p, room)
	if err == nil {
		err = id.rc.call(func(c *session.Conn) error { return c.CMConnect(cp) })
	}
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	return nil
}

func (id *dialedID) Accept(p *rdmacm.ConnParam) error {
	room := mad.REPPrivateDataLen
	if id.isUD() {
		room = mad.SIDRREPPrivateDataLen
	}
	cp, err := id.connParam(p, room)
	if err == nil {
		err = id.rc.call(func(c *session.Conn) error { return c.CMAccept(cp) })
	}
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	return nil
}

func (id *dialedID) Reject(privateData []byte) error {
	if len(privateData) > hostif.CMPrivateDataMax {
		return fmt.Errorf("reject: %d bytes of private data: %w", len(privateData), rdmacm.ErrInvalidArgument)
	}
	if err := id.rc.call(func(c *session.Conn) error { return c.CMReject(id.handle, privateData) }); err != nil {
		return fmt.Errorf("reject: %w", err)
	}
	return nil
}

func (id *dialedID) Listen(backlog int) error {
	var a session.CMAddrs
	if err := id.rc.call(func(c *session.Conn) (err error) { a, err = c.CMListen(id.handle, backlog); return err }); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	id.setAddrs(a.Local, a.Peer)
	return nil
}

func (id *dialedID) SetOption(option int, value uint8) error {
	if option < 0 {
		return fmt.Errorf("set option %d: %w", option, rdmacm.ErrNotSupported)
	}
	if err := id.rc.call(func(c *session.Conn) error { return c.CMSetOption(id.handle, uint32(option), uint32(value)) }); err != nil {
		return fmt.Errorf("set option: %w", cmErr(err))
	}
	return nil
}

func (id *dialedID) JoinMulticast(addr netip.Addr, flags rdmacm.JoinFlags) error {
	if err := id.rc.call(func(c *session.Conn) error { return c.CMJoinMcast(id.handle, uint32(flags), addr) }); err != nil {
		return fmt.Errorf("join multicast %v: %w", addr, cmErr(err))
	}
	return nil
}

func (id *dialedID) LeaveMulticast(addr netip.Addr) error {
	if err := id.rc.call(func(c *session.Conn) error { return c.CMLeaveMcast(id.handle, addr) }); err != nil {
		return fmt.Errorf("leave multicast %v: %w", addr, cmErr(err))
	}
	return nil
}

// Migrate has the daemon send the ID's events to the daemon's channel
// behind chb, whose drain posts them on its event channel.
func (id *dialedID) Migrate(chb rdmacm.ChannelBackend) error {
	r, ok := chb.(*dialedEventChannel)
	if !ok || r.err != nil {
		return fmt.Errorf("migrate: channel of another CM: %w", rdmacm.ErrInvalidArgument)
	}
	if err := id.rc.call(func(c *session.Conn) error { return c.CMMigrateID(id.handle, r.handle) }); err != nil {
		return fmt.Errorf("migrate: %w", cmErr(err))
	}
	return nil
}

func (id *dialedID) InitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	var attr *verbs.QPAttr
	var mask verbs.QPAttrMask
	err := id.rc.call(func(c *session.Conn) (err error) {
		attr, mask, err = c.CMInitQPAttr(id.handle, state)
		return err
	})
	if err != nil {
		return verbs.QPAttr{}, 0, fmt.Errorf("init session.QP attributes: %w", cmErr(err))
	}
	return *attr, mask, nil
}

func (id *dialedID) Establish() error {
	if err := id.rc.call(func(c *session.Conn) error { return c.CMEstablish(id.handle) }); err != nil {
		return fmt.Errorf("establish: %w", cmErr(err))
	}
	return nil
}

func (id *dialedID) Disconnect() error {
	if err := id.rc.call(func(c *session.Conn) error { return c.CMDisconnect(id.handle) }); err != nil {
		return fmt.Errorf("disconnect: %w", err)
	}
	return nil
}

// Destroy destroys the ID in the daemon, then its QP, as Destroy
// does in this process.
func (id *dialedID) Destroy() error {
	id.mu.Lock()
	if id.destroyed {
		id.mu.Unlock()
		return fmt.Errorf("destroy ID: %w", rdmacm.ErrState)
	}
	id.destroyed = true
	qp := id.qp
	id.qp = nil
	id.mu.Unlock()
	rc := id.rc
	err := rc.call(func(c *session.Conn) error { return c.CMDestroyID(id.handle) })
	if qp != nil {
		qp.Destroy()
	}
	rc.mu.Lock()
	delete(rc.ids, id.handle)
	rc.mu.Unlock()
	if err != nil {
		return fmt.Errorf("destroy ID: %w", err)
	}
	return nil
}
