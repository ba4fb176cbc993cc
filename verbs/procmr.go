package verbs

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/softnic/softnic/ibtransport"
)

// ProcessMemory is another process's memory, as the daemon reaches its
// clients' (internal/procmem.Process). Its methods return an error when
// the bytes cannot be reached: unmapped, or the process gone.
type ProcessMemory interface {
	ReadAt(dst []byte, addr uint64) error
	WriteAt(src []byte, addr uint64) error
}

// RegProcessMemory registers length bytes at address addr of another
// process's memory in pd (the daemon's ibv_reg_mr on a client's behalf).
// The engines copy between frames and that memory directly; the caller
// checks beforehand that the range is mapped with the rights asked for.
func (pd *PD) RegProcessMemory(mem ProcessMemory, addr, length uint64, access Access) (*MR, error) {
	if err := checkAccess(access); err != nil {
		return nil, err
	}
	if mem == nil || addr+length < addr {
		return nil, fmt.Errorf("register MR: %d bytes at %#x: %w", length, addr, ErrInvalidArgument)
	}
	p, err := enginePDOf(pd, "register MR")
	if err != nil {
		return nil, err
	}
	mr := &MR{pd: p.pd, proc: mem, addr: addr, size: length, access: access}
	mr.vec, _ = mem.(vectorMemory)
	return p.register(mr)
}

// RegMemoryAt registers buf as the memory a client process has at virtual
// address addr (the daemon's ibv_reg_mr in memory the client shares with
// it by descriptor, mapped in both): SGEs and peers name the client's
// addresses, and the engines copy to and from buf as they do for the
// device's own process. buf must stay mapped until the region is
// deregistered.
func (pd *PD) RegMemoryAt(buf []byte, addr uint64, access Access) (*MR, error) {
	if err := checkAccess(access); err != nil {
		return nil, err
	}
	if addr+uint64(len(buf)) < addr {
		return nil, fmt.Errorf("register MR: %d bytes at %#x: %w", len(buf), addr, ErrInvalidArgument)
	}
	p, err := enginePDOf(pd, "register MR")
	if err != nil {
		return nil, err
	}
	return p.regBuf(buf, addr, access)
}

// vectorMemory is process memory that copies many ranges in one system
// call, and tells cheaply whether its process is still there.
type vectorMemory interface {
	ibtransport.VectorMemory
	Reachable() bool
}

// procLocalView and procRemoteView are localView and remoteView of a
// region in another process's memory that copies many ranges in one system
// call: the engine queues packets' payload copies to and from them
// (ibtransport.DeferredRegion). A process known to be gone fails the
// check now, as ReadAt and WriteAt would: a peer's WRITE is NAKed rather
// than accepted and lost.
type (
	procLocalView  MR
	procRemoteView MR
)

func (v *procLocalView) Deferred(n int, va uint64) (ibtransport.VectorMemory, uint64, bool) {
	m := (*MR)(v)
	return m.vec, va, m.valid && m.holds(va, uint32(n)) && m.vec.Reachable()
}

func (v *procLocalView) ReadAt(dst []byte, va uint64) bool { return (*localView)(v).ReadAt(dst, va) }
func (v *procLocalView) WriteAt(src []byte, va uint64) bool {
	return (*localView)(v).WriteAt(src, va)
}
func (v *procLocalView) Atomic(va uint64, cas bool, compare, swapAdd uint64) (uint64, bool) {
	return (*localView)(v).Atomic(va, cas, compare, swapAdd)
}
func (v *procLocalView) AtomicWrite(va uint64, b [8]byte) bool {
	return (*localView)(v).AtomicWrite(va, b)
}
func (v *procLocalView) RemoteWritten() { v.remoteWrites.Add(1) }

func (v *procRemoteView) Deferred(n int, va uint64) (ibtransport.VectorMemory, uint64, bool) {
	if !v.rkeyValid.Load() {
		return nil, 0, false
	}
	return (*procLocalView)(v).Deferred(n, va)
}

func (v *procRemoteView) ReadAt(dst []byte, va uint64) bool { return (*remoteView)(v).ReadAt(dst, va) }
func (v *procRemoteView) WriteAt(src []byte, va uint64) bool {
	return (*remoteView)(v).WriteAt(src, va)
}
func (v *procRemoteView) Atomic(va uint64, cas bool, compare, swapAdd uint64) (uint64, bool) {
	return (*remoteView)(v).Atomic(va, cas, compare, swapAdd)
}
func (v *procRemoteView) AtomicWrite(va uint64, b [8]byte) bool {
	return (*remoteView)(v).AtomicWrite(va, b)
}
func (v *procRemoteView) RemoteWritten() { v.remoteWrites.Add(1) }

// atomicUnit executes the atomics on other processes' memory. They are
// atomic with respect to each other, not to the process's own CPU accesses
// (IBV_ATOMIC_HCA, what ConnectX reports): a read and a write of the word
// under one lock, as reads and writes of /proc/PID/mem have no atomic
// operation.
type atomicUnit struct{ mu sync.Mutex }

func (u *atomicUnit) apply(mem ProcessMemory, va uint64, cas bool, compare, swapAdd uint64) (uint64, bool) {
	if va&7 != 0 {
		return 0, false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	var b [8]byte
	if mem.ReadAt(b[:], va) != nil {
		return 0, false
	}
	orig := binary.LittleEndian.Uint64(b[:])
	next := orig + swapAdd
	if cas {
		if orig != compare {
			return orig, true
		}
		next = swapAdd
	}
	binary.LittleEndian.PutUint64(b[:], next)
	return orig, mem.WriteAt(b[:], va) == nil
}

// store executes an ATOMIC_WRITE on another process's memory: one 8-byte
// write under the lock the other atomics take, so that it is atomic with
// respect to them (IBV_ATOMIC_HCA, as apply).
func (u *atomicUnit) store(mem ProcessMemory, va uint64, b [8]byte) bool {
	if va&7 != 0 {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return mem.WriteAt(b[:], va) == nil
}
