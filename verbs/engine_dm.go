package verbs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// engineDM is device memory of an in-process device: anonymous pages,
// counted against the device's MaxDMSize.
type engineDM struct {
	e      *engine
	mem    []byte
	length uint64
}

func (e *engine) AllocDM(length uint64, _ int) ([]byte, DMOps, error) {
	for {
		used := e.dmUsed.Load()
		if used+length > MaxDMSize {
			return nil, nil, fmt.Errorf("%d bytes, %d of %d taken: %w", length, used, MaxDMSize, ErrNoDeviceMemory)
		}
		if e.dmUsed.CompareAndSwap(used, used+length) {
			break
		}
	}
	page := uint64(os.Getpagesize())
	mem, err := unix.Mmap(-1, 0, int((length+page-1)&^(page-1)), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		e.dmUsed.Add(-length)
		return nil, nil, err
	}
	return mem, &engineDM{e: e, mem: mem, length: length}, nil
}

func (m *engineDM) Free() error {
	if err := unix.Munmap(m.mem); err != nil {
		return err
	}
	m.e.dmUsed.Add(-m.length)
	return nil
}

// RegDMMR registers the range as a region at address 0.
func (p *enginePD) RegDMMR(dm *DM, off, n uint64, access Access) (*MR, error) {
	return p.regBuf(dm.mem[off:off+n:off+n], 0, access)
}
