package xdp

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Errors of Open and the data path, matchable with errors.Is.
var (
	ErrConfig         = errors.New("invalid AF_XDP socket configuration")
	ErrNoInterface    = errors.New("no such network interface")
	ErrNoQueue        = errors.New("no such receive queue on the interface")
	ErrPermission     = errors.New("not permitted: AF_XDP sockets need root (CAP_NET_RAW, CAP_NET_ADMIN)")
	ErrUMEM           = errors.New("cannot allocate or register the UMEM: too large, or the locked-memory limit (ulimit -l, RLIMIT_MEMLOCK) is too low")
	ErrMemlock        = fmt.Errorf("the UMEM exceeds the locked-memory limit: %w", ErrUMEM)
	ErrQueueBusy      = errors.New("the queue already has an AF_XDP socket or is in use")
	ErrNoZeroCopy     = errors.New("the driver does not offer zero-copy AF_XDP on this queue")
	ErrNoMultiBuffer  = errors.New("the driver does not support multi-buffer AF_XDP (XDP_USE_SG)")
	ErrNotSupported   = errors.New("AF_XDP is not supported by this kernel")
	ErrClosed         = errors.New("AF_XDP socket closed")
	ErrFrameOwnership = errors.New("UMEM frame handed back twice or not owned by the caller")
)

// Mode chooses between zero-copy and copy mode.
type Mode int

const (
	// ModeAuto uses zero-copy when the driver offers it, copy mode otherwise.
	ModeAuto Mode = iota
	// ModeCopy forces copy mode (XDP_COPY).
	ModeCopy
	// ModeZeroCopy requires zero-copy (XDP_ZEROCOPY); Open fails without it.
	ModeZeroCopy
)

// Config sizes a socket. Zero fields take the defaults noted.
type Config struct {
	// FrameSize is the UMEM chunk size: a power of two from 2048 to the
	// page size. Default 4096.
	FrameSize int
	// NumFrames is the UMEM size in chunks; half receive, half transmit.
	// Default 4096 (16 MiB with 4 KiB chunks).
	NumFrames int
	// RxRingSize and TxRingSize are the descriptor ring sizes (powers of
	// two). Defaults: the number of receive / transmit frames.
	RxRingSize, TxRingSize int
	// Mode: zero-copy or copy. Default ModeAuto.
	Mode Mode
	// MultiBuffer binds with XDP_USE_SG: frames longer than a chunk arrive
	// and may be sent as several descriptors (Desc.More). Needed when the
	// link MTU exceeds a chunk (less the 256-byte XDP headroom in copy mode).
	MultiBuffer bool
	// Contiguous lays the UMEM out so that a packet longer than a chunk
	// lies in one piece of memory, and the application copies nothing to
	// join or split it. Receive buffers are placed a chunk less the
	// 256-byte headroom apart (unaligned chunk mode), so the kernel's copy
	// of a multi-buffer packet continues where the previous buffer's data
	// ended (see Span). Transmit frames are TxFrameSize bytes, sent as
	// several descriptors (see AppendTx). It implies MultiBuffer and copy
	// mode: zero-copy drivers refuse buffers that cross pages.
	Contiguous bool
	// TxFrameSize is the size of a transmit frame with Contiguous, a
	// multiple of FrameSize. Default FrameSize.
	TxFrameSize int
	// BusyPoll enables preferred busy polling (SO_PREFER_BUSY_POLL) with
	// BusyPollTimeout (default 20µs) and BusyPollBudget (default 64).
	BusyPoll        bool
	BusyPollTimeout time.Duration
	BusyPollBudget  int
}

