package xdp

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Transmitting: free transmit frames go out on the TX ring and come back on
// the completion ring.

// NextTxFrame hands out a free transmit frame: a descriptor (Len 0) and the
// whole frame (TxFrameSize bytes) to build a packet in. ok is false when every transmit frame
// is in flight even after reaping completions.
func (s *Socket) NextTxFrame() (d Desc, buf []byte, ok bool) {
	if s.closed {
		return Desc{}, nil, false
	}
	if len(s.freeTx) == 0 {
		s.Complete()
		if len(s.freeTx) == 0 {
			return Desc{}, nil, false
		}
	}
	addr := s.freeTx[len(s.freeTx)-1]
	s.freeTx = s.freeTx[:len(s.freeTx)-1]
	c, _ := s.txIndex(addr)
	s.owner[s.rxCount+c] = ownAppTx
	return Desc{Addr: addr}, s.umem[addr : addr+s.txStride : addr+s.txStride], true
}

// FreeTxFrame returns a frame from NextTxFrame that will not be sent.
func (s *Socket) FreeTxFrame(d Desc) error {
	c, ok := s.txIndex(d.Addr)
	if !ok || s.owner[s.rxCount+c] != ownAppTx {
		s.ctr.ownershipErrors.Add(1)
		return fmt.Errorf("free transmit frame at %#x: %w", d.Addr, ErrFrameOwnership)
	}
	s.owner[s.rxCount+c] = ownFreeTx
	s.freeTx = append(s.freeTx, s.txAddr(c))
	return nil
}

// Transmit puts descriptors from NextTxFrame (with Len set, and More set on
// all but the last descriptor of a multi-buffer packet) on the TX ring and
// returns how many it queued: the longest prefix that fits and ends at a
// packet boundary. The frames belong to the kernel afterwards. Call Flush
// to make sure the kernel starts sending.
func (s *Socket) Transmit(descs []Desc) (int, error) {
	if s.closed {
		return 0, ErrClosed
	}
	free := s.tx.prodFree(uint32(len(descs)))
	n := min(free, uint32(len(descs)))
	for n > 0 && descs[n-1].More() {
		n-- // never queue a packet without its last descriptor
	}
	for i := uint32(0); i < n; i++ {
		c, ok := s.txIndex(descs[i].Addr)
		// A descriptor stays inside its frame and carries at most a chunk.
		inFrame := ok && descs[i].Addr+uint64(descs[i].Len) <= s.txAddr(c)+s.txStride &&
			descs[i].Len <= uint32(s.cfg.FrameSize)
		if !ok || s.owner[s.rxCount+c] != ownAppTx || !inFrame {
			// Queue what came before; refuse the rest.
			s.ctr.ownershipErrors.Add(1)
			n = i
			for n > 0 && descs[n-1].More() {
				n--
			}
			s.submitTx(descs[:n])
			return int(n), fmt.Errorf("transmit frame at %#x: %w", descs[i].Addr, ErrFrameOwnership)
		}
	}
	s.submitTx(descs[:n])
	return int(n), nil
}

func (s *Socket) submitTx(descs []Desc) {
	var bytes, packets uint64
	for i, d := range descs {
		c, _ := s.txIndex(d.Addr)
		s.owner[s.rxCount+c] = ownKernelTx
		s.txInKernel[c]++
		s.tx.descs[(s.tx.cachedProd+uint32(i))&s.tx.mask] = d
		bytes += uint64(d.Len)
		if !d.More() {
			packets++
		}
	}
	if len(descs) > 0 {
		s.tx.prodSubmit(uint32(len(descs)))
	}
	s.ctr.txBytes.Add(bytes)
	s.ctr.txPackets.Add(packets)
	s.ctr.txDescs.Add(uint64(len(descs)))
	s.ctr.freeTx.Store(int64(len(s.freeTx)))
}

