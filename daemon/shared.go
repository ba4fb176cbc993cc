package daemon

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// sharedMemory is memory a client shares with the daemon by descriptor:
// a sealed memfd that both map. A region registered inside it is reached
// with plain copies, as an in-process device reaches its own memory,
// instead of a read or write of its /proc/self/mem per batch of packets.
// Memory a client did not share this way (its heap, stack, any mapping)
// is still reached through that mem descriptor.
type sharedMemory struct {
	addr uint64 // where the client mapped it
	mem  []byte // where the daemon did
	// mrs counts the regions inside it: it is unmapped only when none is
	// left, as an engine may copy to any registered region.
	mrs int
}

// maxShared bounds a session's shared mappings (their bytes are bounded
// per user: Limits.SharedBytes).
const maxShared = 4096

// tmpfsMagic is statfs's f_type of tmpfs, where memfds live (hugetlbfs
// ones are refused: a fault there can SIGBUS when huge pages run out).
const tmpfsMagic = 0x01021994

// shareMemory maps the memfd the client passed, after checking it cannot
// shrink under the daemon (a copy beyond its end would be a SIGBUS).
func (ss *session) shareMemory(req hostif.ShareMemoryRequest) (any, error) {
	fd, err := ss.takeFD()
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := ss.checkShare(req); err != nil {
		return nil, err
	}
	if err := checkMemfd(fd, req.Length); err != nil {
		return nil, err
	}
	if err := ss.take(resSharedBytes, int64(req.Length)); err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(fd, 0, int(req.Length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE)
	if err != nil {
		ss.give(resSharedBytes, int64(req.Length))
		return nil, fmt.Errorf("map shared memory: %w", err)
	}
	h := ss.handle()
	ss.shared[h] = &sharedMemory{addr: req.Addr, mem: mem}
	return hostif.HandleReply{Handle: h}, nil
}

// checkShare refuses a range that is empty, wraps, is not page aligned, or
// overlaps one the client shared before: a registration must map to one
// mapping only.
func (ss *session) checkShare(req hostif.ShareMemoryRequest) error {
	page := uint64(unix.Getpagesize())
	end := req.Addr + req.Length
	switch {
	case len(ss.shared) >= maxShared:
		return unix.ENOMEM
	case req.Length == 0 || end < req.Addr || req.Addr%page != 0 || req.Length > 1<<46:
		return fmt.Errorf("share %d bytes at %#x: %w", req.Length, req.Addr, unix.EINVAL)
	}
	for _, m := range ss.shared {
		if req.Addr < m.addr+uint64(len(m.mem)) && m.addr < end {
			return fmt.Errorf("share %#x: overlaps %#x: %w", req.Addr, m.addr, unix.EINVAL)
		}
	}
	return nil
}

// checkMemfd accepts a tmpfs memfd of at least length bytes sealed against
// shrinking.
func checkMemfd(fd int, length uint64) error {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil || fs.Type != tmpfsMagic {
		return fmt.Errorf("shared memory is not a tmpfs memfd: %w", unix.EINVAL)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return fmt.Errorf("shared memory not sealed against shrinking (F_SEAL_SHRINK): %w", unix.EINVAL)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || uint64(st.Size) < length {
		return fmt.Errorf("shared memory shorter than %d bytes: %w", length, unix.EINVAL)
	}
	return nil
}

// unshareMemory unmaps a shared mapping no region uses any more.
func (ss *session) unshareMemory(req hostif.HandleRequest) error {
	m := ss.shared[req.Handle]
	switch {
	case m == nil:
		return errNoObject
	case m.mrs > 0:
		return errBusy
	}
	delete(ss.shared, req.Handle)
	ss.give(resSharedBytes, int64(len(m.mem)))
	return unix.Munmap(m.mem)
}

// sharedFor returns the handle and mapping that hold [addr, addr+n), or
// (0, nil) when no shared mapping does.
func (ss *session) sharedFor(addr, n uint64) (uint32, *sharedMemory) {
	for h, m := range ss.shared {
		if addr >= m.addr && addr-m.addr <= uint64(len(m.mem)) && n <= uint64(len(m.mem))-(addr-m.addr) {
			return h, m
		}
	}
	return 0, nil
}

// regSharedMR registers [addr, addr+n) of the client, which lies in m.
func (ss *session) regSharedMR(pd *verbs.PD, m *sharedMemory, addr, n uint64, access verbs.Access) (*verbs.MR, error) {
	off := addr - m.addr
	mr, err := pd.RegMemoryAt(m.mem[off:off+n:off+n], addr, access)
	if err != nil {
		return nil, err
	}
	m.mrs++
	return mr, nil
}

// unmapShared unmaps what the session shared; the session's regions are
// deregistered first, so the ones still counted could not be (and their
// mapping is left mapped rather than pulled from under an engine).
func (ss *session) unmapShared() {
	for h, m := range ss.shared {
		if m.mrs == 0 {
			unix.Munmap(m.mem)
		}
		delete(ss.shared, h)
		ss.give(resSharedBytes, int64(len(m.mem)))
	}
}
