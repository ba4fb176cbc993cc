package verbs

import (
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/ibtransport"
)

// MR is a registered memory region (ibv_mr): a byte slice the transport may
// read and write on behalf of local work requests (through LKey) and of
// remote peers (through RKey), as its access rights allow. For the daemon it
// may be another process's memory instead (RegProcessMemory).
type MR struct {
	pd *PD
	// buf is the memory of a region of this process; proc reaches that of
	// another process, where size bytes start at addr.
	buf  []byte
	proc ProcessMemory
	// vec is proc when it copies many ranges in one go: packets' payloads
	// are then copied in batches (procLocalView).
	vec vectorMemory
	// pager finds the pages of an ODP region in another process's
	// memory (odp.go); nil otherwise.
	pager Pager
	// release frees what the region holds besides its keys (an implicit
	// region's own mem descriptor); nil if nothing.
	release func()
	size    uint64
	addr    uint64
	access  Access
	ops     MROps
	lkey    uint32
	rkey    uint32
	// valid is false once deregistered, which every access checks; it
	// changes only under Group.Do, while no engine runs.
	valid bool
	// rkeyValid is false once a SEND_WITH_INV invalidated the rkey; any
	// engine may clear it.
	rkeyValid atomic.Bool
	// remoteWrites counts the peers' RDMA WRITE messages and atomics that
	// changed the region (RemoteWriteSeq).
	remoteWrites atomic.Uint64
	// dm is the device memory the region lies in (RegDMMR), nil for
	// any other.
	dm *DM
	// windows counts the memory windows bound to the region, which keep
	// it from being deregistered.
	windows atomic.Int32
}

// RemoteWriteSeq returns how many RDMA WRITE messages and atomics from
// peers have changed the region so far. The engine increments it after
// the bytes landed, so a poller that sees it change may then read what
// those requests wrote without racing the transport: watch the sequence,
// not the bytes (perftest's write_lat watches the last byte of its
// buffer; in Go that is a data race).
func (m *MR) RemoteWriteSeq() uint64 { return m.remoteWrites.Load() }

// LKey returns the local key, for SGEs.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the remote key a peer uses in RDMA and atomic requests.
func (m *MR) RKey() uint32 { return m.rkey }

// Addr returns the virtual address of the first byte of the region: the
// address SGEs and remote requests use.
func (m *MR) Addr() uint64 { return m.addr }

// Len returns the length of the region.
func (m *MR) Len() int { return int(m.size) }

// Bytes returns the registered memory; nil for another process's.
func (m *MR) Bytes() []byte { return m.buf }

// Access returns the region's access rights.
func (m *MR) Access() Access { return m.access }

// PD returns the region's protection domain.
func (m *MR) PD() *PD { return m.pd }

// SGE returns the scatter/gather element for n bytes at offset off.
func (m *MR) SGE(off, n int) SGE {
	return SGE{Addr: m.addr + uint64(off), Length: uint32(n), LKey: m.lkey}
}

// holds reports whether the n bytes at virtual address va lie inside the
// region: the bounds check of every access.
func (m *MR) holds(va uint64, n uint32) bool {
	return va >= m.addr && va-m.addr <= m.size && uint64(n) <= m.size-(va-m.addr)
}

// grants reports whether an access by a QP of pd to n bytes at va with
// rights a is allowed; engine goroutine only.
func (m *MR) grants(pd *PD, va uint64, n uint32, a Access) bool {
	return m.valid && m.pd == pd && m.access&a == a && m.holds(va, n) && m.paged(va, n, a)
}

// localView is the region as the engine holds it after an lkey lookup
// (ibtransport.Region).
type localView MR

func (v *localView) ReadAt(dst []byte, va uint64) bool {
	m := (*MR)(v)
	switch {
	case !m.valid || !m.holds(va, uint32(len(dst))):
		return false
	case m.proc != nil:
		return m.proc.ReadAt(dst, va) == nil
	}
	copy(dst, m.buf[va-m.addr:])
	return true
}

