package verbs

import (
	"fmt"
	"sync"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// MW is a memory window (ibv_mw): a range of a region, with rights of its
// own, that a peer reaches through the window's rkey. Binding it is a
// work request, in send queue order: QP.BindMW for a type 1 window, a
// SendWR with WRBindMW (and Bind) for a type 2 window, which is then
// bound to the QP that posted it.
type MW struct {
	pd  *PD
	typ MWType
	ops MWOps
	// rkey is the window's rkey as this process knows it: the one it
	// was allocated with, then that of each QP.BindMW posted (mw->rkey).
	mu   sync.Mutex
	rkey uint32
}

// MWType is a memory window's type (ibv_mw_type).
type MWType = ibv.MWType

// MWBind is a bind's window, rkey, range and rights (ibv_mw_bind_info,
// with the rkey of ibv_send_wr.bind_mw).
type MWBind = ibv.MWBind

// Memory window types.
const (
	MWType1 = ibv.MWType1
	MWType2 = ibv.MWType2
)

// IncRKey returns the rkey to bind a window with next (ibv_inc_rkey).
func IncRKey(rkey uint32) uint32 { return ibv.IncRKey(rkey) }

// MWOps is a memory window's backend.
type MWOps interface {
	Dealloc() error
}

// AllocMW allocates a memory window of type typ in pd (ibv_alloc_mw). It
// grants nothing until bound.
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	if typ != MWType1 && typ != MWType2 {
		return nil, fmt.Errorf("allocate MW: type %d: %w", typ, ErrInvalidArgument)
	}
	mw := &MW{pd: pd, typ: typ}
	ops, rkey, err := pd.ops.AllocMW(mw, typ)
	if err != nil {
		return nil, err
	}
	mw.ops, mw.rkey = ops, rkey
	return mw, nil
}

// RKey returns the window's rkey: for a type 1 window that of its last
// QP.BindMW, for a type 2 window the one it was allocated with (its binds
// name their own, IncRKey of the last).
func (mw *MW) RKey() uint32 {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	return mw.rkey
}

// Type returns the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// PD returns the window's protection domain.
func (mw *MW) PD() *PD { return mw.pd }

// Dealloc deallocates the window (ibv_dealloc_mw), unbinding it: when it
// returns, no peer reaches memory through it.
func (mw *MW) Dealloc() error { return mw.ops.Dealloc() }

// BindMW binds the type 1 window mw to length bytes at addr of mr, with
// rights access, by a work request on q (ibv_bind_mw); a length of 0
// unbinds it. It returns the rkey the window gets, which RKey returns
// from now on; the bind completes (opcode BIND_MW) as the work request
// id, in send queue order, and fails with MW_BIND_ERR if it breaks a rule
// (the region lacks AccessMWBind, the range is outside it, ...).
func (q *QP) BindMW(mw *MW, id uint64, flags SendFlags, mr *MR, addr, length uint64, access Access) (uint32, error) {
	if mw.typ != MWType1 {
		return 0, fmt.Errorf("bind MW: a type %d window is bound by a BIND_MW work request: %w", mw.typ, ErrInvalidArgument)
	}
	if mr == nil || mr.pd != mw.pd {
		return 0, fmt.Errorf("bind MW: region of another PD: %w", ErrInvalidArgument)
	}
	mw.mu.Lock()
	defer mw.mu.Unlock()
	rkey := IncRKey(mw.rkey)
	wr := SendWR{ID: id, Opcode: ibv.WRBindMW, Flags: flags,
		Bind: MWBind{RKey: rkey, LKey: mr.LKey(), Addr: addr, Length: length, Access: access}}
	if err := q.PostSend(&wr); err != nil {
		return 0, err
	}
	mw.rkey = rkey
	return rkey, nil
}
