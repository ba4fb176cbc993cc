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

// inprocID is an ID's in-process half: it binds ports of its inprocCM,
// and its connection is one of its device's IB CM.
type inprocID struct {
	front *ID
	c     *inprocCM
	ch    atomic.Pointer[EventChannel] // where its events go (Migrate moves it)
	ps    mad.PortSpace

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
	listen  *inprocID // for an ID made by a connect request: the listening ID
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
	// mcast is the multicast groups joined (inproc_mcast.go).
	mcast []mcastJoin
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

func (id *inprocID) Device() *verbs.Device {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.dev
}

func (id *inprocID) QP() *verbs.QP {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.qp
}

func (id *inprocID) Listening() bool {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.state == stateListen
}

// KernelState numbers the ID's state as the kernel's enum rdma_cm_state.
func (id *inprocID) KernelState() uint8 {
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

func (id *inprocID) LocalAddr() netip.AddrPort {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.local
}

func (id *inprocID) PeerAddr() netip.AddrPort {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.peer
}

// Bind reserves the port in the CM and takes the device that has the
// address.
func (id *inprocID) Bind(ap netip.AddrPort) error {
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

// ResolveAddr picks the source here, with the CM's Route, and leaves the
// rest to resolveAddr.
func (id *inprocID) ResolveAddr(src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
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
func (id *inprocID) resolveAddr(src, dst netip.Addr, loopback bool, timeout time.Duration) {
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
		if err == nil && !own && !dst.IsMulticast() && id.c.cfg.Neighbor != nil {
			// A group has no neighbour: its frames go to its MAC address.
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
	ev := Event{Type: EventAddrResolved, ID: id.front}
	if err != nil {
		id.state = stateIdle
		ev = Event{Type: EventAddrError, ID: id.front, Err: fmt.Errorf("resolve address %v: %w", dst, err)}
	} else {
		id.state = stateAddrResolved
	}
	id.mu.Unlock()
	id.post(ev)
}

// bindFor binds the ID, if it is not yet, to src, a device's address, on
// a free port (its bound port if it has one).
func (id *inprocID) bindFor(src netip.Addr) error {
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
func (id *inprocID) rebind(ap netip.AddrPort, dev *verbs.Device, gi int) error {
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
func (id *inprocID) bindLoopback(dst netip.Addr) error {
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

// ResolveRoute has nothing to look up: on RoCE the path is the GIDs
// themselves, so EventRouteResolved follows at once.
func (id *inprocID) ResolveRoute(timeout time.Duration) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != stateAddrResolved {
		return fmt.Errorf("resolve route: %w", ErrState)
	}
	id.state = stateRouteResolved
	id.post(Event{Type: EventRouteResolved, ID: id.front})
	return nil
}

// CreateQP makes the QP on pd and readies it (readyQP).
func (id *inprocID) CreateQP(pd *verbs.PD, init *verbs.QPInitAttr) (*verbs.QP, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	pd, err := qpPD(id.dev, id.qp, id.ps, pd, init)
	if err != nil {
		return nil, err
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

// AttachQP takes the caller's QP as the ID's and readies it as CreateQP
// does one it makes; the ID lets go of it rather than destroy it.
func (id *inprocID) AttachQP(qp *verbs.QP) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dev == nil || id.qp != nil || id.state == stateDestroying {
		return fmt.Errorf("attach QP: %w", ErrState)
	}
	if !qpTypeFits(id.ps, qp.Type()) || qp.State() != verbs.QPSReset {
		return fmt.Errorf("attach QP: a %v QP in RESET connects: %w", qpType(id.ps), ErrInvalidArgument)
	}
	if err := id.readyQP(qp); err != nil {
		return err
	}
	id.qp, id.lentQP = qp, true
	return nil
}

// DestroyQP destroys the QP, or lets go of the caller's.
func (id *inprocID) DestroyQP() error {
	id.mu.Lock()
	id.detachMcast() // the QP no longer the ID's is in none of its groups
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

// Destroy closes the ID's listeners and connection in the IB CM, its QP
// (to ERR if it is the caller's) and its port.
func (id *inprocID) Destroy() error {
	id.mu.Lock()
	if id.state == stateDestroying {
		id.mu.Unlock()
		return fmt.Errorf("destroy ID: %w", ErrState)
	}
	id.state = stateDestroying
	id.leaveAll()
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
	return nil
}