func (c *Config) setDefaults() error {
	if c.FrameSize == 0 {
		c.FrameSize = 4096
	}
	if c.NumFrames == 0 {
		c.NumFrames = 4096
	}
	page := os.Getpagesize()
	if !isPow2(c.FrameSize) || c.FrameSize < 2048 || c.FrameSize > page {
		return fmt.Errorf("%w: frame size %d is not a power of two between 2048 and the page size %d", ErrConfig, c.FrameSize, page)
	}
	if c.TxFrameSize == 0 {
		c.TxFrameSize = c.FrameSize
	}
	if c.Contiguous {
		if c.Mode == ModeZeroCopy {
			return fmt.Errorf("%w: the contiguous layout needs copy mode", ErrConfig)
		}
		c.Mode = ModeCopy
		c.MultiBuffer = true
		if c.TxFrameSize%c.FrameSize != 0 || c.TxFrameSize > c.NumFrames/4*c.FrameSize {
			return fmt.Errorf("%w: transmit frame size %d is not a multiple of the frame size %d, or over a quarter of the UMEM",
				ErrConfig, c.TxFrameSize, c.FrameSize)
		}
	} else if c.TxFrameSize != c.FrameSize {
		return fmt.Errorf("%w: transmit frame size %d differs from the frame size %d without the contiguous layout",
			ErrConfig, c.TxFrameSize, c.FrameSize)
	}
	if c.NumFrames < 2 || !isPow2(c.NumFrames) {
		return fmt.Errorf("%w: frame count %d is not a power of two of at least 2", ErrConfig, c.NumFrames)
	}
	if uint64(c.NumFrames)*uint64(c.FrameSize) > maxUMEM {
		return fmt.Errorf("%w: UMEM of %d frames of %d bytes exceeds %d bytes: %w", ErrConfig,
			c.NumFrames, c.FrameSize, uint64(maxUMEM), ErrUMEM)
	}
	half := c.NumFrames / 2
	if c.RxRingSize == 0 {
		c.RxRingSize = half
	}
	if c.TxRingSize == 0 {
		c.TxRingSize = half
	}
	if !isPow2(c.RxRingSize) || !isPow2(c.TxRingSize) {
		return fmt.Errorf("%w: ring sizes %d/%d are not powers of two", ErrConfig, c.RxRingSize, c.TxRingSize)
	}
	if c.BusyPollTimeout == 0 {
		c.BusyPollTimeout = 20 * time.Microsecond
	}
	if c.BusyPollBudget == 0 {
		c.BusyPollBudget = 64
	}
	return nil
}

// layout places the receive buffers and transmit frames in the UMEM.
type layout struct {
	rxStride uint64 // distance between receive buffers
	rxCount  int
	txBase   uint64 // where the transmit frames start
	txStride uint64 // transmit frame size
	txCount  int
	txDescs  int // descriptors a transmit frame may need
}

// unalignedOffsetShift is XSK_UNALIGNED_BUF_OFFSET_SHIFT: in unaligned
// chunk mode the kernel reports a buffer as its address plus, in the top
// 16 bits, the offset of the data in it.
const unalignedOffsetShift = 48

func (c *Config) layout() layout {
	l := layout{rxStride: uint64(c.FrameSize), rxCount: c.NumFrames / 2, txStride: uint64(c.TxFrameSize)}
	l.txDescs = c.TxFrameSize / c.FrameSize
	if c.Contiguous {
		l.rxStride -= unix.XDP_PACKET_HEADROOM
		end := uint64(l.rxCount-1)*l.rxStride + uint64(c.FrameSize)
		l.txBase = (end + uint64(c.FrameSize) - 1) &^ uint64(c.FrameSize-1)
	} else {
		l.txBase = uint64(l.rxCount) * l.rxStride
	}
	l.txCount = int((uint64(c.NumFrames*c.FrameSize) - l.txBase) / l.txStride)
	return l
}

// rxIndex returns the receive buffer an address falls in.
func (l *layout) rxIndex(addr uint64) (int, bool) {
	i := addr / l.rxStride
	return int(i), i < uint64(l.rxCount)
}

// txIndex returns the transmit frame an address falls in.
func (l *layout) txIndex(addr uint64) (int, bool) {
	if addr < l.txBase {
		return 0, false
	}
	i := (addr - l.txBase) / l.txStride
	return int(i), i < uint64(l.txCount)
}

func (l *layout) txAddr(i int) uint64 { return l.txBase + uint64(i)*l.txStride }

// maxUMEM bounds the UMEM well below what the kernel can pin (it counts
// pages in 32 bits) so absurd sizes fail early with ErrUMEM.
const maxUMEM = 1 << 40

func isPow2(n int) bool { return n > 0 && n&(n-1) == 0 }

// Desc describes one UMEM buffer on a ring; it has the layout of the
// kernel's struct xdp_desc.
type Desc struct {
	Addr    uint64 // offset of the data in the UMEM
	Len     uint32
	Options uint32
}

// More reports whether the packet continues in the next descriptor
// (multi-buffer, XDP_PKT_CONTD).
func (d Desc) More() bool { return d.Options&unix.XDP_PKT_CONTD != 0 }

// SetMore marks (or unmarks) the descriptor as continued by the next one.
func (d *Desc) SetMore(more bool) {
	if more {
		d.Options |= unix.XDP_PKT_CONTD
	} else {
		d.Options &^= unix.XDP_PKT_CONTD
	}
}

// Frame ownership, tracked per receive buffer and transmit frame so that a frame can never be
// handed out twice (the bug of asavie/xdp issue #24).
const (
	ownKernelRx uint8 = iota // on the fill or RX ring
	ownAppRx                 // received, held by the application
	ownFreeTx                // on the free transmit stack
	ownAppTx                 // handed out by NextTxFrame
	ownKernelTx              // on the TX or completion ring
	ownFreeRx                // released by the application, waiting for fill-ring space
)

