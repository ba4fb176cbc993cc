package xdp

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Socket is one AF_XDP socket bound to one receive queue, with its own
// UMEM. It is not safe for concurrent use: give each goroutine its own
// socket (one per queue), or serialize the calls.
type Socket struct {
	fd      int
	ifindex int
	queue   int
	cfg     Config
	umem    []byte
	layout
	owner      []uint8 // receive buffers, then transmit frames: own* constants
	txInKernel []uint8 // per transmit frame, its descriptors the kernel holds
	freeTx     []uint64
	freeRx     []uint64 // released receive frames not yet on the fill ring
	fill       addrRing
	comp       addrRing
	rx         descRing
	tx         descRing
	zeroCopy   bool
	// txFull is set when the kernel refused a kick because the driver's
	// queue was full; txHeld counts the flushes since that did not kick
	// (Flush).
	txFull bool
	txHeld int
	ctr    counters
	closed bool
}

// Open creates an AF_XDP socket on receive queue queue of the interface
// with index ifindex (in the calling thread's network namespace), registers
// a UMEM, maps the four rings, fills the fill ring and binds. The socket
// only receives once an XDP program redirects into it (see package bpf).
func Open(ifindex, queue int, cfg Config) (*Socket, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Socket{fd: -1, ifindex: ifindex, queue: queue, cfg: cfg, layout: cfg.layout()}
	if err := s.open(); err != nil {
		s.Close()
		return nil, fmt.Errorf("AF_XDP socket on ifindex %d queue %d: %w", ifindex, queue, err)
	}
	return s, nil
}

// open takes the steps of Open; Open closes what a failed step leaves.
func (s *Socket) open() error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return socketError(err)
	}
	s.fd = fd
	if err := s.registerUMEM(); err != nil {
		return err
	}
	if err := s.openRings(); err != nil {
		return err
	}
	s.setTxBudget()
	s.initFrames()
	if err := s.bind(); err != nil {
		return err
	}
	s.readZeroCopy()
	return s.setBusyPoll()
}

// FD returns the socket's file descriptor, for the XSKMAP and for poll.
func (s *Socket) FD() int { return s.fd }

// Queue returns the receive queue the socket is bound to.
func (s *Socket) Queue() int { return s.queue }

// ZeroCopy reports whether the kernel bound the socket in zero-copy mode.
func (s *Socket) ZeroCopy() bool { return s.zeroCopy }

// FrameSize returns the UMEM chunk size: the most one descriptor carries.
func (s *Socket) FrameSize() int { return s.cfg.FrameSize }

// TxFrameSize returns the size of the buffers NextTxFrame hands out.
func (s *Socket) TxFrameSize() int { return int(s.txStride) }

// Close unbinds the socket and frees the rings and the UMEM. Frames and
// slices obtained from the socket must not be used afterwards.
func (s *Socket) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.fd >= 0 {
		if err := unix.Close(s.fd); err != nil {
			errs = append(errs, fmt.Errorf("close AF_XDP socket: %w", err))
		}
		s.fd = -1
	}
	for _, r := range []*ring{&s.fill.ring, &s.comp.ring, &s.rx.ring, &s.tx.ring} {
		if r.mem != nil {
			if err := unix.Munmap(r.mem); err != nil {
				errs = append(errs, fmt.Errorf("unmap ring: %w", err))
			}
			r.mem = nil
		}
	}
	// The kernel pinned the UMEM pages; unmapping our view is safe even if
	// it releases them a little later.
	if s.umem != nil {
		if err := unix.Munmap(s.umem); err != nil {
			errs = append(errs, fmt.Errorf("unmap UMEM: %w", err))
		}
		s.umem = nil
	}
	return errors.Join(errs...)
}
