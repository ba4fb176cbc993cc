package verbs

import (
	"fmt"
)

// Advice is an ibv_advise_mr advice (enum ibv_advise_mr_advice).
type Advice uint32

// The advices, with libibverbs' values.
const (
	// AdvicePrefetch faults the pages in for reading.
	AdvicePrefetch Advice = 0
	// AdvicePrefetchWrite faults them in for writing.
	AdvicePrefetchWrite Advice = 1
	// AdvicePrefetchNoFault maps only what is already there.
	AdvicePrefetchNoFault Advice = 2
)

// AdviseFlush is IBV_ADVISE_MR_FLAG_FLUSH: advise before returning, and
// report a fault that fails.
const AdviseFlush uint32 = 1 << 0

// AdviseMR gives advice about ranges of ODP regions of pd (ibv_advise_mr),
// as mlx5 takes it: every SGE's lkey must name an ODP region of pd, one
// that is writable for AdvicePrefetchWrite (else ErrNoRegion, ENOENT, with
// AdviseFlush; ErrInvalidArgument without it); with AdviseFlush a range
// outside its region, or memory not mapped as the advice needs, is
// ErrFault. Without AdviseFlush the prefetch's own outcome is not
// reported, as the kernel's queued work's is not. An unknown advice is
// ErrNotSupported, an unknown flag or no SGE ErrInvalidArgument.
func (pd *PD) AdviseMR(advice Advice, flags uint32, sges []SGE) error {
	switch {
	case flags&^AdviseFlush != 0, len(sges) == 0:
		return fmt.Errorf("advise MR: flags %#x, %d SGEs: %w", flags, len(sges), ErrInvalidArgument)
	case advice > AdvicePrefetchNoFault:
		return fmt.Errorf("advise MR: advice %d: %w", advice, ErrNotSupported)
	}
	return pd.ops.AdviseMR(advice, flags, sges)
}

func (p *enginePD) AdviseMR(advice Advice, flags uint32, sges []SGE) error {
	mrs := make([]*MR, len(sges))
	bad := -1
	// The key table changes under Group.Do only; read it the same way.
	p.e.group.Do(func() error {
		for i, s := range sges {
			if mrs[i] = p.e.mrs.lkeys[s.LKey]; !p.prefetchable(mrs[i], advice) && bad < 0 {
				bad = i
			}
		}
		return nil
	})
	switch {
	case bad >= 0 && flags&AdviseFlush != 0:
		return fmt.Errorf("advise MR: lkey %#x: %w", sges[bad].LKey, ErrNoRegion)
	case bad >= 0: // the kernel's queued prefetch refuses it before queueing
		return fmt.Errorf("advise MR: lkey %#x names no ODP region: %w", sges[bad].LKey, ErrInvalidArgument)
	}
	for i, s := range sges {
		if err := mrs[i].prefetch(advice, s); err != nil && flags&AdviseFlush != 0 {
			return err
		}
	}
	return nil
}

// prefetchable reports whether m is an ODP region of this PD that advice
// may be given for.
func (p *enginePD) prefetchable(m *MR, advice Advice) bool {
	return m != nil && m.valid && m.pd == p.pd && m.OnDemand() &&
		(advice != AdvicePrefetchWrite || writes(m.access))
}

// prefetch faults in (or, for AdvicePrefetchNoFault, only looks up) the
// pages of s, which must lie inside the region.
func (m *MR) prefetch(advice Advice, s SGE) error {
	if !m.holds(s.Addr, s.Length) {
		return fmt.Errorf("advise MR: %d bytes at %#x outside the region: %w", s.Length, s.Addr, ErrFault)
	}
	if m.pager == nil { // this process's own slice: its pages are there
		return nil
	}
	switch advice {
	case AdvicePrefetchNoFault:
		m.pager.Holds(s.Addr, uint64(s.Length), false)
		return nil
	case AdvicePrefetchWrite:
		if !m.pager.Mapped(s.Addr, uint64(s.Length), true) {
			return fmt.Errorf("advise MR: %d bytes at %#x not mapped writable: %w", s.Length, s.Addr, ErrFault)
		}
	default:
		if !m.pager.Mapped(s.Addr, uint64(s.Length), false) {
			return fmt.Errorf("advise MR: %d bytes at %#x not mapped: %w", s.Length, s.Addr, ErrFault)
		}
	}
	return nil
}