// Socket is one AF_XDP socket bound to one receive queue, with its own
// UMEM. It is not safe for concurrent use: give each goroutine its own
// socket (one per queue), or serialize the calls.
type Socket struct {
	fd      int
	ifindex int
	queue   int
	cfg     Config
	umem    []byte
	layout
	owner      []uint8 // receive buffers, then transmit frames: own* constants
	txInKernel []uint8 // per transmit frame, its descriptors the kernel holds
	freeTx     []uint64
	freeRx     []uint64 // released receive frames not yet on the fill ring
	fill       addrRing
	comp       addrRing
	rx         descRing
	tx         descRing
	zeroCopy   bool
	ctr        counters
	closed     bool
}

// Counters are the socket's software counters.
type Counters struct {
	RxPackets, RxDescs, RxBytes uint64
	TxPackets, TxDescs, TxBytes uint64
	TxCompleted                 uint64
	Kicks, KickErrors           uint64 // sendto wakeups of the TX path
	RxWakeups                   uint64 // recvfrom wakeups (need_wakeup on fill, busy poll)
	OwnershipErrors             uint64 // frames returned that the caller did not own
}

// counters are updated by the goroutine driving the socket, once per batch
// where possible, and read by Stats from any goroutine.
type counters struct {
	rxPackets, rxDescs, rxBytes    atomic.Uint64
	txPackets, txDescs, txBytes    atomic.Uint64
	txCompleted, kicks, kickErrors atomic.Uint64
	rxWakeups, ownershipErrors     atomic.Uint64
	freeTx, freeRx                 atomic.Int64 // as of the last batch
}

// Stats combines the kernel's ring statistics (XDP_STATISTICS) with the
// socket's counters and the current ring occupancy.
type Stats struct {
	Counters
	RxDropped, RxInvalidDescs, TxInvalidDescs uint64
	RxRingFull, RxFillRingEmpty, TxRingEmpty  uint64
	FillPending, TxPending                    uint32 // entries the kernel has not consumed yet
	FreeTxFrames, FreeRxFrames                int    // frames waiting on our side, as of the last batch
}

// Open creates an AF_XDP socket on receive queue queue of the interface
// with index ifindex (in the calling thread's network namespace), registers
// a UMEM, maps the four rings, fills the fill ring and binds. The socket
// only receives once an XDP program redirects into it (see package bpf).
func Open(ifindex, queue int, cfg Config) (*Socket, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Socket{fd: -1, ifindex: ifindex, queue: queue, cfg: cfg, layout: cfg.layout()}
	if err := s.open(); err != nil {
		s.Close()
		return nil, fmt.Errorf("AF_XDP socket on ifindex %d queue %d: %w", ifindex, queue, err)
	}
	return s, nil
}

