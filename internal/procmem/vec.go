package procmem

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/ibtransport"
)

// vecChunk is how many pieces one system call of ReadVec or WriteVec
// takes: its iovec arrays live on the stack.
const vecChunk = 64

// ReadVec copies, for each piece, len(Buf) bytes at Addr in the process
// into Buf, in one process_vm_readv per 64 pieces
// (ibtransport.VectorMemory: the engine reads a pass's packet payloads
// so). Pieces of adjacent ranges, a message's packets, share one remote
// iovec.
func (p *Process) ReadVec(pieces []ibtransport.Piece) error { return p.vec(pieces, false) }

// WriteVec copies each piece's Buf to Addr in the process, as ReadVec
// reads.
func (p *Process) WriteVec(pieces []ibtransport.Piece) error { return p.vec(pieces, true) }

// Reachable reports whether the process was alive when last asked, asking
// its pidfd at most once in 50 µs.
func (p *Process) Reachable() bool { return p.recentlyAlive() }

func (p *Process) vec(pieces []ibtransport.Piece, write bool) error {
	for len(pieces) > 0 {
		k := min(len(pieces), vecChunk)
		if err := p.vecChunk(pieces[:k], write); err != nil {
			return err
		}
		pieces = pieces[k:]
	}
	return nil
}

func (p *Process) vecChunk(pieces []ibtransport.Piece, write bool) error {
	var local [vecChunk]unix.Iovec
	var remote [vecChunk]unix.RemoteIovec
	nl, nr := 0, 0
	var want uint64
	for _, pc := range pieces {
		n := uint64(len(pc.Buf))
		if n == 0 {
			continue
		}
		if pc.Addr+n < pc.Addr {
			return ErrFault
		}
		local[nl] = unix.Iovec{Base: unsafe.SliceData(pc.Buf), Len: n}
		nl++
		if nr > 0 && uint64(remote[nr-1].Base)+uint64(remote[nr-1].Len) == pc.Addr {
			remote[nr-1].Len += int(n)
		} else {
			remote[nr] = unix.RemoteIovec{Base: uintptr(pc.Addr), Len: int(n)}
			nr++
		}
		want += n
	}
	if nl == 0 {
		return nil
	}
	return p.call(local[:nl], remote[:nr], want, write)
}
