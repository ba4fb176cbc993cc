package verbs

import (
	"fmt"
	"unsafe"
)

// ReregFlags say what ibv_rereg_mr changes (enum ibv_rereg_mr_flags).
type ReregFlags uint32

// The rereg flags, with libibverbs' values.
const (
	ReregChangeTranslation ReregFlags = 1 << 0
	ReregChangePD          ReregFlags = 1 << 1
	ReregChangeAccess      ReregFlags = 1 << 2
	reregAll                          = ReregChangeTranslation | ReregChangePD | ReregChangeAccess
)

// Rereg changes the region's memory, PD or access rights in place
// (ibv_rereg_mr), as flags say: buf for ReregChangeTranslation, pd for
// ReregChangePD, access for ReregChangeAccess. The keys stay, as mlx5's
// in-place rereg (UMR) keeps the mkey; work requests already posted with
// the old translation, PD or rights fail as any others would. The checks
// are libibverbs' and the kernel's: no flag, an unknown one, a
// translation without memory, access given without ReregChangeAccess, a
// PD of another device: ErrInvalidArgument.
func (m *MR) Rereg(flags ReregFlags, pd *PD, buf []byte, access Access) error {
	if err := m.CheckRereg(flags, pd, uint64(len(buf)), access); err != nil {
		return err
	}
	return m.ops.Rereg(m, flags, pd, buf, access)
}

// CheckRereg refuses what Rereg refuses before changing anything, for a
// backend that must check before it places the new memory (the daemon's).
func (m *MR) CheckRereg(flags ReregFlags, pd *PD, length uint64, access Access) error {
	switch {
	case flags == 0 || flags&^reregAll != 0:
		return fmt.Errorf("rereg MR: flags %#x: %w", flags, ErrInvalidArgument)
	case flags&ReregChangeTranslation != 0 && length == 0:
		return fmt.Errorf("rereg MR: a translation of no bytes: %w", ErrInvalidArgument)
	case access != 0 && flags&ReregChangeAccess == 0:
		return fmt.Errorf("rereg MR: access without IBV_REREG_MR_CHANGE_ACCESS: %w", ErrInvalidArgument)
	case flags&ReregChangePD != 0 && (pd == nil || pd.dev != m.pd.dev):
		return fmt.Errorf("rereg MR: PD of another device: %w", ErrInvalidArgument)
	}
	if flags&ReregChangeAccess != 0 {
		return checkAccess(access)
	}
	return nil
}

// Placement is where a region's bytes are, for ReregAt: a slice of this
// process (Buf, known to SGEs and peers at Addr), or Length bytes at
// Addr of another process's memory (Proc, with Pager if the region is
// paged on demand).
type Placement struct {
	Buf          []byte
	Proc         ProcessMemory
	Pager        Pager
	Addr, Length uint64
}

// ReregAt is Rereg for the daemon: a new translation is given as a
// Placement the caller checked (mapped, shared or not), and pager, if
// not nil, becomes the region's pager when the translation stays but the
// access makes it ODP.
func (m *MR) ReregAt(flags ReregFlags, pd *PD, at Placement, access Access) error {
	if err := m.CheckRereg(flags, pd, max(at.Length, uint64(len(at.Buf))), access); err != nil {
		return err
	}
	r, ok := m.ops.(*engineMR)
	if !ok {
		return fmt.Errorf("rereg MR: only on a device opened in process: %w", ErrInvalidArgument)
	}
	return r.change(flags, pd, &at, access)
}

func (r *engineMR) Rereg(m *MR, flags ReregFlags, pd *PD, buf []byte, access Access) error {
	var at *Placement
	if flags&ReregChangeTranslation != 0 {
		if m.proc != nil {
			return fmt.Errorf("rereg MR: a new translation of another process's region: %w", ErrInvalidArgument)
		}
		at = &Placement{Buf: buf, Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), Length: uint64(len(buf))}
		if (flags&ReregChangeAccess != 0 && access&AccessOnDemand == 0) ||
			(flags&ReregChangeAccess == 0 && !m.OnDemand()) {
			populate(buf)
		}
	}
	return r.change(flags, pd, at, access)
}

// change applies a rereg while no engine runs.
func (r *engineMR) change(flags ReregFlags, pd *PD, at *Placement, access Access) error {
	m := r.m
	if flags&ReregChangePD != 0 {
		if _, err := enginePDOf(pd, "rereg MR"); err != nil {
			return err
		}
	}
	return r.e.group.Do(func() error {
		if !m.valid {
			return fmt.Errorf("rereg MR: deregistered: %w", ErrInvalidArgument)
		}
		if flags&ReregChangeTranslation != 0 && at != nil {
			m.buf, m.proc, m.pager, m.addr, m.size = at.Buf, at.Proc, at.Pager, at.Addr, at.Length
			if at.Buf != nil {
				m.size = uint64(len(at.Buf))
			}
			m.vec, _ = at.Proc.(vectorMemory)
		} else if flags&ReregChangeTranslation == 0 && at != nil && at.Pager != nil {
			m.pager = at.Pager
		}
		if flags&ReregChangePD != 0 {
			m.pd = pd
		}
		if flags&ReregChangeAccess != 0 {
			m.access = access
			if access&AccessOnDemand == 0 && m.proc != nil {
				m.pager = nil // checked by the caller when it left ODP
			}
		}
		return nil
	})
}
