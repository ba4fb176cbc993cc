package daemon

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// Device memory (ibv_alloc_dm) is memory the daemon holds, as a NIC's
// on-chip memory is the NIC's: a sealed memfd it makes, maps and passes
// to the client, which maps it too, so that ibv_memcpy_to_dm is a plain
// copy in the client and the engines reach a region in it with plain
// copies. The device's hostif.MaxDMSize bytes are what every session
// shares; each user's part of them is bounded (Limits.DMs, DMBytes).

// hostDM is one allocation: length bytes the client asked for, in a
// mapping of whole pages, and its memfd, kept (one descriptor, counted)
// to pass again to a context that imports it (query_dm, import.go).
type hostDM struct {
	mem    []byte
	fd     int
	length uint64
	// mrs counts the regions in it: it is unmapped only when none is
	// left, as an engine may copy to any registered region.
	mrs int
}

// sessionDMs are a session's allocations and which one each of its DM
// regions lies in.
type sessionDMs struct {
	dms  map[uint32]*hostDM
	mrDM map[uint32]uint32
}

// allocDM makes length bytes of device memory for the client.
func (ss *session) allocDM(req hostif.AllocDMRequest) (any, []int, error) {
	if req.Length == 0 || req.Length > hostif.MaxDMSize || req.LogAlign > hostif.DMMaxLogAlign || req.Reserved != 0 {
		return nil, nil, fmt.Errorf("device memory of %d bytes, alignment 2^%d: %w", req.Length, req.LogAlign, unix.EINVAL)
	}
	if err := ss.takeDM(int64(req.Length)); err != nil {
		return nil, nil, err
	}
	fd, mem, err := newDMMemory(req.Length)
	if err != nil {
		ss.dropDM(&hostDM{length: req.Length})
		return nil, nil, err
	}
	if ss.dm.dms == nil {
		ss.dm = sessionDMs{dms: map[uint32]*hostDM{}, mrDM: map[uint32]uint32{}}
	}
	h := ss.handle()
	ss.dm.dms[h] = &hostDM{mem: mem, fd: fd, length: req.Length}
	return hostif.HandleReply{Handle: h}, []int{fd}, nil
}

// takeDM charges an allocation of n bytes: one DM, its bytes and its
// memfd to the user, the bytes to the device.
func (ss *session) takeDM(n int64) error {
	if err := ss.take(resDM, 1); err != nil {
		return err
	}
	if err := ss.take(resDMBytes, n); err != nil {
		ss.give(resDM, 1)
		return err
	}
	if err := ss.take(resDescriptor, 1); err != nil {
		ss.give(resDMBytes, n)
		ss.give(resDM, 1)
		return err
	}
	if !ss.s.reserveDM(n) {
		ss.give(resDescriptor, 1)
		ss.give(resDMBytes, n)
		ss.give(resDM, 1)
		return fmt.Errorf("device memory of %d bytes: the device's %d are taken: %w", n, hostif.MaxDMSize, unix.ENOMEM)
	}
	return nil
}

// newDMMemory makes a memfd of length bytes rounded up to pages, sealed
// so that neither side can resize it under the other (a copy past a
// shrunk end would be a SIGBUS), and maps it.
func newDMMemory(length uint64) (int, []byte, error) {
	page := uint64(unix.Getpagesize())
	size := int((length + page - 1) &^ (page - 1))
	fd, err := unix.MemfdCreate("softnic-dm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("device memory: memfd: %w", err)
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if err = unix.Ftruncate(fd, int64(size)); err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals)
	}
	var mem []byte
	if err == nil {
		mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("device memory: %w", err)
	}
	return fd, mem, nil
}

// reserveDM takes n bytes of the device's memory, if that many are free.
func (s *Server) reserveDM(n int64) bool {
	for {
		used := s.dmUsed.Load()
		if used+n > hostif.MaxDMSize {
			return false
		}
		if s.dmUsed.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

func (s *Server) releaseDM(n int64) { s.dmUsed.Add(-n) }

// freeDM frees an allocation no region uses any more.
func (ss *session) freeDM(req hostif.HandleRequest) error {
	dm := ss.dm.dms[req.Handle]
	switch {
	case dm == nil:
		return errNoObject
	case dm.mrs > 0:
		return errBusy
	}
	delete(ss.dm.dms, req.Handle)
	ss.dropDM(dm)
	unix.Close(dm.fd)
	return unix.Munmap(dm.mem)
}

// dropDM gives back what dm was charged (takeDM).
func (ss *session) dropDM(dm *hostDM) {
	ss.s.releaseDM(int64(dm.length))
	ss.give(resDescriptor, 1)
	ss.give(resDMBytes, int64(dm.length))
	ss.give(resDM, 1)
}

// dmAccess are the rights a DM region may have (mlx5's), ZERO_BASED
// required: the kernel's uverbs refuses a DM region without it.
const dmAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic |
	verbs.AccessZeroBased

// regDMMR registers [offset, offset+length) of an allocation as a region
// whose addresses start at 0 there.
func (ss *session) regDMMR(req hostif.RegDMMRRequest) (any, error) {
	pd, dm := ss.pds[req.PD], ss.dm.dms[req.Dm]
	if pd == nil || dm == nil {
		return nil, fmt.Errorf("PD %d, DM %d: %w", req.PD, req.Dm, errNoObject)
	}
	access := verbs.Access(req.Access)
	if access&verbs.AccessZeroBased == 0 || access&^dmAccess != 0 || req.Reserved != 0 {
		return nil, fmt.Errorf("DM region with access %#x: %w", req.Access, unix.EINVAL)
	}
	if req.Offset > dm.length || req.Length > dm.length-req.Offset {
		return nil, fmt.Errorf("DM region of %d bytes at %d in %d: %w", req.Length, req.Offset, dm.length, unix.EINVAL)
	}
	if err := ss.take(resMR, 1); err != nil {
		return nil, err
	}
	end := req.Offset + req.Length
	mr, err := pd.RegMemoryAt(dm.mem[req.Offset:end:end], 0, access&^verbs.AccessZeroBased)
	if err != nil {
		ss.give(resMR, 1)
		return nil, err
	}
	h := ss.handle()
	ss.mrs[h], ss.mrPD[h] = &hostMR{mr: mr}, req.PD
	ss.dm.mrDM[h] = req.Dm
	dm.mrs++
	return hostif.RegMRReply{Handle: h, LKey: mr.LKey(), RKey: mr.RKey()}, nil
}

// dmMRGone notes that region h, deregistered, no longer uses its
// allocation, if it was in one.
func (ss *session) dmMRGone(h uint32) {
	if d, ok := ss.dm.mrDM[h]; ok {
		ss.dm.dms[d].mrs--
		delete(ss.dm.mrDM, h)
	}
}

// freeDMs frees what the session allocated, once its regions are
// deregistered (one still counted could not be: its mapping is left
// mapped rather than pulled from under an engine).
func (ss *session) freeDMs() {
	for h, dm := range ss.dm.dms {
		unix.Close(dm.fd)
		if dm.mrs == 0 {
			unix.Munmap(dm.mem)
		}
		delete(ss.dm.dms, h)
		ss.dropDM(dm)
	}
}
