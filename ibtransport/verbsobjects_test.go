package ibtransport

import (
	"unsafe"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// The engine's tests stand in for package verbs with these minimal
// implementations of the interfaces in verbsobjects.go.

// testRegion is a registered region with one key for local and remote use.
type testRegion struct {
	buf          []byte
	addr         uint64
	key          uint32
	access       ibv.Access
	rkeyValid    bool
	remoteWrites int
}

func newTestRegion(buf []byte, key uint32, access ibv.Access) *testRegion {
	return &testRegion{buf: buf, addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), key: key, access: access,
		rkeyValid: true}
}

func (m *testRegion) Addr() uint64 { return m.addr }
func (m *testRegion) RKey() uint32 { return m.key }
func (m *testRegion) SGE(off, n int) ibv.SGE {
	return ibv.SGE{Addr: m.addr + uint64(off), Length: uint32(n), LKey: m.key}
}

func (m *testRegion) RemoteWritten() { m.remoteWrites++ }

func (m *testRegion) ReadAt(dst []byte, va uint64) bool {
	b, ok := m.Slice(va, uint32(len(dst)))
	copy(dst, b)
	return ok
}

func (m *testRegion) WriteAt(src []byte, va uint64) bool {
	b, ok := m.Slice(va, uint32(len(src)))
	copy(b, src)
	return ok
}

func (m *testRegion) Atomic(va uint64, cas bool, compare, swapAdd uint64) (uint64, bool) {
	b, _ := m.Slice(va, 8)
	return AtomicWord(b, cas, compare, swapAdd)
}

func (m *testRegion) AtomicWrite(va uint64, b [8]byte) bool {
	w, _ := m.Slice(va, 8)
	return StoreWord(w, b)
}

// Slice returns the region's n bytes at va, if it holds them.
func (m *testRegion) Slice(va uint64, n uint32) ([]byte, bool) {
	if va < m.addr {
		return nil, false
	}
	off := va - m.addr
	if off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		return nil, false
	}
	return m.buf[off : off+uint64(n)], true
}

// testMemory is a protection domain holding one region.
type testMemory struct{ mr *testRegion }

func (t *testMemory) LocalRegion(lkey uint32, va uint64, n uint32, a ibv.Access) Region {
	if lkey != t.mr.key || t.mr.access&a != a {
		return nil
	}
	if _, ok := t.mr.Slice(va, n); !ok {
		return nil
	}
	return t.mr
}

func (t *testMemory) RemoteRegion(_ *QP, rkey uint32, va uint64, n uint32, a ibv.Access) Region {
	if !t.mr.rkeyValid {
		return nil
	}
	return t.LocalRegion(rkey, va, n, a)
}

func (t *testMemory) RemoteKeyGrants(rkey uint32, a ibv.Access) bool {
	return rkey == t.mr.key && t.mr.rkeyValid && t.mr.access&a == a
}

// BindMW binds nothing: windows are package verbs', tested there.
func (t *testMemory) BindMW(*QP, *ibv.MWBind) bool { return false }

func (t *testMemory) InvalidateRKey(_ *QP, rkey uint32, _ bool) bool {
	if rkey != t.mr.key {
		return false
	}
	t.mr.rkeyValid = false
	return true
}

// testCQ is an unbounded completion queue.
type testCQ struct{ wcs []ibv.WC }

func (c *testCQ) Push(wc ibv.WC, _ bool) bool {
	c.wcs = append(c.wcs, wc)
	return true
}

func (c *testCQ) Poll(wcs []ibv.WC) (int, error) {
	n := copy(wcs, c.wcs)
	c.wcs = c.wcs[n:]
	return n, nil
}
