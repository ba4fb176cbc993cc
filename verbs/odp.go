package verbs

import (
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/internal/procmem"
)

// On-demand paging (ODP). softnic never pins memory: in process the
// engines copy to and from the program's own slices, and the daemon
// reaches a client's memory through its mem descriptor, so every region
// behaves as ConnectX's ODP ones do where it matters: a page need not be
// there when the region is registered. What AccessOnDemand adds is that
// nothing is checked then either (the range may be unmapped), and each
// access looks its pages up instead (a Pager), failing as a NIC's page
// fault that cannot be resolved fails: a local protection error, or a
// remote access error NAK for a peer's request.

// AccessOnDemand is IBV_ACCESS_ON_DEMAND; AccessHugeTLB is
// IBV_ACCESS_HUGETLB, taken and ignored.
const (
	AccessOnDemand = ibv.AccessOnDemand
	AccessHugeTLB  = ibv.AccessHugeTLB
)

// accessMR is every flag a region may have. IBV_ACCESS_HUGETLB is taken
// and ignored: it tells a NIC's page table it may use huge pages.
const accessMR = ibv.AccessAll | AccessOnDemand | ibv.AccessHugeTLB

// The errors of advise and rereg that the kernel tells apart.
var (
	// ErrNoRegion: an SGE's lkey names no ODP region of the PD that
	// allows the advice (the kernel's ENOENT).
	ErrNoRegion = errors.New("verbs: no such on-demand region")
	// ErrFault: memory not mapped as the operation needs (EFAULT).
	ErrFault = errors.New("verbs: bad address")
	// ErrNotSupported: an operation or option softnic lacks (EOPNOTSUPP).
	ErrNotSupported = errors.New("verbs: operation not supported")
)

// ODPCaps are the device's on-demand paging capabilities
// (ibv_odp_caps): general_caps, and per transport the operations that
// may use ODP regions.
type ODPCaps struct {
	General      uint64
	RC, UC, UD   uint32
	MaxImplicitB uint64 // bytes an implicit region covers
}

// ODP capability bits, with libibverbs' values (enum ibv_odp_transport_cap_bits,
// enum ibv_odp_general_caps).
const (
	ODPSupport         = 1 << 0 // IBV_ODP_SUPPORT
	ODPSupportImplicit = 1 << 1 // IBV_ODP_SUPPORT_IMPLICIT

	ODPSend    = 1 << 0
	ODPRecv    = 1 << 1
	ODPWrite   = 1 << 2
	ODPRead    = 1 << 3
	ODPAtomic  = 1 << 4
	ODPSRQRecv = 1 << 5
)

// DeviceODPCaps is what softnic supports: every operation of every
// transport it has reads and writes regions through the same lookup, so
// each may use an ODP region, as ConnectX reports for RC (UD there lacks
// WRITE, READ and ATOMIC, which UD has not at all). XRC does not exist yet.
var DeviceODPCaps = ODPCaps{
	General:      ODPSupport | ODPSupportImplicit,
	RC:           ODPSend | ODPRecv | ODPWrite | ODPRead | ODPAtomic | ODPSRQRecv,
	UC:           ODPSend | ODPRecv | ODPWrite | ODPSRQRecv,
	UD:           ODPSend | ODPRecv | ODPSRQRecv,
	MaxImplicitB: math.MaxUint64,
}

// Pager is what an ODP region in another process's memory knows of its
// pages (internal/procmem.Pager): Mapped looks them up, faulting them in
// as needed, Holds only says whether they are known mapped already.
type Pager interface {
	Mapped(va, n uint64, write bool) bool
	Holds(va, n uint64, write bool) bool
}

// writes reports whether an access with rights a writes the memory.
func writes(a Access) bool { return a&(AccessLocalWrite|AccessRemoteWrite|AccessRemoteAtomic) != 0 }

// paged reports whether an access of n bytes at va with rights a finds its
// pages: always for a region that is not paged on demand in another
// process's memory.
func (m *MR) paged(va uint64, n uint32, a Access) bool {
	return m.pager == nil || m.pager.Mapped(va, uint64(n), writes(a))
}

// OnDemand reports whether the region is paged on demand.
func (m *MR) OnDemand() bool { return m.access&AccessOnDemand != 0 }

// RegProcessODP registers length bytes at address addr of another
// process's memory as an ODP region (the daemon's ibv_reg_mr with
// IBV_ACCESS_ON_DEMAND): nothing of the range is looked at now, and
// pager finds its pages as the engines reach them. addr 0 and length
// math.MaxUint64 is an implicit region: the whole address space.
func (pd *PD) RegProcessODP(mem ProcessMemory, pager Pager, addr, length uint64, access Access) (*MR, error) {
	if err := checkAccess(access); err != nil {
		return nil, err
	}
	if access&AccessOnDemand == 0 || mem == nil || pager == nil || (length != math.MaxUint64 && addr+length < addr) {
		return nil, fmt.Errorf("register ODP MR: %d bytes at %#x: %w", length, addr, ErrInvalidArgument)
	}
	p, err := enginePDOf(pd, "register MR")
	if err != nil {
		return nil, err
	}
	mr := &MR{pd: pd, proc: mem, pager: pager, addr: addr, size: length, access: access}
	mr.vec, _ = mem.(vectorMemory)
	return p.register(mr)
}

// RegImplicitMR registers the whole address space of this process as an
// implicit ODP region (ibv_reg_mr(pd, NULL, SIZE_MAX, access |
// IBV_ACCESS_ON_DEMAND)): SGEs and peers may then name any address the
// process has mapped with the rights the access needs, and an address it
// has not fails as an unmapped page of an ODP region does.
func (pd *PD) RegImplicitMR(access Access) (*MR, error) {
	if err := checkAccess(access | AccessOnDemand); err != nil {
		return nil, err
	}
	return pd.ops.RegImplicitMR(access | AccessOnDemand)
}

func (p *enginePD) RegImplicitMR(access Access) (*MR, error) {
	self, err := procmem.Open(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("register implicit MR: %w", err)
	}
	mr, err := p.pd.RegProcessODP(self, procmem.NewPager(self, nil), 0, math.MaxUint64, access)
	if err != nil {
		self.Close()
		return nil, err
	}
	mr.release = func() { self.Close() }
	return mr, nil
}
