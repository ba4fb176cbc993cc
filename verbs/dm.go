package verbs

import (
	"errors"
	"fmt"
	"sync"
)

// MaxDMSize is a device's memory (ibv_alloc_dm), shared by all its users,
// as a NIC's on-chip memory is: 256 KiB, what a softnic daemon's device
// offers too (the host interface's SN_MAX_DM_SIZE).
const MaxDMSize = 256 << 10

// DMMaxLogAlign is the largest alignment (log2 bytes) AllocDM grants:
// every allocation is a mapping of its own, page aligned.
const DMMaxLogAlign = 12

// ErrNoDeviceMemory is AllocDM's error when the device's memory (or the
// user's part of it, through a daemon) is taken.
var ErrNoDeviceMemory = errors.New("verbs: device memory exhausted")

// DM is device memory (ibv_dm): memory the device holds, which the
// program reaches only by CopyTo and CopyFrom and the transport through
// the zero-based regions of PD.RegDMMR. Through a daemon it is the
// daemon's memory, mapped in both.
type DM struct {
	dev    *Device
	mem    []byte // at least length bytes
	length uint64
	ops    DMOps

	mu    sync.Mutex
	mrs   int // regions registered in it
	freed bool
}

// DMOps is device memory's backend.
type DMOps interface {
	// Free gives the memory back; no region is registered in it.
	Free() error
}

// AllocDM allocates length bytes of device memory aligned to 2^logAlign
// bytes (ibv_alloc_dm).
func (d *Device) AllocDM(length uint64, logAlign int) (*DM, error) {
	if length == 0 || length > d.Query().MaxDMSize || logAlign < 0 || logAlign > DMMaxLogAlign {
		return nil, fmt.Errorf("alloc DM: %d bytes aligned to 2^%d (device: %d): %w", length, logAlign,
			d.Query().MaxDMSize, ErrInvalidArgument)
	}
	mem, ops, err := d.ops.AllocDM(length, logAlign)
	if err != nil {
		return nil, fmt.Errorf("alloc DM: %w", err)
	}
	return &DM{dev: d, mem: mem[:length:length], length: length, ops: ops}, nil
}

// Len returns the allocation's length.
func (dm *DM) Len() uint64 { return dm.length }

// checkRange refuses what ConnectX refuses: a range past the end, or an
// offset or length not a multiple of 4 bytes (its copies are of words).
func (dm *DM) checkRange(off uint64, n int) error {
	if off > dm.length || uint64(n) > dm.length-off || (off|uint64(n))&3 != 0 {
		return fmt.Errorf("device memory: %d bytes at %d of %d: %w", n, off, dm.length, ErrInvalidArgument)
	}
	return nil
}

// CopyTo copies src into the memory at off (ibv_memcpy_to_dm).
func (dm *DM) CopyTo(off uint64, src []byte) error {
	if err := dm.checkRange(off, len(src)); err != nil {
		return err
	}
	copy(dm.mem[off:], src)
	return nil
}

// CopyFrom copies len(dst) bytes of the memory at off into dst
// (ibv_memcpy_from_dm).
func (dm *DM) CopyFrom(dst []byte, off uint64) error {
	if err := dm.checkRange(off, len(dst)); err != nil {
		return err
	}
	copy(dst, dm.mem[off:])
	return nil
}

// Free frees the memory (ibv_free_dm); the regions in it must be
// deregistered first.
func (dm *DM) Free() error {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	switch {
	case dm.freed:
		return fmt.Errorf("free DM: already freed: %w", ErrInvalidArgument)
	case dm.mrs > 0:
		return fmt.Errorf("free DM: %d regions are registered in it: %w", dm.mrs, ErrInvalidArgument)
	}
	if err := dm.ops.Free(); err != nil {
		return fmt.Errorf("free DM: %w", err)
	}
	dm.freed = true
	return nil
}

// dmAccess are the rights a DM region may have (mlx5's).
const dmAccess = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessZeroBased

// RegDMMR registers n bytes of dm at off as a region whose addresses
// start at 0 there (ibv_reg_dm_mr): access must have AccessZeroBased, as
// the kernel's uverbs requires. Local SGEs and peers' RDMA READ and WRITE
// name offsets into it.
func (pd *PD) RegDMMR(dm *DM, off, n uint64, access Access) (*MR, error) {
	if dm == nil || dm.dev != pd.dev {
		return nil, fmt.Errorf("register DM MR: device memory of another device: %w", ErrInvalidArgument)
	}
	if access&AccessZeroBased == 0 || access&^dmAccess != 0 {
		return nil, fmt.Errorf("register DM MR: access %#x (ZERO_BASED required): %w", access, ErrInvalidArgument)
	}
	access &^= AccessZeroBased
	if err := checkAccess(access); err != nil {
		return nil, err
	}
	if off > dm.length || n > dm.length-off {
		return nil, fmt.Errorf("register DM MR: %d bytes at %d of %d: %w", n, off, dm.length, ErrInvalidArgument)
	}
	dm.mu.Lock()
	defer dm.mu.Unlock()
	if dm.freed {
		return nil, fmt.Errorf("register DM MR: device memory freed: %w", ErrInvalidArgument)
	}
	mr, err := pd.ops.RegDMMR(dm, off, n, access)
	if err != nil {
		return nil, err
	}
	mr.dm = dm
	dm.mrs++
	return mr, nil
}

// Bytes returns the memory itself, for a backend's RegDMMR.
func (dm *DM) Bytes() []byte { return dm.mem }

// Ops returns the memory's backend.
func (dm *DM) Ops() DMOps { return dm.ops }

// mrGone notes that a region in the memory was deregistered.
func (dm *DM) mrGone() {
	dm.mu.Lock()
	dm.mrs--
	dm.mu.Unlock()
}
