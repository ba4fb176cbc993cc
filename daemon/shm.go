package daemon

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ring is shared memory the daemon made for a client: a sealed memfd,
// mapped here, whose descriptor the client receives.
type ring struct {
	fd  int
	mem []byte
}

// newRing makes a shared ring of size bytes. The seals keep the client
// from shrinking the memfd under the daemon's mapping (a SIGBUS here).
func newRing(name string, size int) (*ring, error) {
	fd, err := unix.MemfdCreate("softnic-"+name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("memfd size: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("memfd seals: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return &ring{fd: fd, mem: mem}, nil
}

func (r *ring) close() {
	if r == nil {
		return
	}
	unix.Munmap(r.mem)
	unix.Close(r.fd)
}

// maxSessionRings bounds the shared memory one session's rings take, the
// daemon's memory that a client could otherwise exhaust (a kernel driver
// charges its pinned queues to the user's RLIMIT_MEMLOCK).
const maxSessionRings = 1 << 30

// newRing makes a ring for the session within its share.
func (ss *session) newRing(name string, size int) (*ring, error) {
	if size <= 0 || ss.ringBytes+size > maxSessionRings {
		return nil, fmt.Errorf("%s ring of %d bytes, %d in use: %w", name, size, ss.ringBytes, unix.ENOMEM)
	}
	r, err := newRing(name, size)
	if err == nil {
		ss.ringBytes += size
	}
	return r, err
}

// freeRing closes a ring of the session.
func (ss *session) freeRing(r *ring) {
	ss.ringBytes -= len(r.mem)
	r.close()
}

// pageSize is the session page's size.
const pageSize = 4096

// Session page words (docs/HOST-INTERFACE.md).
const (
	offDoorbell = 0
	offSleeping = 64
)