func (s *Socket) open() error {
	cfg := &s.cfg
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
			return fmt.Errorf("%w: %v", ErrPermission, err)
		case errors.Is(err, unix.EAFNOSUPPORT):
			return fmt.Errorf("%w: %v", ErrNotSupported, err)
		}
		return fmt.Errorf("socket(AF_XDP): %w", err)
	}
	s.fd = fd

	size := cfg.NumFrames * cfg.FrameSize
	s.umem, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		s.umem = nil
		return fmt.Errorf("map %d bytes of UMEM: %w: %v", size, ErrUMEM, err)
	}
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))),
		Len:  uint64(size),
		Size: uint32(cfg.FrameSize),
	}
	if cfg.Contiguous {
		reg.Flags = unix.XDP_UMEM_UNALIGNED_CHUNK_FLAG
	}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		if errors.Is(err, unix.ENOBUFS) {
			// The kernel charges the UMEM to RLIMIT_MEMLOCK unless the
			// caller has CAP_IPC_LOCK.
			var lim unix.Rlimit
			unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim)
			return fmt.Errorf("register %d bytes of UMEM: %w (limit %d bytes; raise `ulimit -l` or grant CAP_IPC_LOCK): %v",
				size, ErrMemlock, lim.Cur, err)
		}
		if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EPERM) {
			return fmt.Errorf("register %d bytes of UMEM: %w: %v", size, ErrUMEM, err)
		}
		return fmt.Errorf("register %d bytes of UMEM: %w", size, err)
	}

	// The fill ring is twice the receive buffers, because the kernel
	// publishes its consumer index lazily; the completion ring holds every
	// transmit descriptor (the kernel reserves a slot before sending).
	fillSize, compSize := 2*s.rxCount, nextPow2(s.txCount*s.txDescs)
	for _, o := range []struct {
		name string
		opt  int
		n    int
	}{
		{"fill", unix.XDP_UMEM_FILL_RING, fillSize},
		{"completion", unix.XDP_UMEM_COMPLETION_RING, compSize},
		{"RX", unix.XDP_RX_RING, cfg.RxRingSize},
		{"TX", unix.XDP_TX_RING, cfg.TxRingSize},
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, o.opt, o.n); err != nil {
			return fmt.Errorf("size the %s ring to %d: %w", o.name, o.n, err)
		}
	}
	var off unix.XDPMmapOffsets
	if err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return fmt.Errorf("ring offsets: %w", err)
	}
	maps := []struct {
		name  string
		r     *ring
		pgoff int64
		off   unix.XDPRingOffset
		n     int
		esize uintptr
		set   func(mem []byte)
	}{
		{"fill", &s.fill.ring, unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, fillSize, 8, func(m []byte) {
			s.fill.addrs = unsafe.Slice((*uint64)(unsafe.Pointer(&m[off.Fr.Desc])), fillSize)
		}},
		{"completion", &s.comp.ring, unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, compSize, 8, func(m []byte) {
			s.comp.addrs = unsafe.Slice((*uint64)(unsafe.Pointer(&m[off.Cr.Desc])), compSize)
		}},
		{"RX", &s.rx.ring, unix.XDP_PGOFF_RX_RING, off.Rx, cfg.RxRingSize, unsafe.Sizeof(Desc{}), func(m []byte) {
			s.rx.descs = unsafe.Slice((*Desc)(unsafe.Pointer(&m[off.Rx.Desc])), cfg.RxRingSize)
		}},
		{"TX", &s.tx.ring, unix.XDP_PGOFF_TX_RING, off.Tx, cfg.TxRingSize, unsafe.Sizeof(Desc{}), func(m []byte) {
			s.tx.descs = unsafe.Slice((*Desc)(unsafe.Pointer(&m[off.Tx.Desc])), cfg.TxRingSize)
		}},
	}
	for _, m := range maps {
		mem, err := mapRing(fd, m.pgoff, m.off, uint32(m.n), m.esize)
		if err != nil {
			return fmt.Errorf("map the %s ring: %w", m.name, err)
		}
		m.r.init(mem, m.off, uint32(m.n))
		m.set(mem)
	}

	// Kernels from 6.17 let copy-mode sendto push more than 32 frames per
	// call; older kernels refuse the option, which only costs more kicks.
	_ = unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, cfg.TxRingSize)

	s.initFrames()

	var flags uint16 = unix.XDP_USE_NEED_WAKEUP
	switch cfg.Mode { // Contiguous forced ModeCopy
	case ModeCopy:
		flags |= unix.XDP_COPY
	case ModeZeroCopy:
		flags |= unix.XDP_ZEROCOPY
	}
	if cfg.MultiBuffer {
		flags |= unix.XDP_USE_SG
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(s.ifindex), QueueID: uint32(s.queue)}
	// The kernel detaches a closed socket's buffer pool from its queue in a
	// deferred work item, so a socket closed just before (a restart, the
	// previous test) can hold the queue for a moment: retry EBUSY briefly.
	err = unix.Bind(fd, sa)
	for deadline := time.Now().Add(time.Second); errors.Is(err, unix.EBUSY) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		err = unix.Bind(fd, sa)
	}
	if err != nil {
		switch {
		case errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENXIO):
			return fmt.Errorf("bind: %w: %v", ErrNoInterface, err)
		case errors.Is(err, unix.EBUSY):
			return fmt.Errorf("bind: %w: %v", ErrQueueBusy, err)
		case errors.Is(err, unix.EPERM):
			return fmt.Errorf("bind: %w: %v", ErrPermission, err)
		case errors.Is(err, unix.EOPNOTSUPP) && cfg.Mode == ModeZeroCopy:
			return fmt.Errorf("bind: %w: %v", ErrNoZeroCopy, err)
		case errors.Is(err, unix.EOPNOTSUPP) && cfg.MultiBuffer:
			return fmt.Errorf("bind: %w: %v", ErrNoMultiBuffer, err)
		case errors.Is(err, unix.EINVAL):
			return fmt.Errorf("bind: %w (queue %d; or the interface is down): %v", ErrNoQueue, s.queue, err)
		}
		return fmt.Errorf("bind: %w", err)
	}
	var opts uint32
	if err := getsockopt(fd, unix.XDP_OPTIONS, unsafe.Pointer(&opts), unsafe.Sizeof(opts)); err == nil {
		s.zeroCopy = opts&unix.XDP_OPTIONS_ZEROCOPY != 0
	}
	if cfg.BusyPoll {
		for _, o := range []struct {
			name     string
			opt, val int
		}{
			{"SO_PREFER_BUSY_POLL", unix.SO_PREFER_BUSY_POLL, 1},
			{"SO_BUSY_POLL", unix.SO_BUSY_POLL, int(cfg.BusyPollTimeout / time.Microsecond)},
			{"SO_BUSY_POLL_BUDGET", unix.SO_BUSY_POLL_BUDGET, cfg.BusyPollBudget},
		} {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o.opt, o.val); err != nil {
				return fmt.Errorf("busy polling: %s: %w", o.name, err)
			}
		}
	}
	return nil
}

