package procmem

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

var (
	// ErrGone is returned once the address space is gone: the process
	// exited or exec'd.
	ErrGone = errors.New("procmem: the process's address space is gone")
	// ErrFault is returned when a range is not mapped in the process, or
	// not writable for a write: the data moved up to that point stays.
	ErrFault = errors.New("procmem: bad address in the process")
	// ErrDescriptor is returned for a descriptor that is not a process's
	// mem or maps file of procfs.
	ErrDescriptor = errors.New("procmem: not a /proc/PID/mem and /proc/PID/maps pair")
)

// Process is one address space of a process, reached through its mem and
// maps files. Its methods may be called from any goroutine; Close must not
// race with them.
type Process struct {
	mem, maps int
	gone      atomic.Bool
	closed    atomic.Bool
	// checked is when (on the monotonic clock, as time since epoch)
	// Reachable last asked the kernel.
	checked atomic.Int64
}

// FromDescriptors takes a process's /proc/PID/mem (open for reading and
// writing) and /proc/PID/maps, as the process opened them itself and
// passed them (the daemon's clients do at hello). The Process owns both
// descriptors from then on, also when it returns an error.
func FromDescriptors(mem, maps int) (*Process, error) {
	p := &Process{mem: mem, maps: maps}
	if err := checkDescriptors(mem, maps); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Open opens the address space process pid has now. The caller needs the
// right to ptrace it (the same user, or CAP_SYS_PTRACE); the daemon never
// calls it, its clients open their own (FromDescriptors).
func Open(pid int) (*Process, error) {
	mem, err := unix.Open(fmt.Sprintf("/proc/%d/mem", pid), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("procmem: open mem of %d: %w", pid, err)
	}
	maps, err := unix.Open(fmt.Sprintf("/proc/%d/maps", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(mem)
		return nil, fmt.Errorf("procmem: open maps of %d: %w", pid, err)
	}
	return FromDescriptors(mem, maps)
}

// procMagic is statfs's f_type of procfs.
const procMagic = 0x9fa0

// checkDescriptors accepts a procfs "mem" open for reading and writing and
// a procfs "maps": anything else might block a read (a FIFO, a FUSE file)
// or mean something else.
func checkDescriptors(mem, maps int) error {
	for _, c := range []struct {
		fd   int
		name string
	}{{mem, "mem"}, {maps, "maps"}} {
		var fs unix.Statfs_t
		var st unix.Stat_t
		if unix.Fstatfs(c.fd, &fs) != nil || fs.Type != procMagic || unix.Fstat(c.fd, &st) != nil ||
			st.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("%w: descriptor %s", ErrDescriptor, c.name)
		}
		path, err := readlinkFD(c.fd)
		if err != nil || !strings.HasSuffix(path, "/"+c.name) {
			return fmt.Errorf("%w: descriptor %s is %q", ErrDescriptor, c.name, path)
		}
	}
	fl, err := unix.FcntlInt(uintptr(mem), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_ACCMODE != unix.O_RDWR {
		return fmt.Errorf("%w: mem not open for reading and writing", ErrDescriptor)
	}
	return nil
}

func readlinkFD(fd int) (string, error) {
	buf := make([]byte, 256)
	n, err := unix.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd), buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// Close releases the descriptors; every access after it returns ErrGone.
func (p *Process) Close() error {
	p.gone.Store(true)
	if p.closed.Swap(true) {
		return nil
	}
	unix.Close(p.maps)
	return unix.Close(p.mem)
}

// Gone reports whether an access found the address space gone (or the
// Process closed). It makes no system call: Alive asks.
func (p *Process) Gone() bool { return p.gone.Load() }

// Reachable reports whether the address space is there, asking the
// kernel (Alive) at most once in recheckEvery: the engine asks before it
// queues a packet's copy, so that a peer's WRITE to a process that has
// gone is refused (NAK) rather than accepted and lost.
func (p *Process) Reachable() bool {
	if p.gone.Load() {
		return false
	}
	now := int64(time.Since(epoch))
	if now-p.checked.Load() < int64(recheckEvery) {
		return true
	}
	p.checked.Store(now)
	return p.Alive()
}

// recheckEvery is how long Reachable trusts the last answer: a check
// costs two microseconds, a packet's copy about one, and within it an
// exit or exec is still found by the copy itself (which then fails the
// work request).
const recheckEvery = 50 * time.Microsecond

// epoch anchors checked to the monotonic clock.
var epoch = time.Now()

// Alive reports whether the address space still exists, asking the
// kernel: a read of its maps gives nothing once it is gone (a live one
// has at least one mapping). Once it returns false it never returns true.
func (p *Process) Alive() bool {
	if p.gone.Load() {
		return false
	}
	var b [1]byte
	n, err := unix.Pread(p.maps, b[:], 0)
	if err == unix.EINTR {
		return true // not known to be gone; the next check tells
	}
	if (err == nil && n == 0) || err == unix.ESRCH {
		p.gone.Store(true) // ESRCH: the process itself has gone
		return false
	}
	return true
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
// process: the payloads of several frames from one buffer.
func (p *Process) ReadV(pieces [][]byte, addr uint64) error {
	return p.contiguous(pieces, addr, false)
}

// WriteV writes the pieces in order to the contiguous bytes at addr in the
// process.
func (p *Process) WriteV(pieces [][]byte, addr uint64) error {
	return p.contiguous(pieces, addr, true)
}

func (p *Process) contiguous(pieces [][]byte, addr uint64, write bool) error {
	var b batch
	for _, pc := range pieces {
		if len(pc) == 0 {
			continue
		}
		if !b.add(pc, addr) {
			if err := b.do(p, write); err != nil {
				return err
			}
			b.add(pc, addr)
		}
		addr += uint64(len(pc))
	}
	return b.do(p, write)
}
