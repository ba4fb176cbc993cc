package ibtransport

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
)

// Access is a set of access rights (ibv_access_flags): those a memory
// region grants, and those a QP allows its peer as a responder.
type Access uint32

// Access rights, with libibverbs' values.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
)

// AccessAll is every access right there is.
const AccessAll = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

// Errors returned by the verbs calls.
var (
	ErrInvalidArgument = errors.New("ibtransport: invalid argument")
	ErrQueueFull       = errors.New("ibtransport: work queue full")
	ErrInvalidState    = errors.New("ibtransport: operation not allowed in the QP state")
	ErrClosed          = errors.New("ibtransport: engine closed")
)

// randUint32 is a crypto-seeded helper for initial values such as QPNs.
func randUint32() uint32 {
	var b [4]byte
	_, _ = crand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:])
}
