package xdp

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Receiving: the RX ring hands received descriptors to the application,
// and the fill ring gives released buffers back to the kernel.

// Receive moves up to len(descs) received descriptors into descs and returns
// how many. It never splits a multi-buffer packet across calls unless one
// packet alone has more descriptors than descs holds. The frames belong to
// the caller until Release. Receive does not block; see Wait.
func (s *Socket) Receive(descs []Desc) int {
	if s.closed {
		return 0
	}
	s.refill()
	avail := s.rx.consAvail()
	if avail == 0 {
		if s.cfg.BusyPoll || s.fill.needWakeup() {
			s.wakeRx()
			avail = s.rx.consAvail()
		}
		if avail == 0 {
			return 0
		}
	}
	n := min(avail, uint32(len(descs)))
	whole := uint32(0) // descriptors up to the end of the last whole packet
	for i := uint32(0); i < n; i++ {
		descs[i] = s.rx.descs[(s.rx.cachedCons+i)&s.rx.mask]
		if !descs[i].More() {
			whole = i + 1
		}
	}
	if whole == 0 {
		if n < uint32(len(descs)) {
			return 0 // the rest of the packet is not published yet
		}
		whole = n // caller's slice too small for one packet: hand out a part
	}
	s.rx.consRelease(whole)
	var bytes, packets uint64
	for i := range descs[:whole] {
		d := &descs[i]
		if s.cfg.Contiguous {
			d.Addr = unalignedAddr(d.Addr)
		}
		if c, ok := s.rxIndex(d.Addr); ok {
			s.owner[c] = ownAppRx
		}
		bytes += uint64(d.Len)
		if !d.More() {
			packets++
		}
	}
	s.ctr.rxBytes.Add(bytes)
	s.ctr.rxPackets.Add(packets)
	s.ctr.rxDescs.Add(uint64(whole))
	return int(whole)
}

// Release gives received frames back to the kernel (the fill ring). Frames
// the caller does not hold are skipped and counted as ownership errors.
func (s *Socket) Release(descs []Desc) error {
	if s.closed {
		return ErrClosed
	}
	bad := 0
	for _, d := range descs {
		c, ok := s.rxIndex(d.Addr)
		if !ok || s.owner[c] != ownAppRx {
			bad++
			continue
		}
		s.owner[c] = ownFreeRx
		s.freeRx = append(s.freeRx, uint64(c)*s.rxStride)
	}
	s.refill()
	if bad > 0 {
		s.ctr.ownershipErrors.Add(uint64(bad))
		return fmt.Errorf("release %d of %d frames: %w", bad, len(descs), ErrFrameOwnership)
	}
	return nil
}

// refill moves free receive frames onto the fill ring, oldest first: the
// kernel takes fill entries in order, so buffers come back in the order
// they were first given, and with the contiguous layout consecutive
// buffers stay adjacent. The kernel publishes its fill-ring consumer index
// lazily, so the ring can look full while we hold frames it already took;
// those wait in freeRx for the next call.
func (s *Socket) refill() {
	if len(s.freeRx) == 0 {
		return
	}
	n := min(s.fill.prodFree(uint32(len(s.freeRx))), uint32(len(s.freeRx)))
	for i, addr := range s.freeRx[:n] {
		c, _ := s.rxIndex(addr)
		s.owner[c] = ownKernelRx
		s.fill.addrs[(s.fill.cachedProd+uint32(i))&s.fill.mask] = addr
	}
	rest := uint32(copy(s.freeRx, s.freeRx[n:]))
	s.freeRx = s.freeRx[:rest]
	if n > 0 {
		s.fill.prodSubmit(n)
	}
	s.ctr.freeRx.Store(int64(rest))
	if s.fill.needWakeup() {
		s.wakeRx()
	}
}

func (s *Socket) wakeRx() {
	s.ctr.rxWakeups.Add(1)
	unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
}

// Wait blocks until a frame is ready to receive, the optional extra file
// descriptor (e.g. an eventfd doorbell; -1 for none) becomes readable, or
// timeout passes (negative: no timeout). It reports whether the socket is
// readable.
func (s *Socket) Wait(timeout time.Duration, extraFD int) (bool, error) {
	if s.closed {
		return false, ErrClosed
	}
	if s.rx.consAvail() > 0 {
		return true, nil
	}
	fds := [2]unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}, {Fd: int32(extraFD), Events: unix.POLLIN}}
	nfds := 1
	if extraFD >= 0 {
		nfds = 2
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	for {
		_, err := unix.Poll(fds[:nfds], ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("poll AF_XDP socket: %w", err)
		}
		return fds[0].Revents&unix.POLLIN != 0, nil
	}
}
