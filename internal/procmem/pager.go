package procmem

import (
	"sort"
	"sync"
)

// Pager is what an on-demand paging region (IBV_ACCESS_ON_DEMAND) knows of
// a process's address space: the ranges it found mapped, as a NIC's page
// table holds the pages it faulted in. A region of that kind is
// registered without looking at its memory, so each access asks the
// pager first; a range it does not hold is a page fault, which reads the
// maps descriptor again. An access to memory not mapped with the rights it
// needs fails (the caller's NAK or error completion), never reaching
// memory the process did not map so: /proc/PID/mem itself writes through
// read-only mappings (FOLL_FORCE), so this check is what keeps a peer's
// WRITE out of the process's text.
//
// The table is bounded (maxPagerRanges), as a NIC's is: past it the pager
// forgets all and faults again, which costs time, never memory. It is not
// told of munmap (no MMU notifier reaches the daemon): a range unmapped
// after a fault stays known, and the access then fails in the read or
// write of the mem descriptor, as a non-ODP region's does.
type Pager struct {
	p      *Process
	backed func(Mapping) bool

	mu     sync.Mutex
	ranges []pagerRange // sorted by start, not overlapping
}

// pagerRange is a run of mappings the pager found readable and backed as
// it needs, and whether all of it is writable too.
type pagerRange struct {
	start, end uint64
	write      bool
}

// maxPagerRanges bounds the ranges a pager holds (24 bytes each).
const maxPagerRanges = 1024

// NewPager returns p's pager; backed, if not nil, must accept every
// mapping an access touches (the daemon's file systems whose faults end).
func NewPager(p *Process, backed func(Mapping) bool) *Pager {
	return &Pager{p: p, backed: backed}
}

// Mapped reports whether the n bytes at va are mapped readable, and
// writable if write, faulting the range in (reading the maps) if the pager
// did not hold it. With fault false it only looks at what it holds
// (IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT).
func (g *Pager) Mapped(va, n uint64, write bool) bool {
	return g.lookup(va, n, write, true)
}

// Holds is Mapped without a fault.
func (g *Pager) Holds(va, n uint64, write bool) bool {
	return g.lookup(va, n, write, false)
}

func (g *Pager) lookup(va, n uint64, write, fault bool) bool {
	if n == 0 {
		return true
	}
	if va+n < va {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.covered(va, va+n, write) {
		return true
	}
	if !fault || !g.fault(va, va+n) {
		return false
	}
	return g.covered(va, va+n, write)
}

// covered reports whether the held ranges cover [va, end).
func (g *Pager) covered(va, end uint64, write bool) bool {
	i := sort.Search(len(g.ranges), func(i int) bool { return g.ranges[i].end > va })
	for ; i < len(g.ranges) && va < end; i++ {
		r := g.ranges[i]
		if r.start > va || (write && !r.write) {
			return false
		}
		va = r.end
	}
	return va >= end
}

// fault reads the maps and takes in the mappings that touch [va, end),
// merged into runs; false if the maps could not be read.
func (g *Pager) fault(va, end uint64) bool {
	data, err := g.p.readMaps()
	if err != nil {
		return false
	}
	maps, err := ParseMaps(data)
	if err != nil {
		return false
	}
	var found []pagerRange
	for _, m := range maps {
		if m.End <= va || m.Start >= end || !m.Readable || (g.backed != nil && !g.backed(m)) {
			continue
		}
		if k := len(found) - 1; k >= 0 && found[k].end == m.Start && found[k].write == m.Write {
			found[k].end = m.End
			continue
		}
		found = append(found, pagerRange{m.Start, m.End, m.Write})
	}
	for _, r := range found {
		g.insert(r)
	}
	return len(found) > 0
}

// insert adds r, dropping the held ranges it overlaps (the maps just
// read are newer), and forgets everything once the table is full.
func (g *Pager) insert(r pagerRange) {
	kept := g.ranges[:0:0]
	for _, h := range g.ranges {
		if h.end <= r.start || h.start >= r.end {
			kept = append(kept, h)
		}
	}
	if len(kept) >= maxPagerRanges {
		kept = kept[:0]
	}
	i := sort.Search(len(kept), func(i int) bool { return kept[i].start >= r.end })
	kept = append(kept, pagerRange{})
	copy(kept[i+1:], kept[i:])
	kept[i] = r
	g.ranges = kept
}

// Forget drops every range held, as a region's invalidation does.
func (g *Pager) Forget() {
	g.mu.Lock()
	g.ranges = nil
	g.mu.Unlock()
}
