package procmem

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

var (
	// ErrGone is returned once the process has exited.
	ErrGone = errors.New("procmem: process exited")
	// ErrFault is returned when a range is not mapped in the process, or
	// not writable for a write: the data moved up to that point stays.
	ErrFault = errors.New("procmem: bad address in the process")
)

// Process is another process's memory. Its methods may be called from any
// goroutine; Close must not race with them.
type Process struct {
	pid    int
	pidfd  int
	gone   atomic.Bool
	closed atomic.Bool
	// seenAlive is when (on the monotonic clock, as time since epoch) the
	// pidfd last said the process runs.
	seenAlive atomic.Int64
}

// trustAlive is how long an access relies on the pidfd's last answer
// instead of asking again: a poll costs as much as a small copy, and a
// packet's access should not pay it. Within it, an access reaches a later
// process with the same pid only if the process exited, was reaped, and the
// pid allocator went once around its whole space: no machine forks that
// fast. (A process that exited but was not yet reaped keeps its pid and has
// no memory: process_vm_* fail with ESRCH.)
const trustAlive = 50 * time.Microsecond

// epoch anchors seenAlive to the monotonic clock.
var epoch = time.Now()

// Open opens the memory of process pid. The caller needs the right to
// ptrace it (the same user without YAMA restrictions, or CAP_SYS_PTRACE).
func Open(pid int) (*Process, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("procmem: pidfd_open %d: %w", pid, err)
	}
	return open(pid, fd)
}

// FromPidfd opens the memory of the process pidfd refers to (for instance
// from SO_PEERPIDFD); the Process owns pidfd from then on.
func FromPidfd(pidfd int) (*Process, error) {
	pid, err := pidOf(pidfd)
	if err != nil {
		unix.Close(pidfd)
		return nil, err
	}
	return open(pid, pidfd)
}

func open(pid, pidfd int) (*Process, error) {
	p := &Process{pid: pid, pidfd: pidfd}
	// A zero-length read checks the right to reach the memory now rather
	// than at the first packet.
	var b [1]byte
	if err := p.ReadAt(b[:0], 0); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Pid returns the process's pid, as this process's pid namespace sees it.
func (p *Process) Pid() int { return p.pid }

// Pidfd returns the pidfd the Process holds: it becomes readable when the
// process exits.
func (p *Process) Pidfd() int { return p.pidfd }

// Alive reports whether the process has not exited. Once it returns false
// it never returns true again.
func (p *Process) Alive() bool {
	if p.gone.Load() {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	if err == nil && n == 0 {
		return true
	}
	if err == unix.EINTR {
		return true // not known to be gone; the next check tells
	}
	p.gone.Store(true)
	return false
}

// recentlyAlive is Alive, asking the pidfd at most once in trustAlive.
func (p *Process) recentlyAlive() bool {
	now := int64(time.Since(epoch))
	if seen := p.seenAlive.Load(); seen != 0 && now-seen < int64(trustAlive) {
		return !p.gone.Load()
	}
	if !p.Alive() {
		return false
	}
	p.seenAlive.Store(now)
	return true
}

// Close releases the pidfd; every access after it returns ErrGone.
func (p *Process) Close() error {
	p.gone.Store(true)
	if p.closed.Swap(true) {
		return nil
	}
	return unix.Close(p.pidfd)
}

// ReadAt copies len(dst) bytes at addr in the process into dst.
func (p *Process) ReadAt(dst []byte, addr uint64) error {
	return p.ReadV([][]byte{dst}, addr)
}

// WriteAt copies src to addr in the process.
func (p *Process) WriteAt(src []byte, addr uint64) error {
	return p.WriteV([][]byte{src}, addr)
}

// ReadV fills the pieces in order from the contiguous bytes at addr in the
// process: the payloads of several frames from one buffer, in one call.
func (p *Process) ReadV(pieces [][]byte, addr uint64) error {
	return p.access(pieces, addr, false)
}

// WriteV writes the pieces in order to the contiguous bytes at addr in the
// process.
func (p *Process) WriteV(pieces [][]byte, addr uint64) error {
	return p.access(pieces, addr, true)
}

// maxIov is the most pieces one system call takes (UIO_MAXIOV).
const maxIov = 1024

func (p *Process) access(pieces [][]byte, addr uint64, write bool) error {
	for len(pieces) > maxIov {
		if err := p.access(pieces[:maxIov], addr, write); err != nil {
			return err
		}
		addr += total(pieces[:maxIov])
		pieces = pieces[maxIov:]
	}
	var local [64]unix.Iovec // more pieces allocate
	iov := local[:0]
	for _, b := range pieces {
		if len(b) > 0 {
			iov = append(iov, unix.Iovec{Base: unsafe.SliceData(b), Len: uint64(len(b))})
		}
	}
	n := total(pieces)
	if addr+n < addr {
		return ErrFault
	}
	return p.call(iov, []unix.RemoteIovec{{Base: uintptr(addr), Len: int(n)}}, n, write)
}

// call makes one process_vm_readv (or writev) of want bytes between the
// local and the remote ranges, once the process is known to live, and
// turns its outcome into ErrGone, ErrFault or another error.
func (p *Process) call(local []unix.Iovec, remote []unix.RemoteIovec, want uint64, write bool) error {
	if !p.recentlyAlive() {
		return ErrGone
	}
	var got int
	var err error
	if write {
		got, err = unix.ProcessVMWritev(p.pid, local, remote, 0)
	} else {
		got, err = unix.ProcessVMReadv(p.pid, local, remote, 0)
	}
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

func total(pieces [][]byte) uint64 {
	var n uint64
	for _, b := range pieces {
		n += uint64(len(b))
	}
	return n
}

// pidOf returns the pid a pidfd refers to, from its fdinfo.
func pidOf(pidfd int) (int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", pidfd))
	if err != nil {
		return 0, fmt.Errorf("procmem: pidfd: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || pid <= 0 {
				return 0, ErrGone // -1: the process has exited
			}
			return pid, nil
		}
	}
	return 0, fmt.Errorf("procmem: fd %d is not a pidfd", pidfd)
}
