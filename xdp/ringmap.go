package xdp

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ringSpec is one of the four rings as Open sizes and maps it.
type ringSpec struct {
	name    string
	sizeOpt int   // the socket option that sizes it
	pgoff   int64 // the mmap offset that maps it
	n       int   // entries
	esize   uintptr
	attach  func(mem []byte, off unix.XDPRingOffset, size int)
}

// ringSpecs lists the fill, completion, RX and TX rings, in the order of
// the kernel's XDPMmapOffsets. The fill ring is twice the receive buffers,
// because the kernel publishes its consumer index lazily; the completion
// ring holds every transmit descriptor (the kernel reserves a slot before
// sending).
func (s *Socket) ringSpecs() [4]ringSpec {
	desc := unsafe.Sizeof(Desc{})
	return [4]ringSpec{
		{"fill", unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_PGOFF_FILL_RING, 2 * s.rxCount, 8, s.fill.attach},
		{"completion", unix.XDP_UMEM_COMPLETION_RING, unix.XDP_UMEM_PGOFF_COMPLETION_RING, nextPow2(s.txCount * s.txDescs), 8, s.comp.attach},
		{"RX", unix.XDP_RX_RING, unix.XDP_PGOFF_RX_RING, s.cfg.RxRingSize, desc, s.rx.attach},
		{"TX", unix.XDP_TX_RING, unix.XDP_PGOFF_TX_RING, s.cfg.TxRingSize, desc, s.tx.attach},
	}
}

// openRings sizes the four rings, then maps each into our memory.
func (s *Socket) openRings() error {
	specs := s.ringSpecs()
	for _, r := range specs {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_XDP, r.sizeOpt, r.n); err != nil {
			return fmt.Errorf("size the %s ring to %d: %w", r.name, r.n, err)
		}
	}
	var off unix.XDPMmapOffsets
	if err := getsockopt(s.fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return fmt.Errorf("ring offsets: %w", err)
	}
	offs := [4]unix.XDPRingOffset{off.Fr, off.Cr, off.Rx, off.Tx}
	for i, r := range specs {
		mem, err := mapRing(s.fd, r.pgoff, offs[i], uint32(r.n), r.esize)
		if err != nil {
			return fmt.Errorf("map the %s ring: %w", r.name, err)
		}
		r.attach(mem, offs[i], r.n)
	}
	return nil
}

func mapRing(fd int, pgoff int64, off unix.XDPRingOffset, size uint32, entrySize uintptr) ([]byte, error) {
	length := int(off.Desc) + int(size)*int(entrySize)
	return unix.Mmap(fd, pgoff, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
}

// attach points the ring at its mapped memory: indexes, flags and the
// entries, which start at off.Desc.
func (r *addrRing) attach(mem []byte, off unix.XDPRingOffset, size int) {
	r.init(mem, off, uint32(size))
	r.addrs = unsafe.Slice((*uint64)(unsafe.Pointer(&mem[off.Desc])), size)
}

func (r *descRing) attach(mem []byte, off unix.XDPRingOffset, size int) {
	r.init(mem, off, uint32(size))
	r.descs = unsafe.Slice((*Desc)(unsafe.Pointer(&mem[off.Desc])), size)
}
