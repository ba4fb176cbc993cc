package procmem

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/ibtransport"
)

// vecChunk is how many reads one system call of ReadVec takes: its iovec
// arrays live on the stack.
const vecChunk = 64

// ReadVec does every read of reads, len(Dst) bytes at Addr each, in one
// process_vm_readv per 64 reads (ibtransport.VectorReader: the engine reads
// a pass's packet payloads so). Reads of adjacent ranges, a message's
// packets, share one remote iovec.
func (p *Process) ReadVec(reads []ibtransport.VecRead) error {
	for len(reads) > 0 {
		k := min(len(reads), vecChunk)
		if err := p.readChunk(reads[:k]); err != nil {
			return err
		}
		reads = reads[k:]
	}
	return nil
}

func (p *Process) readChunk(reads []ibtransport.VecRead) error {
	var local [vecChunk]unix.Iovec
	var remote [vecChunk]unix.RemoteIovec
	nl, nr := 0, 0
	var want uint64
	for _, r := range reads {
		n := uint64(len(r.Dst))
		if n == 0 {
			continue
		}
		if r.Addr+n < r.Addr {
			return ErrFault
		}
		local[nl] = unix.Iovec{Base: unsafe.SliceData(r.Dst), Len: n}
		nl++
		if nr > 0 && uint64(remote[nr-1].Base)+uint64(remote[nr-1].Len) == r.Addr {
			remote[nr-1].Len += int(n)
		} else {
			remote[nr] = unix.RemoteIovec{Base: uintptr(r.Addr), Len: int(n)}
			nr++
		}
		want += n
	}
	if nl == 0 {
		return nil
	}
	if !p.recentlyAlive() {
		return ErrGone
	}
	got, err := unix.ProcessVMReadv(p.pid, local[:nl], remote[:nr], 0)
	switch {
	case err == unix.ESRCH:
		p.gone.Store(true)
		return ErrGone
	case err == unix.EFAULT || (err == nil && uint64(got) != want):
		return ErrFault
	case err != nil:
		return fmt.Errorf("procmem: pid %d: %w", p.pid, err)
	}
	return nil
}
