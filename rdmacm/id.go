package rdmacm

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/ibtransport/cm"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// ID is a connection identifier (struct rdma_cm_id): bound to an address,
// it listens or connects, and moves its QP through the states the
// connection needs.
type ID struct {
	c  *CM
	ch atomic.Pointer[EventChannel] // where its events go (Migrate moves it)
	ps mad.PortSpace

	mu       sync.Mutex
	state    idState
	dev      *verbs.Device
	gidIndex int
	local    netip.AddrPort // bound (a port reserved in c.ports when valid)
	peer     netip.AddrPort
	// peerGID is the GID the peer address resolved to: the peer's
	// address as a GID, or for a loopback or wildcard destination the
	// ID's own GID (as cma.c's cma_resolve_loopback sets the DGID).
	peerGID verbs.GID
	qp      *verbs.QP
	pd      *verbs.PD
	conn    *cm.Conn // the IB CM connection once connecting or requested
	listens []*cm.Listener
	listen  *ID       // for an ID made by a connect request: the listening ID
	req     cm.Event  // the connect request, until Accept
	ourPSN  uint32    // the PSN our receive queue expects
	param   ConnParam // ours, from Connect or Accept
	// path is the connection's, once the REQ (passive side) or the REP
	// (active side) came: what InitQPAttr answers from.
	path    *path
	backlog int
	pending int // connect requests queued on the channel, not yet taken (listening IDs)
	// lentQP is set when the QP is the caller's (AttachQP): the ID lets
	// go of it rather than destroying it.
	lentQP bool
	// tos and ackTimeout are SetOption's (0: none set).
	tos, ackTimeout uint8
	// rem is the ID's other half in a daemon when the CM is remote
	// (remote.go); nil otherwise.
	rem *remoteID
}

type idState uint8

const (
	stateIdle idState = iota
	stateAddrQuery
	stateAddrResolved
	stateRouteResolved
	stateListen
	stateConnect   // REQ sent
	stateResponded // REP received by an ID whose QP is the caller's, until Establish
	stateRequested // REQ received, not yet accepted
	stateAccepted  // REP sent
	stateEstablished
	stateDisconnect // DREQ sent or received
	stateDestroying
)

// ConnParam are the parameters of a connection (struct rdma_conn_param).
type ConnParam struct {
	// PrivateData goes to the peer in the REQ (after the 36-byte rdma_cm
	// header: at most mad.CMAUserDataLen bytes), the REP or the REJ.
	PrivateData []byte
	// ResponderResources is how many RDMA READs and atomics the peer may
	// have outstanding at this side; InitiatorDepth how many this side
	// issues at once.
	ResponderResources, InitiatorDepth uint8
	// RetryCount and RNRRetryCount are the QP's retry counts (7: forever
	// for RNR). Zero RetryCount is taken as 7 as librdmacm's users mostly
	// mean it; RNRRetryCount is used as given.
	RetryCount, RNRRetryCount uint8
	// QPNum is the number of a QP the caller made itself and moves
	// through its states with InitQPAttr, for Connect and Accept on an ID
	// that has no QP (rdma_conn_param.qp_num; userqp.go).
	QPNum uint32
}

// CreateID creates an ID whose events go to ch (rdma_create_id).
func (c *CM) CreateID(ch *EventChannel, ps mad.PortSpace) (*ID, error) {
	if ch == nil || (ps != PortSpaceTCP && ps != PortSpaceUDP) {
		return nil, fmt.Errorf("create ID: port space %#x: %w", uint16(ps), ErrInvalidArgument)
	}
	if c.remote != nil {
		return c.remoteCreateID(ch, ps)
	}
	id := &ID{c: c, ps: ps}
	id.ch.Store(ch)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	c.ids[id] = struct{}{}
	return id, nil
}

// Device returns the device the ID is bound to (its verbs context); nil
// until its address is resolved or bound to a device's address.
func (id *ID) Device() *verbs.Device {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.dev
}

// QP returns the ID's QP (CreateQP), or nil.
func (id *ID) QP() *verbs.QP {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.qp
}

