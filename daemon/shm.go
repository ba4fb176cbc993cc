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
	if r.fd >= 0 {
		unix.Close(r.fd)
	}
}

// pass returns the ring's descriptor for the reply being sent, after
// which the daemon keeps only the mapping: a ring holds none of the
// daemon's descriptors.
func (ss *session) pass(r *ring) int {
	fd := r.fd
	r.fd = -1
	ss.closeAfterReply = append(ss.closeAfterReply, fd)
	return fd
}

// newRing makes a ring for the session within its user's share of ring
// bytes (the daemon's own memory; a kernel driver charges its pinned
// queues to the user's RLIMIT_MEMLOCK).
func (ss *session) newRing(name string, size int) (*ring, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%s ring of %d bytes: %w", name, size, unix.EINVAL)
	}
	if err := ss.take(resRingBytes, int64(size)); err != nil {
		return nil, err
	}
	r, err := newRing(name, size)
	if err != nil {
		ss.give(resRingBytes, int64(size))
	}
	return r, err
}

// freeRing closes a ring of the session.
func (ss *session) freeRing(r *ring) {
	ss.give(resRingBytes, int64(len(r.mem)))
	r.close()
}
