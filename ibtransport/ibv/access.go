package ibv

import "errors"

// Access is a set of access rights (ibv_access_flags): those a memory
// region grants, and those a QP allows its peer as a responder.
type Access uint32

// Access rights, with libibverbs' values.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
	// AccessZeroBased (IBV_ACCESS_ZERO_BASED): the region's addresses
	// start at 0, as a device memory region's must; not a right, so not
	// in AccessAll.
	AccessZeroBased Access = 1 << 5
	// AccessOnDemand is a region's on-demand paging
	// (IBV_ACCESS_ON_DEMAND): registered without its pages, which are
	// looked up as each access reaches them. It is no right a QP grants.
	AccessOnDemand Access = 1 << 6
	// AccessHugeTLB says a region lies in huge pages (IBV_ACCESS_HUGETLB),
	// which lets a NIC map it in larger pages; softnic maps nothing.
	AccessHugeTLB Access = 1 << 7
	// AccessMWBind lets memory windows be bound to a region.
	AccessMWBind Access = 1 << 4
	// FLUSH rights (IBTA 1.5): a region (and a responder QP) must grant
	// the placement type a peer's FLUSH asks for. softnic grants global
	// visibility only: its memory is not persistent, so it refuses
	// AccessFlushPersistent, as rxe does for memory that is not pmem.
	AccessFlushGlobal     Access = 1 << 8
	AccessFlushPersistent Access = 1 << 9
)

// AccessAll is every access right there is.
const AccessAll = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessMWBind | AccessFlushGlobal

// AccessRemote is the rights a peer may be given.
const AccessRemote = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

// Errors of the verbs calls, whichever backend runs them (the engine, a
// daemon's client): callers match them with errors.Is.
var (
	ErrInvalidArgument = errors.New("ibv: invalid argument")
	ErrQueueFull       = errors.New("ibv: work queue full")
	ErrInvalidState    = errors.New("ibv: operation not allowed in the QP state")
	// ErrBusy: the object is in use (a region with windows bound to it).
	ErrBusy = errors.New("ibv: resource busy")
)
