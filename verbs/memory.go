package verbs

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// AllocMemory returns n bytes of zeroed, page-aligned memory that the
// device reaches at the cost of a plain copy. Any memory can be
// registered; this is the memory to register when the device is reached
// through a daemon (client.DialDevice): the daemon maps it too (a sealed memfd shared
// over the control socket), so it moves payloads to and from regions in
// it as an in-process device does, where for other memory it needs a
// read or write of the client's /proc/self/mem per batch of packets. On an in-process
// device it is anonymous memory. Free it with FreeMemory.
func (d *Device) AllocMemory(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("alloc memory: %d bytes: %w", n, ErrInvalidArgument)
	}
	mem, h, err := d.ops.AllocMemory(n)
	if err != nil {
		return nil, err
	}
	d.memory.add(mem, h)
	return mem, nil
}

// FreeMemory frees memory from AllocMemory. The regions registered in it
// must be deregistered first.
func (d *Device) FreeMemory(mem []byte) error {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	a, ok := d.memory.get(base)
	if !ok {
		return fmt.Errorf("free memory: not from AllocMemory: %w", ErrInvalidArgument)
	}
	if err := d.ops.FreeMemory(a.mem, a.handle); err != nil {
		return err
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
