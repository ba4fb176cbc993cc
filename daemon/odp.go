package daemon

import (
	"fmt"
	"math"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/internal/procmem"
	"github.com/softnic/softnic/verbs"
)

// On-demand paging and rereg. An ODP region (IBV_ACCESS_ON_DEMAND) is
// registered without looking at its memory, as the kernel's
// ib_umem_odp_get does: the range may be unmapped, and an implicit region
// (address 0, length 2^64-1) is the whole address space. Its pages are
// looked up as the engines reach them (the session's procmem.Pager, a
// page table of at most 1024 ranges), and an access to memory not mapped
// with the rights it needs fails: a local protection error, or a remote
// access error NAK.
//
// Memory: the kernel does not count ODP regions against RLIMIT_MEMLOCK,
// as nothing of them is pinned, and neither does the daemon: it holds no
// memory for any process region (it reads and writes the mem descriptor),
// so an implicit region costs it one region (Limits.MRs) and the pager's
// table, whatever the address space holds.

// writeAccess reports whether access lets the region be written.
func writeAccess(access verbs.Access) bool {
	return access&(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0
}

// place registers length bytes at addr in pd: inside memory the client
// shared, or through the mem descriptor; checked as mapped and counted
// against RLIMIT_MEMLOCK unless ODP. It returns the region, the bytes it
// counts and the shared memory's handle (0 if none).
func (ss *session) place(pd *verbs.PD, addr, length uint64, access verbs.Access) (*verbs.MR, int64, uint32, error) {
	odp := access&verbs.AccessOnDemand != 0
	implicit := addr == 0 && length == math.MaxUint64
	if implicit && !odp {
		return nil, 0, 0, fmt.Errorf("the whole address space without IBV_ACCESS_ON_DEMAND: %w", unix.EFAULT)
	}
	if !implicit {
		if sh, shared := ss.sharedFor(addr, length); shared != nil {
			mr, err := ss.regSharedMR(pd, shared, addr, length, access)
			return mr, 0, sh, err
		}
	}
	if odp {
		mr, err := pd.RegProcessODP(ss.proc, ss.odpPager(), addr, length, access)
		return mr, 0, 0, err
	}
	if err := ss.proc.CheckMappedBy(addr, length, writeAccess(access), registrable); err != nil {
		return nil, 0, 0, err
	}
	pinned := pinnedBytes(addr, length)
	if err := ss.pin(pinned); err != nil {
		return nil, 0, 0, err
	}
	mr, err := pd.RegProcessMemory(ss.proc, addr, length, access)
	if err != nil {
		ss.pinned -= pinned
		return nil, 0, 0, err
	}
	return mr, pinned, 0, nil
}

// odpPager returns the session's pager, made with its first ODP region.
func (ss *session) odpPager() *procmem.Pager {
	if ss.pager == nil {
		ss.pager = procmem.NewPager(ss.proc, registrable)
	}
	return ss.pager
}

// adviseMR is ibv_advise_mr on the session's PD.
func (ss *session) adviseMR(req hostif.AdviseMRRequest) error {
	pd := ss.pds[req.PD]
	if pd == nil {
		return fmt.Errorf("PD %d: %w", req.PD, errNoObject)
	}
	if req.Count == 0 || req.Count > hostif.AdviseSGEs {
		return fmt.Errorf("advise_mr with %d SGEs: %w", req.Count, unix.EINVAL)
	}
	sges := make([]verbs.SGE, req.Count)
	for i := range sges {
		s := req.SGE[i]
		sges[i] = verbs.SGE{Addr: s.Addr, Length: s.Length, LKey: s.LKey}
	}
	return pd.AdviseMR(verbs.Advice(req.Advice), req.Flags, sges)
}

// reregMR is ibv_rereg_mr: the region changes in place and keeps its
// keys (verbs.MR.Rereg). A new translation or leaving ODP is checked and
// counted as a registration is, and what the old one counted is given
// back.
func (ss *session) reregMR(req hostif.ReregMRRequest) (any, error) {
	hm := ss.mrs[req.Handle]
	if hm == nil {
		return nil, fmt.Errorf("MR %d: %w", req.Handle, errNoObject)
	}
	flags := verbs.ReregFlags(req.Flags)
	if flags == 0 || flags&^(verbs.ReregChangeTranslation|verbs.ReregChangePD|verbs.ReregChangeAccess) != 0 {
		return nil, fmt.Errorf("rereg_mr flags %#x: %w", req.Flags, unix.EINVAL)
	}
	mr := hm.mr
	pdHandle := ss.mrPD[req.Handle]
	var pd *verbs.PD
	if flags&verbs.ReregChangePD != 0 {
		if pd = ss.pds[req.PD]; pd == nil {
			return nil, fmt.Errorf("PD %d: %w", req.PD, unix.EINVAL)
		}
		pdHandle = req.PD
	}
	newLength := uint64(1) // only a new translation's length is checked
	if flags&verbs.ReregChangeTranslation != 0 {
		newLength = req.Length
	}
	if err := mr.CheckRereg(flags, pd, newLength, verbs.Access(req.Access)); err != nil {
		return nil, err
	}
	access := mr.Access()
	if flags&verbs.ReregChangeAccess != 0 {
		access = verbs.Access(req.Access)
	}
	addr, length := mr.Addr(), uint64(mr.Len())
	if flags&verbs.ReregChangeTranslation != 0 {
		addr, length = req.Addr, req.Length
	}
	_, shared := ss.mrShared[req.Handle]
	if shared && flags&verbs.ReregChangeTranslation == 0 || !ss.replaces(mr, flags, access) {
		// The memory stays as it is, checked and counted: the PD or the
		// rights change only, as mlx5's UMR rereg changes them.
		if err := mr.ReregAt(flags, pd, verbs.Placement{}, verbs.Access(req.Access)); err != nil {
			return nil, err
		}
		ss.mrPD[req.Handle] = pdHandle
		return hostif.RegMRReply{Handle: req.Handle, LKey: mr.LKey(), RKey: mr.RKey()}, nil
	}
	at, pinned, sh, err := ss.placement(addr, length, access)
	if err != nil {
		return nil, err
	}
	moved := flags | verbs.ReregChangeTranslation // the placement is the new one
	if err := mr.ReregAt(moved, pd, at, verbs.Access(req.Access)); err != nil {
		ss.pinned -= pinned
		return nil, err
	}
	ss.pinned -= hm.pinned
	hm.pinned = pinned
	if old, ok := ss.mrShared[req.Handle]; ok {
		ss.shared[old].mrs--
		delete(ss.mrShared, req.Handle)
	}
	if sh != 0 {
		ss.shared[sh].mrs++
		ss.mrShared[req.Handle] = sh
	}
	ss.mrPD[req.Handle] = pdHandle
	return hostif.RegMRReply{Handle: req.Handle, LKey: mr.LKey(), RKey: mr.RKey()}, nil
}

// replaces reports whether a rereg of mr to access needs its memory
// checked and counted again: a new translation, a move into or out of
// ODP, or a write right the region lacked (the kernel pins it again
// writable, which a read-only mapping refuses).
func (ss *session) replaces(mr *verbs.MR, flags verbs.ReregFlags, access verbs.Access) bool {
	odp := access&verbs.AccessOnDemand != 0
	return flags&verbs.ReregChangeTranslation != 0 || odp != mr.OnDemand() ||
		(!odp && writeAccess(access) && !writeAccess(mr.Access()))
}

// placement is place's checks and accounting for a region's new
// translation or access, without registering it.
func (ss *session) placement(addr, length uint64, access verbs.Access) (verbs.Placement, int64, uint32, error) {
	implicit := addr == 0 && length == math.MaxUint64
	odp := access&verbs.AccessOnDemand != 0
	if implicit && !odp {
		return verbs.Placement{}, 0, 0, fmt.Errorf("the whole address space without IBV_ACCESS_ON_DEMAND: %w", unix.EFAULT)
	}
	if addr+length < addr && !implicit {
		return verbs.Placement{}, 0, 0, fmt.Errorf("%d bytes at %#x: %w", length, addr, unix.EINVAL)
	}
	if !implicit {
		if sh, m := ss.sharedFor(addr, length); m != nil {
			off := addr - m.addr
			return verbs.Placement{Buf: m.mem[off : off+length : off+length], Addr: addr, Length: length}, 0, sh, nil
		}
	}
	if odp {
		return verbs.Placement{Proc: ss.proc, Pager: ss.odpPager(), Addr: addr, Length: length}, 0, 0, nil
	}
	if err := ss.proc.CheckMappedBy(addr, length, writeAccess(access), registrable); err != nil {
		return verbs.Placement{}, 0, 0, err
	}
	pinned := pinnedBytes(addr, length)
	if err := ss.pin(pinned); err != nil {
		return verbs.Placement{}, 0, 0, err
	}
	return verbs.Placement{Proc: ss.proc, Addr: addr, Length: length}, pinned, 0, nil
}
