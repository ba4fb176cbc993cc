package verbs

import (
	"fmt"
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// A window's rkey is its key index (the upper 24 bits), fixed at
// allocation and unique among the device's windows and regions' rkeys,
// and a key (the low 8 bits) each bind chooses (IBA 10.6.7.2). The
// engines find a window by index without locks: the table changes only
// under Group.Do (allocation, deallocation); what a bind or an
// invalidation changes is the window's binding, one atomic pointer.

// engineMW is a memory window of an in-process device.
type engineMW struct {
	e     *engine
	pd    *PD
	typ   MWType
	index uint32
	// bound is the window's binding; nil while unbound (type 1) or free
	// (type 2, invalidated). A bind of a type 2 window takes it from nil
	// only, an invalidation gives it back: compare-and-swaps, as either
	// may run on any engine.
	bound atomic.Pointer[mwBinding]
	// freed is set by Dealloc, under Group.Do.
	freed bool
}

// mwBinding is one bind of a window: immutable, so that an engine that
// loaded it sees it whole. It is the window as the responder holds it
// between packets (ibtransport.Region), valid while it is the window's
// binding.
type mwBinding struct {
	w      *engineMW
	mr     *MR
	rkey   uint32
	addr   uint64
	length uint64
	access Access
	qp     *ibtransport.QP // type 2: the QP it is bound to
}

func (p *enginePD) AllocMW(mw *MW, typ MWType) (MWOps, uint32, error) {
	d := p.e
	w := &engineMW{e: d, pd: p.pd, typ: typ}
	var rkey uint32
	err := d.group.Do(func() error {
		for {
			rkey = d.keys.next()
			if rkey>>8 != 0 && !d.mrs.indexUsed(rkey>>8) {
				break
			}
		}
		w.index = rkey >> 8
		d.mrs.mws[w.index] = w
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("allocate MW: %w", err)
	}
	return w, rkey, nil
}

// Dealloc unbinds the window and forgets its index.
func (w *engineMW) Dealloc() error {
	d := w.e
	return d.group.Do(func() error {
		if w.freed {
			return fmt.Errorf("deallocate MW: %w", ErrInvalidArgument)
		}
		w.freed = true
		w.unbind(w.bound.Swap(nil))
		delete(d.mrs.mws, w.index)
		return nil
	})
}

// unbind drops b's hold on its region.
func (w *engineMW) unbind(b *mwBinding) {
	if b != nil {
		b.mr.windows.Add(-1)
	}
}

// BindMW executes a bind (ibtransport.Memory), with rxe's checks
// (rxe_check_bind_mw): IBA C10-72 to C10-75 and o10-37.2.
func (p *enginePD) BindMW(qp *ibtransport.QP, b *ibv.MWBind) bool {
	w := p.e.mrs.mws[b.RKey>>8]
	if w == nil || w.pd != p.pd || b.Access&^(ibv.AccessRemote|ibv.AccessLocalWrite) != 0 {
		return false
	}
	cur := w.bound.Load()
	if w.typ == MWType2 && (cur != nil || b.Length == 0) {
		// A type 2 window is bound only when free, and never to nothing.
		return false
	}
	var nb *mwBinding
	if b.Length != 0 {
		mr := p.e.mrs.lkeys[b.LKey]
		if !p.bindable(mr, b) {
			return false
		}
		nb = &mwBinding{w: w, mr: mr, rkey: b.RKey, addr: b.Addr, length: b.Length, access: b.Access}
		if w.typ == MWType2 {
			nb.qp = qp
		}
		mr.windows.Add(1)
	}
	if !w.bound.CompareAndSwap(cur, nb) {
		// Invalidated or bound by another engine meanwhile.
		w.unbind(nb)
		return false
	}
	w.unbind(cur)
	return true
}

// bindable reports whether b may bind a window to mr.
func (p *enginePD) bindable(mr *MR, b *ibv.MWBind) bool {
	switch {
	case mr == nil || !mr.valid || mr.pd != p.pd:
		return false
	case mr.access&ibv.AccessMWBind == 0:
		return false
	case b.Access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && mr.access&AccessLocalWrite == 0:
		return false
	}
	return b.Addr >= mr.addr && b.Addr-mr.addr <= mr.size && b.Length <= mr.size-(b.Addr-mr.addr)
}

// window returns the binding an access through rkey by a QP of the PD
// (qp) may use for n bytes at va with rights a; nil if none.
func (p *enginePD) window(qp *ibtransport.QP, rkey uint32, va uint64, n uint32, a Access) *mwBinding {
	w := p.e.mrs.mws[rkey>>8]
	if w == nil || w.pd != p.pd {
		return nil
	}
	b := w.bound.Load()
	switch {
	case b == nil || b.rkey != rkey || b.access&a != a:
		return nil
	case w.typ == MWType2 && b.qp != qp:
		return nil
	case va < b.addr || va-b.addr > b.length || uint64(n) > b.length-(va-b.addr):
		return nil
	}
	return b
}

// invalidateMW invalidates the type 2 window bound with rkey (LOCAL_INV,
// or SEND_WITH_INV arriving on qp, remote, which must be the window's QP).
func (p *enginePD) invalidateMW(qp *ibtransport.QP, rkey uint32, remote bool) bool {
	w := p.e.mrs.mws[rkey>>8]
	if w == nil || w.pd != p.pd || w.typ != MWType2 {
		return false // o10-37.2.26: a type 1 window is not invalidated
	}
	b := w.bound.Load()
	if b == nil || b.rkey != rkey || (remote && b.qp != qp) {
		return false
	}
	if !w.bound.CompareAndSwap(b, nil) {
		return false
	}
	w.unbind(b)
	return true
}

// current reports whether b is still its window's binding: an access
// between packets fails once the window was invalidated or rebound.
func (b *mwBinding) current() bool { return b.w.bound.Load() == b }

func (b *mwBinding) ReadAt(dst []byte, va uint64) bool {
	return b.current() && (*localView)(b.mr).ReadAt(dst, va)
}

func (b *mwBinding) WriteAt(src []byte, va uint64) bool {
	return b.current() && (*localView)(b.mr).WriteAt(src, va)
}

func (b *mwBinding) Atomic(va uint64, cas bool, compare, swapAdd uint64) (uint64, bool) {
	if !b.current() {
		return 0, false
	}
	return (*localView)(b.mr).Atomic(va, cas, compare, swapAdd)
}

func (b *mwBinding) AtomicWrite(va uint64, w [8]byte) bool {
	return b.current() && (*localView)(b.mr).AtomicWrite(va, w)
}

func (b *mwBinding) RemoteWritten() { b.mr.remoteWrites.Add(1) }

// procWindowView is a binding over a region in another process's memory
// that copies in batches (procLocalView).
type procWindowView mwBinding

func (v *procWindowView) Deferred(n int, va uint64) (ibtransport.VectorMemory, uint64, bool) {
	b := (*mwBinding)(v)
	if !b.current() {
		return nil, 0, false
	}
	return (*procLocalView)(b.mr).Deferred(n, va)
}

func (v *procWindowView) ReadAt(dst []byte, va uint64) bool { return (*mwBinding)(v).ReadAt(dst, va) }
func (v *procWindowView) WriteAt(src []byte, va uint64) bool {
	return (*mwBinding)(v).WriteAt(src, va)
}
func (v *procWindowView) Atomic(va uint64, cas bool, compare, swapAdd uint64) (uint64, bool) {
	return (*mwBinding)(v).Atomic(va, cas, compare, swapAdd)
}
func (v *procWindowView) AtomicWrite(va uint64, w [8]byte) bool {
	return (*mwBinding)(v).AtomicWrite(va, w)
}
func (v *procWindowView) RemoteWritten() { (*mwBinding)(v).RemoteWritten() }
