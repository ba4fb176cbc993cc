package ibtransport

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// An idle QP holds MaxSendWR send slots and a ring of responder jobs; with
// perftest's 128-deep send queue they are most of its memory, which should
// stay under 16 KiB per idle QP. These sizes keep them from growing
// unnoticed.
func TestIdleQPFootprint(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(sendWQE{}), uintptr(80), "sendWQE bytes")
	assert.LessOrEqual(t, unsafe.Sizeof(respJob{}), uintptr(40), "respJob bytes")
	assert.LessOrEqual(t, unsafe.Sizeof(QP{}), uintptr(3456), "QP bytes (a smaller allocation size class)")
}
