package procmem

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// ReadVec copies, for each piece, len(Buf) bytes at Addr in the process
// into Buf (ibtransport.VectorMemory: the engine reads a pass's packet
// payloads so): one system call per run of pieces at adjacent addresses,
// a message's packets, of up to 64 pieces.
func (p *Process) ReadVec(pieces []ibv.Piece) error { return p.vec(pieces, false) }

// WriteVec copies each piece's Buf to Addr in the process, as ReadVec
// reads.
func (p *Process) WriteVec(pieces []ibv.Piece) error { return p.vec(pieces, true) }

func (p *Process) vec(pieces []ibv.Piece, write bool) error {
	var b batch
	for _, pc := range pieces {
		if len(pc.Buf) == 0 {
			continue
		}
		if !b.add(pc.Buf, pc.Addr) {
			if err := b.do(p, write); err != nil {
				return err
			}
			b.add(pc.Buf, pc.Addr)
		}
	}
	return b.do(p, write)
}

// batchLen is how many local buffers one call takes: its iovec array
// lives on the stack.
const batchLen = 64

// batch is one run of local buffers for adjacent addresses of the
// process, from addr on.
type batch struct {
	iov  [batchLen]unix.Iovec
	n    int
	addr uint64
	want uint64
}

// add appends buf for the bytes at addr if they follow the run's and there
// is room; it reports false otherwise (do the batch, then add again).
func (b *batch) add(buf []byte, addr uint64) bool {
	if b.n > 0 && (b.n == batchLen || b.addr+b.want != addr) {
		return false
	}
	if b.n == 0 {
		b.addr = addr
	}
	b.iov[b.n] = unix.Iovec{Base: unsafe.SliceData(buf), Len: uint64(len(buf))}
	b.n++
	b.want += uint64(len(buf))
	return true
}

// maxAddr bounds the addresses: a file offset is signed, and no user
// address space reaches this far.
const maxAddr = 1 << 63

// do makes one preadv (or pwritev) of the run and empties the batch.
func (b *batch) do(p *Process, write bool) error {
	if b.n == 0 {
		return nil
	}
	n, want, addr := b.n, b.want, b.addr
	b.n, b.want = 0, 0
	if p.gone.Load() {
		return ErrGone
	}
	if addr >= maxAddr || want > maxAddr-addr {
		return ErrFault
	}
	nr := uintptr(unix.SYS_PREADV)
	if write {
		nr = unix.SYS_PWRITEV
	}
	got, _, errno := unix.Syscall6(nr, uintptr(p.mem), uintptr(unsafe.Pointer(&b.iov[0])), uintptr(n),
		uintptr(addr), 0, 0) // pos_l holds all 64 bits of the offset
	if errno == 0 && uint64(got) == want {
		return nil
	}
	if errno == 0 && got == 0 {
		// The kernel moves nothing once the address space the
		// descriptor was opened for has gone (exit or exec).
		p.gone.Store(true)
		return ErrGone
	}
	// EIO: a page is not mapped (or not writable); a short count: the
	// same, part way. Anything else fails the work request too rather
	// than have the engine retry.
	return ErrFault
}
