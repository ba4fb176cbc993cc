package ibtransport

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
)

// ErrClosed is returned by an engine that was closed.
var ErrClosed = errors.New("ibtransport: engine closed")

// randUint32 is a crypto-seeded helper for initial values such as QPNs.
func randUint32() uint32 {
	var b [4]byte
	_, _ = crand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:])
}
