package xdp

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The UMEM: the memory area of equal-sized chunks the kernel reads and
// writes packets in (see layout for where receive buffers and transmit
// frames lie), and the owner of each of its frames.

// Frame ownership, tracked per receive buffer and transmit frame so that a frame can never be
// handed out twice (the bug of asavie/xdp issue #24).
const (
	ownKernelRx uint8 = iota // on the fill or RX ring
	ownAppRx                 // received, held by the application
	ownFreeTx                // on the free transmit stack
	ownAppTx                 // handed out by NextTxFrame
	ownKernelTx              // on the TX or completion ring
	ownFreeRx                // released by the application, waiting for fill-ring space
)

// registerUMEM maps the UMEM and registers it with the socket
// (XDP_UMEM_REG).
func (s *Socket) registerUMEM() error {
	cfg := &s.cfg
	size := cfg.NumFrames * cfg.FrameSize
	var err error
	s.umem, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		s.umem = nil
		return fmt.Errorf("map %d bytes of UMEM: %w: %w", size, ErrUMEM, err)
	}
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))),
		Len:  uint64(size),
		Size: uint32(cfg.FrameSize),
	}
	if cfg.Contiguous {
		reg.Flags = unix.XDP_UMEM_UNALIGNED_CHUNK_FLAG
	}
	if err := setsockopt(s.fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		if errors.Is(err, unix.ENOBUFS) {
			// The kernel charges the UMEM to RLIMIT_MEMLOCK unless the
			// caller has CAP_IPC_LOCK.
			var lim unix.Rlimit
			unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim)
			return fmt.Errorf("register %d bytes of UMEM: %w (limit %d bytes; raise `ulimit -l` or grant CAP_IPC_LOCK): %w",
				size, ErrMemlock, lim.Cur, err)
		}
		if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EPERM) {
			return fmt.Errorf("register %d bytes of UMEM: %w: %w", size, ErrUMEM, err)
		}
		return fmt.Errorf("register %d bytes of UMEM: %w", size, err)
	}
	return nil
}

// initFrames gives the kernel every receive buffer, in address order (see
// refill), and puts every transmit frame on the free stack.
func (s *Socket) initFrames() {
	s.owner = make([]uint8, s.rxCount+s.txCount)
	s.txInKernel = make([]uint8, s.txCount)
	for i := 0; i < s.rxCount; i++ {
		s.fill.addrs[(s.fill.cachedProd+uint32(i))&s.fill.mask] = uint64(i) * s.rxStride
		s.owner[i] = ownKernelRx
	}
	s.fill.prodSubmit(uint32(s.rxCount))
	s.freeRx = make([]uint64, 0, s.rxCount)
	s.freeTx = make([]uint64, 0, s.txCount)
	for i := s.txCount - 1; i >= 0; i-- {
		s.freeTx = append(s.freeTx, s.txAddr(i))
		s.owner[s.rxCount+i] = ownFreeTx
	}
	s.ctr.freeTx.Store(int64(len(s.freeTx)))
}

// Frame returns the bytes a descriptor refers to, or nil if the descriptor
// points outside the UMEM. The slice aliases the UMEM: it stays valid until
// the frame is released (received frames) or transmitted.
func (s *Socket) Frame(d Desc) []byte {
	end := d.Addr + uint64(d.Len)
	if end > uint64(len(s.umem)) || end < d.Addr {
		return nil
	}
	return s.umem[d.Addr:end:end]
}

// Offset returns the UMEM address of b's first byte, and false if b does
// not start inside the UMEM. It maps a buffer from NextTxFrame back to its
// descriptor.
func (s *Socket) Offset(b []byte) (uint64, bool) {
	if len(s.umem) == 0 || cap(b) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(s.umem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p >= base+uintptr(len(s.umem)) {
		return 0, false
	}
	return uint64(p - base), true
}
