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
	// FLUSH rights (IBTA 1.5): a region (and a responder QP) must grant
	// the placement type a peer's FLUSH asks for. softnic grants global
	// visibility only: its memory is not persistent, so it refuses
	// AccessFlushPersistent, as rxe does for memory that is not pmem.
	AccessFlushGlobal     Access = 1 << 8
	AccessFlushPersistent Access = 1 << 9
)

// AccessAll is every access right softnic grants.
const AccessAll = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessFlushGlobal

// Errors of the verbs calls, whichever backend runs them (the engine, a
// daemon's client): callers match them with errors.Is.
var (
	ErrInvalidArgument = errors.New("ibv: invalid argument")
	ErrQueueFull       = errors.New("ibv: work queue full")
	ErrInvalidState    = errors.New("ibv: operation not allowed in the QP state")
)