// initFrames gives the kernel every receive buffer, in address order (see
// refill), and puts every transmit frame on the free stack.
func (s *Socket) initFrames() {
	s.owner = make([]uint8, s.rxCount+s.txCount)
	s.txInKernel = make([]uint8, s.txCount)
	for i := 0; i < s.rxCount; i++ {
		s.fill.addrs[(s.fill.cachedProd+uint32(i))&s.fill.mask] = uint64(i) * s.rxStride
		s.owner[i] = ownKernelRx
	}
	s.fill.prodSubmit(uint32(s.rxCount))
	s.freeRx = make([]uint64, 0, s.rxCount)
	s.freeTx = make([]uint64, 0, s.txCount)
	for i := s.txCount - 1; i >= 0; i-- {
		s.freeTx = append(s.freeTx, s.txAddr(i))
		s.owner[s.rxCount+i] = ownFreeTx
	}
	s.ctr.freeTx.Store(int64(len(s.freeTx)))
}

func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

func setsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), size, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func getsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// FD returns the socket's file descriptor, for the XSKMAP and for poll.
func (s *Socket) FD() int { return s.fd }

// Queue returns the receive queue the socket is bound to.
func (s *Socket) Queue() int { return s.queue }

// ZeroCopy reports whether the kernel bound the socket in zero-copy mode.
func (s *Socket) ZeroCopy() bool { return s.zeroCopy }

// FrameSize returns the UMEM chunk size: the most one descriptor carries.
func (s *Socket) FrameSize() int { return s.cfg.FrameSize }

// TxFrameSize returns the size of the buffers NextTxFrame hands out.
func (s *Socket) TxFrameSize() int { return int(s.txStride) }

// Frame returns the bytes a descriptor refers to, or nil if the descriptor
// points outside the UMEM. The slice aliases the UMEM: it stays valid until
// the frame is released (received frames) or transmitted.
func (s *Socket) Frame(d Desc) []byte {
	end := d.Addr + uint64(d.Len)
	if end > uint64(len(s.umem)) || end < d.Addr {
		return nil
	}
	return s.umem[d.Addr:end:end]
}