// Flush wakes the kernel's transmit path when it asks for it (need_wakeup;
// in copy mode that is every batch) and reaps completions. Transient
// conditions (EAGAIN, EBUSY, ENOBUFS) are not errors: the frames stay
// queued and a later Flush retries.
//
// Once the driver's queue was full, Flush kicks again only after a
// completion (the driver freed a frame, so it has room), RetryTx, or
// maxHeldKicks flushes: a kick into a full queue still costs a system
// call, and in copy mode the copy of a frame into a buffer the kernel frees
// at once. A sender that polled against a full virtio-net queue had seven
// kicks in eight refused.
func (s *Socket) Flush() error {
	if s.closed {
		return ErrClosed
	}
	if s.txFull {
		if s.Complete() == 0 && s.txHeld < maxHeldKicks {
			s.txHeld++
			s.ctr.kicksHeld.Add(1)
			return nil
		}
		s.RetryTx()
	}
	err := s.kick()
	s.Complete()
	return err
}

// maxHeldKicks bounds the flushes that skip the kick of a full queue, for
// drivers that free sent frames only when asked to send more (virtio-net
// without napi_tx) and callers that never wait (RetryTx).
const maxHeldKicks = 64

// RetryTx lets the next Flush kick even if the driver's queue was full and
// nothing completed since: a caller that waited a while for room calls it.
func (s *Socket) RetryTx() {
	s.txFull = false
	s.txHeld = 0
}

// kick sends what the TX ring holds: copy mode sends a bounded batch per
// sendto and reports EAGAIN when more is left, so it kicks until the ring
// drains or the kernel pushes back.
func (s *Socket) kick() error {
	for i := 0; i < 64; i++ {
		before := s.tx.prodOutstanding()
		if before == 0 || !s.tx.needWakeup() {
			return nil
		}
		s.ctr.kicks.Add(1)
		// A raw system call: the kick never sleeps (MSG_DONTWAIT), but in
		// copy mode it does the wire's work for a whole batch, often past
		// the Go runtime's 20µs mark, after which a regular Syscall has
		// its P taken and handed to another thread, and must win one back
		// when it returns.
		_, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		switch {
		case errno == 0:
		case errno == unix.EAGAIN && s.tx.prodOutstanding() != before:
			// More left after a batch: kick again.
		case errno == unix.EAGAIN:
			// Nothing sent: the driver's queue is full.
			s.ctr.kicksRefused.Add(1)
			s.txFull = true
			return nil
		case errno == unix.EBUSY || errno == unix.ENOBUFS:
			return nil
		default:
			s.ctr.kickErrors.Add(1)
			return fmt.Errorf("AF_XDP transmit kick: %w", errno)
		}
	}
	return nil
}

// TxPending returns how many descriptors are on the TX ring that the
// kernel has not taken yet.
func (s *Socket) TxPending() int {
	if s.closed {
		return 0
	}
	return int(s.tx.prodOutstanding())
}

// Complete moves sent frames from the completion ring back to the free
// transmit frames and returns how many.
func (s *Socket) Complete() int {
	if s.closed {
		return 0
	}
	n := s.comp.consAvail()
	for i := uint32(0); i < n; i++ {
		addr := s.comp.addrs[(s.comp.cachedCons+i)&s.comp.mask]
		addr = unalignedAddr(addr)
		c, ok := s.txIndex(addr)
		if !ok || s.owner[s.rxCount+c] != ownKernelTx || s.txInKernel[c] == 0 {
			s.ctr.ownershipErrors.Add(1) // the kernel returned a frame twice: never reuse it blindly
			continue
		}
		// A frame sent as several descriptors is free once all are back.
		if s.txInKernel[c]--; s.txInKernel[c] > 0 {
			continue
		}
		s.owner[s.rxCount+c] = ownFreeTx
		s.freeTx = append(s.freeTx, s.txAddr(c))
	}
	if n > 0 {
		s.comp.consRelease(n)
		s.ctr.txCompleted.Add(uint64(n))
		s.ctr.freeTx.Store(int64(len(s.freeTx)))
	}
	return int(n)
}
