package rdmacm

import (
	"net/netip"
	"time"

	"github.com/softnic/softnic/verbs"
)

// An ID runs in one of two places, its CM's backend: on the IB CM of its
// device in this process (inproc*.go), or in the softnic daemon that
// serves the device (remote*.go), as librdmacm's IDs run in the kernel
// through rdma_ucm. New picks the backend once, from the CM's devices, as
// a verbs provider fills verbs_context_ops once for its device; from then
// on each ID and each event channel hold their backend's half, and the
// methods of CM, ID and EventChannel check what is common and call it.
// The interfaces speak only the package's exported types, so that a
// backend could live in another package (the daemon's, with its client).

// cmBackend makes the halves of a CM's event channels and IDs.
type cmBackend interface {
	// OpenChannel makes the half of ch, a new event channel; the
	// backend queues events on ch.
	OpenChannel(ch *EventChannel) chanBackend
	// CreateID makes the half of id, a new ID whose events go to the
	// channel whose half is ch (an error if that is another backend's).
	CreateID(id *ID, ch chanBackend) (idBackend, error)
}

// chanBackend is an event channel's half.
type chanBackend interface {
	// Close stops the events of the backend's channel.
	Close()
}

// idBackend is an ID's half: the ID's state and the operations of
// librdmacm's API, as the methods of ID of the same names document them.
// The ID has already unmapped the addresses it passes.
type idBackend interface {
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
	Migrate(ch chanBackend) error
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
}
