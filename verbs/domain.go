package verbs

import (
	"fmt"
	"sync"
)

// TD is a thread domain (ibv_td): a program's promise that one thread
// uses the objects of the parent domains holding it. mlx5 uses it to
// give them a doorbell of their own and drop its lock; softnic's posts
// keep theirs (an uncontended lock), so a TD changes no behaviour here.
type TD struct {
	dev     *Device
	mu      sync.Mutex
	parents int
	freed   bool
}

// AllocTD allocates a thread domain (ibv_alloc_td).
func (d *Device) AllocTD() *TD { return &TD{dev: d} }

// Dealloc frees the thread domain (ibv_dealloc_td); no parent domain may
// hold it.
func (td *TD) Dealloc() error {
	td.mu.Lock()
	defer td.mu.Unlock()
	switch {
	case td.freed:
		return fmt.Errorf("dealloc TD: already freed: %w", ErrInvalidArgument)
	case td.parents > 0:
		return fmt.Errorf("dealloc TD: %d parent domains hold it: %w", td.parents, ErrInvalidArgument)
	}
	td.freed = true
	return nil
}

// parentDomain is what a parent domain adds to the PD it contains.
type parentDomain struct {
	contained *PD
	td        *TD
	freed     bool
}

// AllocParentDomain makes a parent domain of pd and td (nil for none)
// (ibv_alloc_parent_domain): a PD usable wherever pd is (MRs, QPs, SRQs,
// AHs), whose objects are pd's. libibverbs' custom allocators have no
// counterpart: the Go API allocates no memory the device reaches.
func (d *Device) AllocParentDomain(pd *PD, td *TD) (*PD, error) {
	if pd == nil || pd.dev != d || pd.parent != nil {
		return nil, fmt.Errorf("alloc parent domain: a PD of this device is required: %w", ErrInvalidArgument)
	}
	if td != nil {
		td.mu.Lock()
		defer td.mu.Unlock()
		if td.dev != d || td.freed {
			return nil, fmt.Errorf("alloc parent domain: thread domain of another device or freed: %w", ErrInvalidArgument)
		}
		td.parents++
	}
	return &PD{dev: d, id: pd.id, ops: pd.ops, parent: &parentDomain{contained: pd, td: td}}, nil
}

// ParentDomain returns the PD and thread domain of a parent domain, and
// nil and nil for any other PD.
func (pd *PD) ParentDomain() (*PD, *TD) {
	if pd.parent == nil {
		return nil, nil
	}
	return pd.parent.contained, pd.parent.td
}

// DeallocParentDomain frees a parent domain (ibv_dealloc_pd of one),
// letting go of its thread domain; the objects made through it are its
// contained PD's and stay.
func (pd *PD) DeallocParentDomain() error {
	p := pd.parent
	if p == nil || p.freed {
		return fmt.Errorf("dealloc parent domain: not a parent domain, or freed: %w", ErrInvalidArgument)
	}
	p.freed = true
	if p.td != nil {
		p.td.mu.Lock()
		p.td.parents--
		p.td.mu.Unlock()
	}
	return nil
}

// domain is the PD whose objects pd makes: pd itself, or the one a
// parent domain contains.
func (pd *PD) domain() *PD {
	if pd.parent != nil {
		return pd.parent.contained
	}
	return pd
}
