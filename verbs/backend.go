package verbs

import (
	"context"
	"os"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/ibtransport/cm"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce"
)

// A Device runs on a backend, as a libibverbs context runs on the
// provider that filled its verbs_context_ops: the engine (Open: the
// transport runs in this process, engine*.go), or a softnic daemon's
// client (package daemon/client: the daemon runs the transport, and this
// process posts and polls through rings shared with it). The types of
// this package are the API; each holds its backend's half behind one of
// these interfaces, chosen when the object is made, so that a method of
// the API is one call through it. The API checks what every backend
// refuses alike (sizes, objects of another device or PD, access flags)
// before it calls the backend.

// DeviceOps is a device's backend.
type DeviceOps interface {
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
	Counters() *ibv.Counters
	DeviceCounters() []counters.Counter
	QPCounters(qpn uint32) ([]counters.Counter, bool)
	QPCounterRefs() []ibv.QPCountersRef
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
	AllocPD(pd *PD) PDOps
	NewCompChannel(ch *CompChannel) ChannelOps
	CreateCQ(cq *CQ, n int) (CQOps, error)
	// AllocMemory returns n bytes for AllocMemory and the backend's
	// handle of them, which FreeMemory takes back.
	AllocMemory(n int) ([]byte, uint32, error)
	FreeMemory(mem []byte, handle uint32) error
	// AllocDM returns device memory of at least length bytes and its
	// backend (Device.AllocDM checked the size).
	AllocDM(length uint64, logAlign int) ([]byte, DMOps, error)
	// OpenXRCD is Device.OpenXRCD once the flags were checked.
	OpenXRCD(x *XRCD, f *os.File, oflags int) (XRCDOps, error)
}

// PDOps is a protection domain's backend: it makes the objects of the PD
// once the API checked what both backends refuse alike.
type PDOps interface {
	RegMR(buf []byte, access Access) (*MR, error)
	// RegImplicitMR registers the whole address space (PD.RegImplicitMR).
	RegImplicitMR(access Access) (*MR, error)
	// AdviseMR is PD.AdviseMR once its arguments were checked.
	AdviseMR(advice Advice, flags uint32, sges []SGE) error
	// CreateQP makes q's backend; q is the QP its events name.
	CreateQP(q *QP, init *QPInitAttr) (QPOps, error)
	CreateSRQ(s *SRQ, maxWR, maxSGE int) (SRQOps, error)
	// CreateTMSRQ makes a tag matching SRQ (PD.NewTMSRQ checked init).
	CreateTMSRQ(s *SRQ, init TMSRQInit) (SRQOps, error)
	// CreateXRCSRQ is PD.NewXRCSRQ once its arguments were checked.
	CreateXRCSRQ(s *SRQ, x *XRCD, cq *CQ, maxWR, maxSGE int) (XRCSRQOps, error)
	CreateAH(av *AddressVector) (*AH, error)
	// RegDMMR registers n bytes of dm at off, at address 0 (the API
	// checked the range and took AccessZeroBased out of access).
	RegDMMR(dm *DM, off, n uint64, access Access) (*MR, error)
	// AllocMW makes mw's backend and returns the window's first rkey.
	AllocMW(mw *MW, typ MWType) (MWOps, uint32, error)
}

// MROps is a memory region's backend.
type MROps interface {
	Dereg() error
	// Rereg is MR.Rereg once its arguments were checked; it changes m's
	// fields (Addr, Len, Access, PD, keys) as the region changed.
	Rereg(m *MR, flags ReregFlags, pd *PD, buf []byte, access Access) error
}

// QPOps is a queue pair's backend; the engine's QP (*ibtransport.QP) is
// the in-process one.
type QPOps interface {
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
	Counters() *ibv.QPCounters
	CongestionRate() uint64
	AttachMcast(gid GID, lid uint16) error
	DetachMcast(gid GID, lid uint16) error
	Destroy() error
	String() string
	DebugState() string
}

// CQOps is a completion queue's backend.
type CQOps interface {
	Cap() int
	Poll(wcs []WC) (int, error)
	Wait(ctx context.Context, wcs []WC) (int, error)
	RequestNotify(solicitedOnly bool)
	// Resize makes the CQ hold at least n (1..MaxCQE) completions.
	Resize(n int) error
}

// ChannelOps is a completion channel's backend.
type ChannelOps interface {
	Destroy() error
}

// SRQOps is a shared receive queue's backend.
type SRQOps interface {
	PostRecv(wr *RecvWR) error
	PostRecvList(wrs []RecvWR) (int, error)
	Len() int
	Modify(limit int) error
	// PostOps is SRQ.PostOps on a tag matching SRQ, the operation checked.
	PostOps(wr *OpsWR) (uint32, error)
}

// NewDevice makes a device on the backend newOps makes; the backend
// raises the device's asynchronous events (Device.Events) with emit,
// which never blocks. It is how a backend outside this package plugs in
// (daemon/client's); Open makes the engine's.
func NewDevice(newOps func(d *Device, emit func(Event)) DeviceOps) *Device {
	d := &Device{events: make(chan Event, 256)}
	d.ops = newOps(d, d.emit)
	return d
}

// RegisteredMR describes a region a backend registered, for NewMR.
type RegisteredMR struct {
	Buf        []byte // the memory, in this process
	Addr       uint64 // the virtual address SGEs and peers use for Buf[0]
	LKey, RKey uint32
	Access     Access
}

// NewMR makes the API's MR of a region that pd's backend registered.
func NewMR(pd *PD, r RegisteredMR, ops MROps) *MR {
	m := &MR{pd: pd, buf: r.Buf, size: uint64(len(r.Buf)), addr: r.Addr, access: r.Access, lkey: r.LKey, rkey: r.RKey,
		ops: ops, valid: true}
	m.rkeyValid.Store(true)
	return m
}

// Reregistered updates m after its backend (one outside this package)
// re-registered it (MR.Rereg): its memory, keys and rights are r's now,
// and its PD pd.
func (m *MR) Reregistered(pd *PD, r RegisteredMR, length uint64) {
	m.pd, m.buf, m.addr, m.size, m.access, m.lkey, m.rkey = pd, r.Buf, r.Addr, length, r.Access, r.LKey, r.RKey
}

// CreateQPWith creates a QP in pd as CreateQP does, with create making its
// backend instead of pd's backend (an rdma_cm ID's QP, which the daemon
// makes with the ID): q is the QP its events name.
func (pd *PD) CreateQPWith(init *QPInitAttr, create func(q *QP) (QPOps, error)) (*QP, error) {
	if err := pd.checkQP(init); err != nil {
		return nil, err
	}
	q := &QP{dev: pd.dev}
	ops, err := create(q)
	if err != nil {
		return nil, err
	}
	q.ops = ops
	return q, nil
}

// The backends of the API's objects, for a backend that makes an object
// of others (a QP of its CQs and SRQ, a CQ of its channel).

func (d *Device) Backend() DeviceOps        { return d.ops }
func (pd *PD) Backend() PDOps               { return pd.ops }
func (c *CQ) Backend() CQOps                { return c.ops }
func (ch *CompChannel) Backend() ChannelOps { return ch.ops }
func (s *SRQ) Backend() SRQOps              { return s.ops }
func (q *QP) Backend() QPOps                { return q.ops }

// Channel returns the completion channel the CQ sends its events on; nil
// if it has none.
func (c *CQ) Channel() *CompChannel { return c.channel }