// Listening reports whether the ID listens (rdma_listen), as `rdma
// resource show cm_id` prints state LISTEN.
func (id *ID) Listening() bool {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.state == stateListen
}

// KernelState is the ID's state as the kernel's enum rdma_cm_state numbers
// it, which `rdma resource show cm_id` prints by name (KernelStateNames).
func (id *ID) KernelState() uint8 {
	id.mu.Lock()
	defer id.mu.Unlock()
	switch id.state {
	case stateIdle:
		if id.local.IsValid() {
			return 7 // RDMA_CM_ADDR_BOUND
		}
		return 0 // RDMA_CM_IDLE
	case stateAddrQuery:
		return 1
	case stateAddrResolved:
		return 2
	case stateRouteResolved:
		return 4
	case stateListen:
		return 8
	case stateDisconnect:
		return 6
	case stateDestroying:
		return 10
	default: // from the REQ to the connection's end
		return 5 // RDMA_CM_CONNECT
	}
}

// KernelStateNames are the names of the kernel's rdma_cm states, as
// `rdma resource show cm_id` prints them.
var KernelStateNames = [...]string{"IDLE", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_QUERY", "ROUTE_RESOLVED",
	"CONNECT", "DISCONNECT", "ADDR_BOUND", "LISTEN", "DEVICE_REMOVAL", "DESTROYING"}

// PortSpace returns the port space the ID was made in.
func (id *ID) PortSpace() mad.PortSpace { return id.ps }

// LocalAddr returns the address and port the ID is bound to.
func (id *ID) LocalAddr() netip.AddrPort {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.local
}

// PeerAddr returns the peer's address and port once known.
func (id *ID) PeerAddr() netip.AddrPort {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.peer
}

// anyAddr reports whether a is what cma.c's cma_any_addr calls any: the
// unspecified address or a loopback one (127.0.0.0/8, ::1). Binding to
// one attaches no device; resolving one reaches the ID's own device.
func anyAddr(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsUnspecified() || a.IsLoopback()
}