// Offset returns the UMEM address of b's first byte, and false if b does
// not start inside the UMEM. It maps a buffer from NextTxFrame back to its
// descriptor.
func (s *Socket) Offset(b []byte) (uint64, bool) {
	if len(s.umem) == 0 || cap(b) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(s.umem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p >= base+uintptr(len(s.umem)) {
		return 0, false
	}
	return uint64(p - base), true
}

// Span returns the bytes of a multi-buffer packet's descriptors when each
// continues where the previous one ended, as they do with the contiguous
// layout unless the kernel reused a buffer out of order; otherwise nil.
func (s *Socket) Span(descs []Desc) []byte {
	if len(descs) == 0 {
		return nil
	}
	end := descs[0].Addr
	for _, d := range descs {
		if d.Addr != end {
			return nil
		}
		end += uint64(d.Len)
	}
	if end > uint64(len(s.umem)) || end < descs[0].Addr {
		return nil
	}
	return s.umem[descs[0].Addr:end:end]
}

// AppendTx appends to descs the descriptors that send the length bytes
// built at the start of d, a frame from NextTxFrame: one descriptor, or
// with the contiguous layout one per chunk's worth, all but the last with
// More set.
func (s *Socket) AppendTx(descs []Desc, d Desc, length int) []Desc {
	chunk := s.cfg.FrameSize
	for {
		n := min(length, chunk)
		length -= n
		nd := Desc{Addr: d.Addr, Len: uint32(n)}
		nd.SetMore(length > 0)
		descs = append(descs, nd)
		if length <= 0 {
			return descs
		}
		d.Addr += uint64(n)
	}
}

// Receive moves up to len(descs) received descriptors into descs and returns
// how many. It never splits a multi-buffer packet across calls unless one
// packet alone has more descriptors than descs holds. The frames belong to
// the caller until Release. Receive does not block; see Wait.
func (s *Socket) Receive(descs []Desc) int {
	if s.closed {
		return 0
	}
	s.refill()
	avail := s.rx.consAvail()
	if avail == 0 {
		if s.cfg.BusyPoll || s.fill.needWakeup() {
			s.wakeRx()
			avail = s.rx.consAvail()
		}
		if avail == 0 {
			return 0
		}
	}
	n := min(avail, uint32(len(descs)))
	whole := uint32(0) // descriptors up to the end of the last whole packet
	for i := uint32(0); i < n; i++ {
		descs[i] = s.rx.descs[(s.rx.cachedCons+i)&s.rx.mask]
		if !descs[i].More() {
			whole = i + 1
		}
	}
	if whole == 0 {
		if n < uint32(len(descs)) {
			return 0 // the rest of the packet is not published yet
		}
		whole = n // caller's slice too small for one packet: hand out a part
	}
	s.rx.consRelease(whole)
	var bytes, packets uint64
	for i := range descs[:whole] {
		d := &descs[i]
		if s.cfg.Contiguous {
			d.Addr = d.Addr&(1<<unalignedOffsetShift-1) + d.Addr>>unalignedOffsetShift
		}
		if c, ok := s.rxIndex(d.Addr); ok {
			s.owner[c] = ownAppRx
		}
		bytes += uint64(d.Len)
		if !d.More() {
			packets++
		}
	}
	s.ctr.rxBytes.Add(bytes)
	s.ctr.rxPackets.Add(packets)
	s.ctr.rxDescs.Add(uint64(whole))
	return int(whole)
}

// Release gives received frames back to the kernel (the fill ring). Frames
// the caller does not hold are skipped and counted as ownership errors.
func (s *Socket) Release(descs []Desc) error {
	if s.closed {
		return ErrClosed
	}
	bad := 0
	for _, d := range descs {
		c, ok := s.rxIndex(d.Addr)
		if !ok || s.owner[c] != ownAppRx {
			bad++
			continue
		}
		s.owner[c] = ownFreeRx
		s.freeRx = append(s.freeRx, uint64(c)*s.rxStride)
	}
	s.refill()
	if bad > 0 {
		s.ctr.ownershipErrors.Add(uint64(bad))
		return fmt.Errorf("release %d of %d frames: %w", bad, len(descs), ErrFrameOwnership)
	}
	return nil
}

// refill moves free receive frames onto the fill ring, oldest first: the
// kernel takes fill entries in order, so buffers come back in the order
// they were first given, and with the contiguous layout consecutive
// buffers stay adjacent. The kernel publishes its fill-ring consumer index
// lazily, so the ring can look full while we hold frames it already took;
// those wait in freeRx for the next call.
func (s *Socket) refill() {
	if len(s.freeRx) == 0 {
		return
	}
	n := min(s.fill.prodFree(uint32(len(s.freeRx))), uint32(len(s.freeRx)))
	for i, addr := range s.freeRx[:n] {
		c, _ := s.rxIndex(addr)
		s.owner[c] = ownKernelRx
		s.fill.addrs[(s.fill.cachedProd+uint32(i))&s.fill.mask] = addr
	}
	rest := uint32(copy(s.freeRx, s.freeRx[n:]))
	s.freeRx = s.freeRx[:rest]
	if n > 0 {
		s.fill.prodSubmit(n)
	}
	s.ctr.freeRx.Store(int64(rest))
	if s.fill.needWakeup() {
		s.wakeRx()
	}
}

func (s *Socket) wakeRx() {
	s.ctr.rxWakeups.Add(1)
	unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
}

// NextTxFrame hands out a free transmit frame: a descriptor (Len 0) and the
// whole frame (TxFrameSize bytes) to build a packet in. ok is false when every transmit frame
// is in flight even after reaping completions.
func (s *Socket) NextTxFrame() (d Desc, buf []byte, ok bool) {
	if s.closed {
		return Desc{}, nil, false
	}
	if len(s.freeTx) == 0 {
		s.Complete()
		if len(s.freeTx) == 0 {
			return Desc{}, nil, false
		}
	}
	addr := s.freeTx[len(s.freeTx)-1]
	s.freeTx = s.freeTx[:len(s.freeTx)-1]
	c, _ := s.txIndex(addr)
	s.owner[s.rxCount+c] = ownAppTx
	return Desc{Addr: addr}, s.umem[addr : addr+s.txStride : addr+s.txStride], true
}

// FreeTxFrame returns a frame from NextTxFrame that will not be sent.
func (s *Socket) FreeTxFrame(d Desc) error {
	c, ok := s.txIndex(d.Addr)
	if !ok || s.owner[s.rxCount+c] != ownAppTx {
		s.ctr.ownershipErrors.Add(1)
		return fmt.Errorf("free transmit frame at %#x: %w", d.Addr, ErrFrameOwnership)
	}
	s.owner[s.rxCount+c] = ownFreeTx
	s.freeTx = append(s.freeTx, s.txAddr(c))
	return nil
}

// Transmit puts descriptors from NextTxFrame (with Len set, and More set on
// all but the last descriptor of a multi-buffer packet) on the TX ring and
// returns how many it queued: the longest prefix that fits and ends at a
// packet boundary. The frames belong to the kernel afterwards. Call Flush
// to make sure the kernel starts sending.
func (s *Socket) Transmit(descs []Desc) (int, error) {
	if s.closed {
		return 0, ErrClosed
	}
	free := s.tx.prodFree(uint32(len(descs)))
	n := min(free, uint32(len(descs)))
	for n > 0 && descs[n-1].More() {
		n-- // never queue a packet without its last descriptor
	}
	for i := uint32(0); i < n; i++ {
		c, ok := s.txIndex(descs[i].Addr)
		// A descriptor stays inside its frame and carries at most a chunk.
		inFrame := ok && descs[i].Addr+uint64(descs[i].Len) <= s.txAddr(c)+s.txStride &&
			descs[i].Len <= uint32(s.cfg.FrameSize)
		if !ok || s.owner[s.rxCount+c] != ownAppTx || !inFrame {
			// Queue what came before; refuse the rest.
			s.ctr.ownershipErrors.Add(1)
			n = i
			for n > 0 && descs[n-1].More() {
				n--
			}
			s.submitTx(descs[:n])
			return int(n), fmt.Errorf("transmit frame at %#x: %w", descs[i].Addr, ErrFrameOwnership)
		}
	}
	s.submitTx(descs[:n])
	return int(n), nil
}

func (s *Socket) submitTx(descs []Desc) {
	var bytes, packets uint64
	for i, d := range descs {
		c, _ := s.txIndex(d.Addr)
		s.owner[s.rxCount+c] = ownKernelTx
		s.txInKernel[c]++
		s.tx.descs[(s.tx.cachedProd+uint32(i))&s.tx.mask] = d
		bytes += uint64(d.Len)
		if !d.More() {
			packets++
		}
	}
	if len(descs) > 0 {
		s.tx.prodSubmit(uint32(len(descs)))
	}
	s.ctr.txBytes.Add(bytes)
	s.ctr.txPackets.Add(packets)
	s.ctr.txDescs.Add(uint64(len(descs)))
	s.ctr.freeTx.Store(int64(len(s.freeTx)))
}

// Flush wakes the kernel's transmit path when it asks for it (need_wakeup;
// in copy mode that is every batch) and reaps completions. Transient
// conditions (EAGAIN, EBUSY, ENOBUFS) are not errors: the frames stay
// queued and the next Flush retries.
func (s *Socket) Flush() error {
	if s.closed {
		return ErrClosed
	}
	// Copy mode sends a bounded batch per sendto and reports EAGAIN when
	// more is left, so kick until the ring drains or the kernel pushes back.
	for i := 0; i < 64 && s.tx.prodOutstanding() > 0 && s.tx.needWakeup(); i++ {
		s.ctr.kicks.Add(1)
		// A raw system call: the kick never sleeps (MSG_DONTWAIT), but in
		// copy mode it does the wire's work for a whole batch, often past
		// the Go runtime's 20µs mark, after which a regular Syscall has
		// its P taken and handed to another thread, and must win one back
		// when it returns. write_bw 64 KiB, 10 alternated runs: +2% with
		// one QP, +3.5% with 1024.
		_, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		if errno == 0 {
			continue
		}
		if errno == unix.EAGAIN {
			continue
		}
		if errno == unix.EBUSY || errno == unix.ENOBUFS {
			break
		}
		s.ctr.kickErrors.Add(1)
		s.Complete()
		return fmt.Errorf("AF_XDP transmit kick: %w", errno)
	}
	s.Complete()
	return nil
}

// TxPending returns how many descriptors are on the TX ring that the
// kernel has not taken yet.
func (s *Socket) TxPending() int {
	if s.closed {
		return 0
	}
	return int(s.tx.prodOutstanding())
}

// Complete moves sent frames from the completion ring back to the free
// transmit frames and returns how many.
func (s *Socket) Complete() int {
	if s.closed {
		return 0
	}
	n := s.comp.consAvail()
	for i := uint32(0); i < n; i++ {
		addr := s.comp.addrs[(s.comp.cachedCons+i)&s.comp.mask]
		addr = addr&(1<<unalignedOffsetShift-1) + addr>>unalignedOffsetShift
		c, ok := s.txIndex(addr)
		if !ok || s.owner[s.rxCount+c] != ownKernelTx || s.txInKernel[c] == 0 {
			s.ctr.ownershipErrors.Add(1) // the kernel returned a frame twice: never reuse it blindly
			continue
		}
		// A frame sent as several descriptors is free once all are back.
		if s.txInKernel[c]--; s.txInKernel[c] > 0 {
			continue
		}
		s.owner[s.rxCount+c] = ownFreeTx
		s.freeTx = append(s.freeTx, s.txAddr(c))
	}
	if n > 0 {
		s.comp.consRelease(n)
		s.ctr.txCompleted.Add(uint64(n))
		s.ctr.freeTx.Store(int64(len(s.freeTx)))
	}
	return int(n)
}

// Wait blocks until a frame is ready to receive, the optional extra file
// descriptor (e.g. an eventfd doorbell; -1 for none) becomes readable, or
// timeout passes (negative: no timeout). It reports whether the socket is
// readable.
func (s *Socket) Wait(timeout time.Duration, extraFD int) (bool, error) {
	if s.closed {
		return false, ErrClosed
	}
	if s.rx.consAvail() > 0 {
		return true, nil
	}
	fds := [2]unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}, {Fd: int32(extraFD), Events: unix.POLLIN}}
	nfds := 1
	if extraFD >= 0 {
		nfds = 2
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	for {
		_, err := unix.Poll(fds[:nfds], ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("poll AF_XDP socket: %w", err)
		}
		return fds[0].Revents&unix.POLLIN != 0, nil
	}
}

