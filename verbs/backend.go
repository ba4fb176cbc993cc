package verbs

import (
	"context"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/ibtransport/cm"
	"github.com/softnic/softnic/roce"
)

// A Device runs on one of two backends, as a libibverbs context runs on
// the provider that filled its verbs_context_ops: the engine (Open: the
// transport runs in this process, engine*.go) or a softnic daemon (Dial:
// the daemon runs it and this process posts and polls through shared
// rings, remote*.go). The types of this package are the API; each holds
// its backend's half behind one of these interfaces, chosen when the
// object is made, so a method of the API is one call through it.

// deviceOps is a device's backend.
type deviceOps interface {
	Close() error
	// Poll runs an engine pass in the caller's goroutine (Device.Poll);
	// Unpoll hands the engine back to its goroutine.
	Poll() bool
	Unpoll()
	// Done is closed when the device is gone under its user (the daemon
	// ended the session), and Err then says why; nil and nil while the
	// device is there, and always on an in-process device.
	Done() <-chan struct{}
	Err() error
	QPs() int
	GSICounters() *GSICounters
	Counters() *ibtransport.Counters
	DeviceCounters() []counters.Counter
	QPCounters(qpn uint32) ([]counters.Counter, bool)
	QPCounterRefs() []ibtransport.QPCountersRef
	GID(index int) (GID, error)
	Query() DeviceAttr
	ActiveMTU() MTU
	PortState() PortState
	NodeGUID() uint64
	// RoCE and CM are the in-process device's RoCE device and connection
	// manager; nil through a daemon, whose own they are.
	RoCE() *roce.Device
	CM() *cm.Manager
	// OnCommEst is Device.OnCommEst.
	OnCommEst(qp *QP, fn func())
	// SetLinkUp reports whether the port's state changed.
	SetLinkUp(up bool) bool
	AllocPD(pd *PD) pdOps
	NewCompChannel(ch *CompChannel) channelOps
	CreateCQ(cq *CQ, n int) (cqOps, error)
	// AllocMemory returns n bytes for AllocMemory and the backend's
	// handle of them, which FreeMemory takes back.
	AllocMemory(n int) ([]byte, uint32, error)
	FreeMemory(mem []byte, handle uint32) error
}

// pdOps is a protection domain's backend: it makes the objects of the PD
// once the API checked what both backends refuse alike.
type pdOps interface {
	RegMR(buf []byte, access Access) (*MR, error)
	// CreateQP makes q's backend; q is the QP its events name.
	CreateQP(q *QP, init *QPInitAttr) (qpOps, error)
	CreateSRQ(s *SRQ, maxWR, maxSGE int) (srqOps, error)
	CreateAH(av *AddressVector) (*AH, error)
}

// mrOps is a memory region's backend.
type mrOps interface {
	Dereg() error
}

// qpOps is a queue pair's backend; the engine's QP (*ibtransport.QP) is
// the in-process one.
type qpOps interface {
	PostSend(wr *SendWR) error
	PostSendList(wrs []SendWR) (int, error)
	PostRecv(wr *RecvWR) error
	PostRecvList(wrs []RecvWR) (int, error)
	Modify(attr *QPAttr, mask QPAttrMask) error
	Query() QPAttr
	QPN() uint32
	State() QPState
	Type() QPType
	Cap() QPCap
	EngineIndex() int
	Counters() *ibtransport.QPCounters
	CongestionRate() uint64
	Destroy() error
	String() string
	DebugState() string
}

// cqOps is a completion queue's backend.
type cqOps interface {
	Cap() int
	Poll(wcs []WC) (int, error)
	Wait(ctx context.Context, wcs []WC) (int, error)
	RequestNotify(solicitedOnly bool)
}

// channelOps is a completion channel's backend.
type channelOps interface {
	Destroy() error
}

// srqOps is a shared receive queue's backend.
type srqOps interface {
	PostRecv(wr *RecvWR) error
	PostRecvList(wrs []RecvWR) (int, error)
	Len() int
	Modify(limit int) error
}
