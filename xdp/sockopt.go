package xdp

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Socket options, bind and need_wakeup: the socket's setup beyond the UMEM
// and the rings.

func setsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), size, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func getsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// setTxBudget lets copy-mode sendto push up to a TX ring's worth of frames
// per call. Kernels from 6.17 let copy-mode sendto push more than 32 frames
// per call; older kernels refuse the option, which only costs more kicks.
func (s *Socket) setTxBudget() {
	_ = unix.SetsockoptInt(s.fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, s.cfg.TxRingSize)
}

// bindFlags are the bind flags for the configured mode: always
// need_wakeup, so that the data path makes a system call only when the
// kernel asks for one.
func (c *Config) bindFlags() uint16 {
	var flags uint16 = unix.XDP_USE_NEED_WAKEUP
	switch c.Mode { // Contiguous forced ModeCopy
	case ModeCopy:
		flags |= unix.XDP_COPY
	case ModeZeroCopy:
		flags |= unix.XDP_ZEROCOPY
	}
	if c.MultiBuffer {
		flags |= unix.XDP_USE_SG
	}
	return flags
}

// bind binds the socket to its interface and queue.
func (s *Socket) bind() error {
	sa := &unix.SockaddrXDP{Flags: s.cfg.bindFlags(), Ifindex: uint32(s.ifindex), QueueID: uint32(s.queue)}
	// The kernel detaches a closed socket's buffer pool from its queue in a
	// deferred work item, so a socket closed just before (a restart, the
	// previous test) can hold the queue for a moment: retry EBUSY briefly.
	err := unix.Bind(s.fd, sa)
	for deadline := time.Now().Add(time.Second); errors.Is(err, unix.EBUSY) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		err = unix.Bind(s.fd, sa)
	}
	if err != nil {
		return bindError(err, &s.cfg, s.ifindex, s.queue)
	}
	return nil
}

// readZeroCopy asks the kernel whether the bound socket is zero-copy.
func (s *Socket) readZeroCopy() {
	var opts uint32
	if err := getsockopt(s.fd, unix.XDP_OPTIONS, unsafe.Pointer(&opts), unsafe.Sizeof(opts)); err == nil {
		s.zeroCopy = opts&unix.XDP_OPTIONS_ZEROCOPY != 0
	}
}

// setBusyPoll enables preferred busy polling when the configuration asks
// for it.
func (s *Socket) setBusyPoll() error {
	cfg := &s.cfg
	if !cfg.BusyPoll {
		return nil
	}
	for _, o := range []struct {
		name     string
		opt, val int
	}{
		{"SO_PREFER_BUSY_POLL", unix.SO_PREFER_BUSY_POLL, 1},
		{"SO_BUSY_POLL", unix.SO_BUSY_POLL, int(cfg.BusyPollTimeout / time.Microsecond)},
		{"SO_BUSY_POLL_BUDGET", unix.SO_BUSY_POLL_BUDGET, cfg.BusyPollBudget},
	} {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, o.opt, o.val); err != nil {
			return fmt.Errorf("busy polling: %s: %w", o.name, err)
		}
	}
	return nil
}
