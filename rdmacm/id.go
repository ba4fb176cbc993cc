package rdmacm

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/verbs"
)

// ID is a connection identifier (struct rdma_cm_id): bound to an address,
// it listens or connects, and moves its QP through the states the
// connection needs. Its state and its work are its backend's half.
type ID struct {
	c  *CM
	ps mad.PortSpace
	be IDBackend
}

// CreateID creates an ID whose events go to ch (rdma_create_id).
func (c *CM) CreateID(ch *EventChannel, ps mad.PortSpace) (*ID, error) {
	if ch == nil || (ps != PortSpaceTCP && ps != PortSpaceUDP && ps != PortSpaceIB) {
		return nil, fmt.Errorf("create ID: port space %#x: %w", uint16(ps), ErrInvalidArgument)
	}
	id := &ID{c: c, ps: ps}
	be, err := c.be.CreateID(id, ch.be)
	if err != nil {
		return nil, err
	}
	id.be = be
	if !c.add(id) {
		id.Destroy()
		return nil, ErrClosed
	}
	return id, nil
}

// Device returns the device the ID is bound to (its verbs context); nil
// until its address is resolved or bound to a device's address.
func (id *ID) Device() *verbs.Device { return id.be.Device() }

// QP returns the ID's QP (CreateQP), or nil.
func (id *ID) QP() *verbs.QP { return id.be.QP() }

// Listening reports whether the ID listens (rdma_listen), as `rdma
// resource show cm_id` prints state LISTEN.
func (id *ID) Listening() bool { return id.be.Listening() }

// KernelState is the ID's state as the kernel's enum rdma_cm_state numbers
// it, which `rdma resource show cm_id` prints by name (KernelStateNames).
func (id *ID) KernelState() uint8 { return id.be.KernelState() }

// KernelStateNames are the names of the kernel's rdma_cm states, as
// `rdma resource show cm_id` prints them.
var KernelStateNames = [...]string{"IDLE", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_QUERY", "ROUTE_RESOLVED",
	"CONNECT", "DISCONNECT", "ADDR_BOUND", "LISTEN", "DEVICE_REMOVAL", "DESTROYING"}

// PortSpace returns the port space the ID was made in.
func (id *ID) PortSpace() mad.PortSpace { return id.ps }

// LocalAddr returns the address and port the ID is bound to.
func (id *ID) LocalAddr() netip.AddrPort { return id.be.LocalAddr() }

// PeerAddr returns the peer's address and port once known.
func (id *ID) PeerAddr() netip.AddrPort { return id.be.PeerAddr() }

// anyAddr reports whether a is what cma.c's cma_any_addr calls any: the
// unspecified address or a loopback one (127.0.0.0/8, ::1). Binding to
// one attaches no device; resolving one reaches the ID's own device.
func anyAddr(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsUnspecified() || a.IsLoopback()
}

// unmap is ap with its address unmapped.
func unmap(ap netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()) }

// Bind binds the ID to a local address and port (rdma_bind_addr); port 0
// picks a free one. An unspecified or loopback address binds every
// device, for Listen, and attaches none, as the kernel's rdma_bind_addr
// (an ID bound to 127.0.0.1 listens on every device, as on 0.0.0.0, and
// ResolveAddr gives it its device).
func (id *ID) Bind(ap netip.AddrPort) error { return id.be.Bind(unmap(ap)) }

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
	return id.be.ResolveAddr(src, unmap(dst), timeout)
}

// ResolveRoute finds the path to the resolved address
// (rdma_resolve_route). On RoCE the path is the GIDs themselves, so
// EventRouteResolved follows at once.
func (id *ID) ResolveRoute(timeout time.Duration) error { return id.be.ResolveRoute(timeout) }

// MaxBacklog is the most connect requests a listener keeps queued and not
// yet taken from its channel: the kernel's rdma_ucm max_backlog (its
// net.rdma_ucm.max_backlog default). A backlog of 0 or more than this is
// this, as the kernel's ucma makes of it.
const MaxBacklog = 1024

// Listen listens for connection requests on the bound port (rdma_listen);
// an ID not yet bound is bound to every device on a free port. backlog
// bounds the connect requests queued on the ID's channel and not yet
// taken (Get, TryGet), as the kernel's ucma bounds those not yet read: a
// REQ beyond it is dropped without an answer, so that the active side
// sends it again later (the IB CM's retries), as the kernel's CM does
// when the ucma has no room. 0, or more than MaxBacklog, is MaxBacklog.
func (id *ID) Listen(backlog int) error { return id.be.Listen(backlog) }

// Options of an ID (rdma_set_option, level RDMA_OPTION_ID), numbered as
// librdmacm's.
const (
	OptionTOS        = 0 // uint8: the traffic class of the ID's packets
	OptionACKTimeout = 3 // uint8: the local ACK timeout exponent of its QP
)

// SetOption sets one of the ID's options before it connects or accepts
// (rdma_set_option): OptionTOS, the traffic class its QP's packets and
// its REQ carry; OptionACKTimeout, its QP's local ACK timeout (4.096 µs ×
// 2^value, at most 31) in place of 14. Other options are not supported
// (ErrNotSupported).
func (id *ID) SetOption(option int, value uint8) error { return id.be.SetOption(option, value) }

// Migrate sends the ID's events to ch from now on, and moves there those
// queued and not yet taken (rdma_migrate_id). A listener's connect
// requests move with it, and their new IDs too.
func (id *ID) Migrate(ch *EventChannel) error {
	if ch == nil {
		return fmt.Errorf("migrate: %w", ErrInvalidArgument)
	}
	return id.be.Migrate(ch.be)
}

// Destroy destroys the ID (rdma_destroy_id): a connection still up is
// disconnected first, as the kernel does; a listening ID stops listening.
// The ID's QP, if any, is destroyed too, or moved to ERR if it is the
// caller's (AttachQP).
func (id *ID) Destroy() error {
	err := id.be.Destroy()
	id.c.remove(id)
	return err
}