// Stats reads the kernel's ring statistics and adds the socket's counters.
// Unlike the other methods it may be called from any goroutine while the
// socket is in use (but not concurrently with Close).
func (s *Socket) Stats() (Stats, error) {
	c := &s.ctr
	st := Stats{Counters: Counters{
		RxPackets: c.rxPackets.Load(), RxDescs: c.rxDescs.Load(), RxBytes: c.rxBytes.Load(),
		TxPackets: c.txPackets.Load(), TxDescs: c.txDescs.Load(), TxBytes: c.txBytes.Load(),
		TxCompleted: c.txCompleted.Load(), Kicks: c.kicks.Load(), KickErrors: c.kickErrors.Load(),
		RxWakeups: c.rxWakeups.Load(), OwnershipErrors: c.ownershipErrors.Load(),
	}, FreeTxFrames: int(c.freeTx.Load()), FreeRxFrames: int(c.freeRx.Load())}
	if s.closed {
		return st, ErrClosed
	}
	var ks unix.XDPStatistics
	if err := getsockopt(s.fd, unix.XDP_STATISTICS, unsafe.Pointer(&ks), unsafe.Sizeof(ks)); err != nil {
		return st, fmt.Errorf("XDP_STATISTICS: %w", err)
	}
	st.RxDropped, st.RxInvalidDescs, st.TxInvalidDescs = ks.Rx_dropped, ks.Rx_invalid_descs, ks.Tx_invalid_descs
	st.RxRingFull, st.RxFillRingEmpty, st.TxRingEmpty = ks.Rx_ring_full, ks.Rx_fill_ring_empty_descs, ks.Tx_ring_empty_descs
	// Only the shared indexes, never the driving goroutine's caches.
	st.FillPending = s.fill.published()
	st.TxPending = s.tx.published()
	return st, nil
}

// Close unbinds the socket and frees the rings and the UMEM. Frames and
// slices obtained from the socket must not be used afterwards.
func (s *Socket) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.fd >= 0 {
		if err := unix.Close(s.fd); err != nil {
			errs = append(errs, fmt.Errorf("close AF_XDP socket: %w", err))
		}
		s.fd = -1
	}
	for _, r := range []*ring{&s.fill.ring, &s.comp.ring, &s.rx.ring, &s.tx.ring} {
		if r.mem != nil {
			if err := unix.Munmap(r.mem); err != nil {
				errs = append(errs, fmt.Errorf("unmap ring: %w", err))
			}
			r.mem = nil
		}
	}
	// The kernel pinned the UMEM pages; unmapping our view is safe even if
	// it releases them a little later.
	if s.umem != nil {
		if err := unix.Munmap(s.umem); err != nil {
			errs = append(errs, fmt.Errorf("unmap UMEM: %w", err))
		}
		s.umem = nil
	}
	return errors.Join(errs...)
}