func (v *localView) WriteAt(src []byte, va uint64) bool {
	m := (*MR)(v)
	switch {
	case !m.valid || !m.holds(va, uint32(len(src))):
		return false
	case m.proc != nil:
		return m.proc.WriteAt(src, va) == nil
	}
	copy(m.buf[va-m.addr:], src)
	return true
}

func (v *localView) Atomic(va uint64, cas bool, compare, swapAdd uint64) (uint64, bool) {
	m := (*MR)(v)
	switch {
	case !m.valid || !m.holds(va, 8):
		return 0, false
	case m.proc != nil:
		return m.pd.ops.(*enginePD).e.atomics.apply(m.proc, va, cas, compare, swapAdd)
	}
	off := va - m.addr
	return ibtransport.AtomicWord(m.buf[off:off+8], cas, compare, swapAdd)
}

func (v *localView) AtomicWrite(va uint64, b [8]byte) bool {
	m := (*MR)(v)
	switch {
	case !m.valid || !m.holds(va, 8):
		return false
	case m.proc != nil:
		return m.pd.ops.(*enginePD).e.atomics.store(m.proc, va, b)
	}
	off := va - m.addr
	return ibtransport.StoreWord(m.buf[off:off+8], b)
}

func (v *localView) RemoteWritten() { v.remoteWrites.Add(1) }

// remoteView is the region as the engine holds it after an rkey lookup:
// invalidating the rkey ends the peer's access, not local work requests'.
type remoteView MR

func (v *remoteView) ReadAt(dst []byte, va uint64) bool {
	return v.rkeyValid.Load() && (*localView)(v).ReadAt(dst, va)
}

func (v *remoteView) WriteAt(src []byte, va uint64) bool {
	return v.rkeyValid.Load() && (*localView)(v).WriteAt(src, va)
}

func (v *remoteView) Atomic(va uint64, cas bool, compare, swapAdd uint64) (uint64, bool) {
	if !v.rkeyValid.Load() {
		return 0, false
	}
	return (*localView)(v).Atomic(va, cas, compare, swapAdd)
}

func (v *remoteView) AtomicWrite(va uint64, b [8]byte) bool {
	return v.rkeyValid.Load() && (*localView)(v).AtomicWrite(va, b)
}

func (v *remoteView) RemoteWritten() { v.remoteWrites.Add(1) }

// keyTable maps lkeys and rkeys to regions. Keys are random 32-bit values,
// so a peer cannot guess a valid rkey from another and a stale rkey does not
// come back. The engines read the maps without locks; changes go through
// Group.Do, which pauses them all.
type keyTable struct {
	lkeys map[uint32]*MR
	rkeys map[uint32]*MR
	// mws are the memory windows by key index (engine_mw.go); no region's
	// rkey has a window's index. rkeyIndex counts the regions' rkeys by
	// index, which a window's allocation looks up (under Group.Do: a scan
	// of the regions there would hold every engine).
	mws       map[uint32]*engineMW
	rkeyIndex map[uint32]int
}

func newKeyTable() keyTable {
	return keyTable{lkeys: map[uint32]*MR{}, rkeys: map[uint32]*MR{}, mws: map[uint32]*engineMW{},
		rkeyIndex: map[uint32]int{}}
}

// indexUsed reports whether a window or a region's rkey has key index
// idx; under Group.Do.
func (k *keyTable) indexUsed(idx uint32) bool { return k.mws[idx] != nil || k.rkeyIndex[idx] > 0 }

// dropRKey forgets a region's rkey; under Group.Do.
func (k *keyTable) dropRKey(rkey uint32) {
	delete(k.rkeys, rkey)
	if k.rkeyIndex[rkey>>8]--; k.rkeyIndex[rkey>>8] <= 0 {
		delete(k.rkeyIndex, rkey>>8)
	}
}

// keySource generates memory keys; registration is not on the packet path,
// so a mutex is fine.
type keySource struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func newKeySource() *keySource {
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		panic(fmt.Sprintf("verbs: no entropy for memory keys: %v", err))
	}
	return &keySource{rng: rand.New(rand.NewChaCha8(seed))}
}

func (k *keySource) next() uint32 {
	k.mu.Lock()
	defer k.mu.Unlock()
	for {
		if v := k.rng.Uint32(); v != 0 {
			return v
		}
	}
}