// Bind binds the ID to a local address and port (rdma_bind_addr); port 0
// picks a free one. An unspecified or loopback address binds every
// device, for Listen, and attaches none, as the kernel's rdma_bind_addr
// (an ID bound to 127.0.0.1 listens on every device, as on 0.0.0.0, and
// ResolveAddr gives it its device).
func (id *ID) Bind(ap netip.AddrPort) error {
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if id.rem != nil {
		return id.remoteBind(ap)
	}
	var dev *verbs.Device
	var gi int
	if !anyAddr(ap.Addr()) {
		var err error
		if dev, gi, err = id.c.device(ap.Addr()); err != nil {
			return fmt.Errorf("bind %v: %w", ap, err)
		}
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != stateIdle || id.local.IsValid() {
		return fmt.Errorf("bind %v: %w", ap, ErrState)
	}
	bound, err := id.c.bind(id, ap)
	if err != nil {
		return err
	}
	id.local, id.dev, id.gidIndex = bound, dev, gi
	return nil
}

// ResolveAddr finds the device and local address that reach dst
// (rdma_resolve_addr): src if valid, else the bound address, else the
// route's (dst itself when it is a device's own address). A loopback or
// unspecified dst is the ID's own device (the first whose port is active,
// if the ID has none yet), its address the loopback one, as cma.c's
// cma_resolve_loopback. A destination with no route fails at once
// (ErrNoRoute). Otherwise it returns at once, and EventAddrResolved or
// EventAddrError follows within timeout: ErrTimedOut when the peer's link
// address was not found in time (the kernel's ETIMEDOUT), ErrNotOnDevice
// when the route leaves through an interface no device has.
func (id *ID) ResolveAddr(src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if id.rem != nil {
		return id.remoteResolveAddr(src, dst, timeout)
	}
	src = src.Unmap()
	if !dst.IsValid() {
		return fmt.Errorf("resolve address %v: %w", dst, ErrInvalidArgument)
	}
	id.mu.Lock()
	if id.state != stateIdle || (id.local.IsValid() && id.local.Addr().Is4() != dst.Addr().Is4()) {
		id.mu.Unlock()
		return fmt.Errorf("resolve address %v: %w", dst, ErrState)
	}
	bound := id.local.IsValid() && !anyAddr(id.local.Addr())
	if !src.IsValid() && bound {
		src = id.local.Addr()
	}
	id.mu.Unlock()
	loopback := anyAddr(dst.Addr())
	if !src.IsValid() && !loopback {
		if _, _, err := id.c.device(dst.Addr()); err == nil {
			src = dst.Addr() // the kernel's route to a local address: itself
		} else {
			var err error
			if src, err = id.c.route(dst.Addr()); err != nil {
				return fmt.Errorf("resolve address %v: %w", dst, err)
			}
		}
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != stateIdle {
		return fmt.Errorf("resolve address %v: %w", dst, ErrState)
	}
	id.state, id.peer = stateAddrQuery, dst
	go id.resolveAddr(src, dst.Addr(), loopback, timeout)
	return nil
}

// resolveAddr is ResolveAddr's work: the device, the port, the
// neighbour.
func (id *ID) resolveAddr(src, dst netip.Addr, loopback bool, timeout time.Duration) {
	var err error
	if loopback && !src.IsValid() {
		err = id.bindLoopback(dst)
	} else {
		err = id.bindFor(src)
	}
	own := false
	if err == nil {
		id.mu.Lock()
		if loopback {
			id.peerGID, err = id.dev.GID(id.gidIndex)
		} else {
			id.peerGID = roce.GIDFromAddr(dst)
		}
		dev := id.dev
		id.mu.Unlock()
		_, _, ownErr := id.c.device(dst)
		own = loopback || ownErr == nil
		if err == nil && !own && id.c.cfg.Neighbor != nil {
			if nerr := id.c.cfg.Neighbor(dev, dst, timeout); nerr != nil {
				err = fmt.Errorf("%w: %w", ErrTimedOut, nerr)
			}
		}
	}
	id.mu.Lock()
	if id.state != stateAddrQuery { // destroyed meanwhile
		local := id.local
		id.mu.Unlock()
		if local.IsValid() {
			id.c.unbind(id, local) // bindFor may have bound it after Destroy
		}
		return
	}
	ev := Event{Type: EventAddrResolved, ID: id}
	if err != nil {
		id.state = stateIdle
		ev = Event{Type: EventAddrError, ID: id, Err: fmt.Errorf("resolve address %v: %w", dst, err)}
	} else {
		id.state = stateAddrResolved
	}
	id.mu.Unlock()
	id.post(ev)
}

// bindFor binds the ID, if it is not yet, to src, a device's address, on
// a free port (its bound port if it has one).
func (id *ID) bindFor(src netip.Addr) error {
	dev, gi, err := id.c.device(src)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotOnDevice, err)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.local.IsValid() && !anyAddr(id.local.Addr()) {
		id.dev, id.gidIndex = dev, gi
		return nil
	}
	return id.rebind(netip.AddrPortFrom(src, id.local.Port()), dev, gi)
}

// rebind binds the ID to ap on dev, leaving the port it holds if any.
// Called under mu.
func (id *ID) rebind(ap netip.AddrPort, dev *verbs.Device, gi int) error {
	if id.local.IsValid() {
		id.c.unbind(id, id.local)
	}
	bound, err := id.c.bind(id, ap)
	if err != nil {
		id.local = netip.AddrPort{}
		return err
	}
	id.local, id.dev, id.gidIndex = bound, dev, gi
	return nil
}

// bindLoopback gives an ID without a device the one a loopback or
// wildcard destination reaches, as cma.c's cma_bind_loopback: the first
// device whose port is active, else the first, at GID index 0; its
// local address is the loopback address of dst's family, on its port
// (a new one if it has none).
func (id *ID) bindLoopback(dst netip.Addr) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dev != nil {
		return nil
	}
	devs := id.c.cfg.Devices
	dev := devs[0]
	for _, d := range devs {
		if d.PortState() == verbs.PortActive {
			dev = d
			break
		}
	}
	if len(dev.GIDTable()) == 0 {
		return fmt.Errorf("%v: %w", dst, ErrNotOnDevice)
	}
	lo := netip.IPv6Loopback()
	if dst.Is4() {
		lo = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	return id.rebind(netip.AddrPortFrom(lo, id.local.Port()), dev, 0)
}

// ResolveRoute finds the path to the resolved address
// (rdma_resolve_route). On RoCE the path is the GIDs themselves, so
// EventRouteResolved follows at once.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	if id.rem != nil {
		return id.remoteResolveRoute(timeout)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != stateAddrResolved {
		return fmt.Errorf("resolve route: %w", ErrState)
	}
	id.state = stateRouteResolved
	id.post(Event{Type: EventRouteResolved, ID: id})
	return nil
}

