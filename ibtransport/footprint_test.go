package ibtransport

import (
	"testing"
	"unsafe"
)

// An idle QP holds MaxSendWR send slots and a ring of responder jobs; with
// perftest's 128-deep send queue they were most of its memory (issue #6
// asks at most 16 KiB per idle QP). These sizes keep them from growing back
// unnoticed.
func TestIdleQPFootprint(t *testing.T) {
	if s := unsafe.Sizeof(sendWQE{}); s > 80 {
		t.Errorf("sendWQE is %d bytes, want at most 80", s)
	}
	if s := unsafe.Sizeof(respJob{}); s > 40 {
		t.Errorf("respJob is %d bytes, want at most 40", s)
	}
	if s := unsafe.Sizeof(QP{}); s > 3456 {
		t.Errorf("QP is %d bytes, want at most 3456 (a smaller allocation size class)", s)
	}
}