// RegMR registers buf in pd with the given access rights (ibv_reg_mr).
// Remote write and remote atomic access need local write access, as in
// libibverbs.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if err := checkAccess(access); err != nil {
		return nil, err
	}
	return pd.ops.RegMR(buf, access)
}

func (p *enginePD) RegMR(buf []byte, access Access) (*MR, error) {
	var addr uint64
	if len(buf) > 0 {
		addr = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	}
	return p.regBuf(buf, addr, access)
}

// regBuf registers buf, known to the transport's peers and SGEs at
// address addr, once access was checked.
func (p *enginePD) regBuf(buf []byte, addr uint64, access Access) (*MR, error) {
	m := &MR{pd: p.pd, buf: buf, size: uint64(len(buf)), addr: addr, access: access}
	if access&AccessOnDemand == 0 {
		populate(buf) // an ODP region's pages come in as they are used
	}
	return p.register(m)
}

func checkAccess(access Access) error {
	if access&^accessMR != 0 {
		return fmt.Errorf("register MR: unknown access flags %#x: %w", access, ErrInvalidArgument)
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return fmt.Errorf("register MR: remote write/atomic access needs local write: %w", ErrInvalidArgument)
	}
	return nil
}

// register gives m its keys and makes them known to the engines.
func (p *enginePD) register(m *MR) (*MR, error) {
	m.valid = true
	m.rkeyValid.Store(true)
	m.ops = &engineMR{e: p.e, m: m}
	d := p.e
	err := d.group.Do(func() error {
		for {
			m.lkey = d.keys.next()
			if _, dup := d.mrs.lkeys[m.lkey]; !dup {
				break
			}
		}
		for {
			m.rkey = d.keys.next()
			if _, dup := d.mrs.rkeys[m.rkey]; !dup && m.rkey != m.lkey && d.mrs.mws[m.rkey>>8] == nil {
				break
			}
		}
		d.mrs.lkeys[m.lkey] = m
		d.mrs.rkeys[m.rkey] = m
		d.mrs.rkeyIndex[m.rkey>>8]++
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("register MR: %w", err)
	}
	return m, nil
}

// Dereg deregisters the region (ibv_dereg_mr). When it returns, the engine
// no longer reads or writes the memory, and its keys are rejected.
func (m *MR) Dereg() error {
	if err := m.ops.Dereg(); err != nil {
		return err
	}
	if m.dm != nil {
		m.dm.mrGone()
		m.dm = nil
	}
	return nil
}

// engineMR is a region of an in-process device: its keys are in the
// engine's table until Dereg.
type engineMR struct {
	e *engine
	m *MR
}

func (r *engineMR) Dereg() error {
	m, d := r.m, r.e
	return d.group.Do(func() error {
		if !m.valid && d.mrs.lkeys[m.lkey] != m {
			return fmt.Errorf("deregister MR: %w", ErrInvalidArgument)
		}
		if n := m.windows.Load(); n > 0 {
			return fmt.Errorf("deregister MR: %d memory windows bound to it: %w", n, ErrBusy)
		}
		m.valid = false
		delete(d.mrs.lkeys, m.lkey)
		d.mrs.dropRKey(m.rkey)
		if m.release != nil {
			m.release()
		}
		return nil
	})
}

// populate faults in buf's pages, writable, as ibv_reg_mr's pinning does,
// so that the data path meets no page fault: a fresh Go allocation is
// mapped on first touch, and perftest's 64 KiB areas for 1024 QPs (128 MiB
// a side, 32,768 pages) would otherwise fault in while traffic runs. It is
// best effort: kernels before 5.14 lack MADV_POPULATE_WRITE, and the memory
// then faults in on use.
func populate(buf []byte) {
	if len(buf) == 0 {
		return
	}
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	end := (start + uintptr(len(buf)) + page - 1) &^ (page - 1)
	start &^= page - 1
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_POPULATE_WRITE); errno != 0 {
		// A read-only mapping cannot be populated for writing.
		unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_POPULATE_READ)
	}
	runtime.KeepAlive(buf)
}