// CreateQP creates the ID's QP on pd (nil: a PD of the ID's own) and
// moves it to INIT (rdma_create_qp); Connect or Accept take it on to RTS.
// The UDP port space's QP is UD and goes to RTS at once (ud.go).
func (id *ID) CreateQP(pd *verbs.PD, init *verbs.QPInitAttr) (*verbs.QP, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	pd, err := id.qpPD(pd, init)
	if err != nil {
		return nil, err
	}
	if id.rem != nil {
		return id.remoteCreateQP(pd, init)
	}
	qp, err := pd.CreateQP(init)
	if err != nil {
		return nil, err
	}
	if err := id.readyQP(qp); err != nil {
		qp.Destroy()
		return nil, err
	}
	id.qp, id.pd = qp, pd
	return qp, nil
}

// qpPD checks that the ID may have a QP of init's type and returns the PD
// it goes on: pd, or without one a PD of the ID's own. id.mu is held.
func (id *ID) qpPD(pd *verbs.PD, init *verbs.QPInitAttr) (*verbs.PD, error) {
	if id.dev == nil || id.qp != nil {
		return nil, fmt.Errorf("create QP: %w", ErrState)
	}
	if init.Type != id.qpType() {
		return nil, fmt.Errorf("create QP: the port space's QPs are of type %v: %w", id.qpType(), ErrInvalidArgument)
	}
	if pd == nil {
		return id.dev.AllocPD(), nil
	}
	if pd.Device() != id.dev {
		return nil, fmt.Errorf("create QP: PD of another device: %w", ErrInvalidArgument)
	}
	return pd, nil
}

// DestroyQP destroys the ID's QP (rdma_destroy_qp).
func (id *ID) DestroyQP() error {
	if id.rem != nil {
		return id.remoteDestroyQP()
	}
	id.mu.Lock()
	qp, lent := id.qp, id.lentQP
	id.qp, id.lentQP = nil, false
	id.mu.Unlock()
	if qp == nil {
		return fmt.Errorf("destroy QP: no QP: %w", ErrState)
	}
	id.dev.OnCommEst(qp, nil)
	if lent {
		return nil // the caller's to destroy
	}
	return qp.Destroy()
}

// Destroy destroys the ID (rdma_destroy_id): a connection still up is
// disconnected first, as the kernel does; a listening ID stops listening.
// The ID's QP, if any, is destroyed too, or moved to ERR if it is the
// caller's (AttachQP).
func (id *ID) Destroy() error {
	if id.rem != nil {
		return id.remoteDestroy()
	}
	id.mu.Lock()
	if id.state == stateDestroying {
		id.mu.Unlock()
		return fmt.Errorf("destroy ID: %w", ErrState)
	}
	id.state = stateDestroying
	conn, listens, qp, local, lent := id.conn, id.listens, id.qp, id.local, id.lentQP
	id.conn, id.listens, id.qp = nil, nil, nil
	id.mu.Unlock()
	for _, l := range listens {
		l.Close()
	}
	if conn != nil {
		conn.Destroy()
	}
	if qp != nil {
		id.dev.OnCommEst(qp, nil)
		if lent {
			toError(qp) // the connection is gone; the QP is the caller's to destroy
		} else {
			qp.Destroy()
		}
	}
	if local.IsValid() {
		id.c.unbind(id, local)
	}
	id.c.mu.Lock()
	delete(id.c.ids, id)
	id.c.mu.Unlock()
	return nil
}
