package verbs

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client"
)

// AllocMemory returns n bytes of zeroed, page-aligned memory that the
// device reaches at the cost of a plain copy. Any memory can be
// registered; this is the memory to register when the device is reached
// through a daemon (Dial): the daemon maps it too (a sealed memfd shared
// over the control socket), so it moves payloads to and from regions in
// it as an in-process device does, where for other memory it needs a
// read or write of the client's /proc/self/mem per batch of packets. On an in-process
// device it is anonymous memory. Free it with FreeMemory.
func (d *Device) AllocMemory(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("alloc memory: %d bytes: %w", n, ErrInvalidArgument)
	}
	if d.remote == nil {
		mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, fmt.Errorf("alloc memory: %w", err)
		}
		d.memory.add(mem, 0)
		return mem, nil
	}
	return d.memory.share(d.remote, n)
}

// FreeMemory frees memory from AllocMemory. The regions registered in it
// must be deregistered first.
func (d *Device) FreeMemory(mem []byte) error {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	a, ok := d.memory.get(base)
	if !ok {
		return fmt.Errorf("free memory: not from AllocMemory: %w", ErrInvalidArgument)
	}
	if d.remote != nil {
		err := d.remote.call(func(c *client.Conn) error { return c.UnshareMemory(a.handle) })
		var ce *client.Error
		if errors.As(err, &ce) && ce.Errno == unix.EBUSY {
			return fmt.Errorf("free memory: regions are registered in it: %w", daemonErr(err))
		}
		// Any other failure (the daemon is gone) leaves nothing of it mapped there.
	}
	d.memory.remove(base)
	return unix.Munmap(a.mem)
}

// allocations are the device's AllocMemory blocks, by the address of their
// first byte.
type allocations struct {
	mu     sync.Mutex
	blocks map[uintptr]allocation
}

type allocation struct {
	mem    []byte
	handle uint32 // the daemon's, for shared memory
}

func (s *allocations) add(mem []byte, handle uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.blocks == nil {
		s.blocks = map[uintptr]allocation{}
	}
	s.blocks[uintptr(unsafe.Pointer(unsafe.SliceData(mem)))] = allocation{mem: mem, handle: handle}
}

func (s *allocations) get(base uintptr) (allocation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.blocks[base]
	return a, ok
}

func (s *allocations) remove(base uintptr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.blocks, base)
}

// share makes n bytes of a sealed memfd, maps it and shares it with the
// daemon.
func (s *allocations) share(r *remote, n int) ([]byte, error) {
	fd, err := unix.MemfdCreate("softnic-mr", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("alloc memory: memfd: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		return nil, fmt.Errorf("alloc memory: %w", err)
	}
	// Sealed so that neither side can shrink it under the other's copies.
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return nil, fmt.Errorf("alloc memory: seal memfd: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("alloc memory: %w", err)
	}
	var h uint32
	err = r.call(func(c *client.Conn) (err error) { h, err = c.ShareMemory(mem, fd); return err })
	if err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("alloc memory: %w", daemonErr(err))
	}
	s.add(mem, h)
	return mem, nil
}
