package rdmacm

import (
	"net/netip"
	"time"

	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/verbs"
)

// An ID runs in one of two places, its CM's backend: on the IB CM of its
// device in this process (inproc*.go), or in the softnic daemon that
// serves the device (package daemon/client, whose device backend is a
// BackendProvider), as librdmacm's IDs run in the kernel through
// rdma_ucm. New picks the backend once, from the CM's devices, as a verbs
// provider fills verbs_context_ops once for its device; from then on each
// ID and each event channel hold their backend's half, and the methods of
// CM, ID and EventChannel check what is common and call it. The
// interfaces speak only the package's exported types, so that a backend
// may live in another package; what such a backend needs of the CM beyond
// the API, the CM hands it as Hooks when it makes it.

// CMBackend makes the halves of a CM's event channels and IDs.
type CMBackend interface {
	// OpenChannel makes the half of ch, a new event channel; the
	// backend queues events on ch with post, from any goroutine.
	OpenChannel(ch *EventChannel, post func(Event)) ChannelBackend
	// CreateID makes the half of id, a new ID whose events go to the
	// channel whose half is ch (an error if that is another backend's).
	CreateID(id *ID, ch ChannelBackend) (IDBackend, error)
}

// ChannelBackend is an event channel's half.
type ChannelBackend interface {
	// Close stops the events of the backend's channel.
	Close()
}

// IDBackend is an ID's half: the ID's state and the operations of
// librdmacm's API, as the methods of ID of the same names document them.
// The ID has already unmapped the addresses it passes.
type IDBackend interface {
	Device() *verbs.Device
	QP() *verbs.QP
	LocalAddr() netip.AddrPort
	PeerAddr() netip.AddrPort
	Listening() bool
	KernelState() uint8

	Bind(ap netip.AddrPort) error
	ResolveAddr(src netip.Addr, dst netip.AddrPort, timeout time.Duration) error
	ResolveRoute(timeout time.Duration) error
	Listen(backlog int) error
	SetOption(option int, value uint8) error
	// Migrate sends the ID's events to the channel whose half is ch.
	Migrate(ch ChannelBackend) error
	// RequestTaken is a connect request of this listening ID leaving
	// its channel for the program.
	RequestTaken()
	Destroy() error

	CreateQP(pd *verbs.PD, init *verbs.QPInitAttr) (*verbs.QP, error)
	AttachQP(qp *verbs.QP) error
	DestroyQP() error
	InitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error)

	Connect(p *ConnParam) error
	Accept(p *ConnParam) error
	Reject(privateData []byte) error
	Establish() error
	Disconnect() error

	JoinMulticast(addr netip.Addr, flags JoinFlags) error
	LeaveMulticast(addr netip.Addr) error
}

// BackendProvider is a device's verbs backend (verbs.Device.Backend)
// that runs the connection manager itself, as a daemon's client does: New
// makes a CM over such a device, its only one, with the provider's CM
// backend.
type BackendProvider interface {
	// NewCMBackend makes the backend of a CM of cfg, whose only device
	// is the provider's; h is what the backend may ask of the CM.
	NewCMBackend(cfg Config, h Hooks) CMBackend
}

// Hooks are what a CM hands the backend a BackendProvider makes for it:
// what the CM does for a backend, and the rules of rdma_cm both backends
// apply alike, none of which is a program's to call.
type Hooks struct {
	// NewID makes an ID of the CM in port space ps, for a connect
	// request the backend heard of, its half the one half makes for it,
	// and counts it among the CM's open IDs (IDs, Close): false if the
	// CM is closed, when the ID is not one of them and the backend is to
	// destroy it.
	NewID func(ps mad.PortSpace, half func(*ID) IDBackend) (*ID, bool)
	// AnyAddr reports whether a is what cma.c's cma_any_addr calls any:
	// the unspecified address or a loopback one. Binding to one attaches
	// no device; resolving one reaches the ID's own device.
	AnyAddr func(a netip.Addr) bool
	// QPPD is what CreateQP checks of an ID of port space ps on dev
	// (nil: no device yet), whose QP is have: it returns the PD a QP of
	// init goes on, pd, or a new PD of dev if pd is nil.
	QPPD func(dev *verbs.Device, have *verbs.QP, ps mad.PortSpace, pd *verbs.PD, init *verbs.QPInitAttr) (*verbs.PD, error)
	// RejectError is the Err of EventRejected for a REJ's reason.
	RejectError func(reason mad.RejectReason) error
}

// hooks are c's Hooks.
func (c *CM) hooks() Hooks {
	return Hooks{
		NewID: func(ps mad.PortSpace, half func(*ID) IDBackend) (*ID, bool) {
			id := c.newID(ps, half)
			return id, c.add(id)
		},
		AnyAddr:     anyAddr,
		QPPD:        qpPD,
		RejectError: rejectError,
	}
}
