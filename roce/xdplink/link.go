package xdplink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/bpf"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/xdp"
)

// Config configures an AF_XDP link.
type Config struct {
	// Addrs are the addresses whose RoCEv2 frames are steered to softnic
	// (the device's GID table); other traffic stays with the kernel.
	Addrs []netip.Addr
	// Socket sizes each per-queue AF_XDP socket; MultiBuffer is set
	// automatically when the link MTU needs it, and with it the contiguous
	// layout unless the mode is ModeZeroCopy (ModeAuto tries zero-copy
	// first, and where the driver's zero-copy takes single-buffer frames
	// only, binds zero-copy for the interface's MTU rather than copy mode
	// for CarryMTU).
	Socket xdp.Config
	// Mode selects native or generic XDP (default: whatever the driver offers).
	Mode bpf.Mode
	// KeepIRQs leaves the interrupt vectors of the queues where they are.
	// By default each engine's queues have their vectors moved to one
	// CPU, the one their first receive vector was on (see CPU), and moved
	// back on Close.
	KeepIRQs bool
	// IRQState, if set, is a file where the link records the vectors it
	// moved: Open first gives back what a killed process recorded there,
	// and Close removes it (a daemon's /run/softnic/DEVICE.irqs).
	IRQState string
	// CarryMTU, if above the interface's MTU, sizes the frames for a link
	// of that MTU, so that the link can follow the interface's MTU up to
	// it (SetMTU) without being opened again: a daemon asks for what the
	// largest IB MTU needs (roce.LinkMTUFor). Where the sockets cannot be
	// opened so (no multi-buffer), Open sizes them for the interface's
	// MTU instead; CarriedMTU says which.
	CarryMTU int
}

// Stats gathers the link's counters.
type Stats struct {
	Program     bpf.Stats   `rdma:"-"` // named xdp_* by AppendCounters
	Sockets     []xdp.Stats `rdma:"-"`
	RxOversized uint64      // multi-buffer frames longer than MTU+26 bytes: dropped
	RxBadDesc   uint64      // descriptors outside the UMEM: dropped
	RxJoined    uint64      // multi-buffer frames copied into one buffer to deliver them
	TxStaged    uint64      // frames copied from a staging buffer into several chunks
	TxNoBuffer  uint64      // TxFrame calls that found no free buffer
	TxQueued    int         `rdma:"-"` // frames sent but not yet on the TX ring (ring full): a gauge
	TxBusyWaits uint64      // engine waits that began with frames the kernel had not taken
}

// Link is a roce.Link over AF_XDP on a real interface: softnic's XDP program
// steers RoCEv2 frames for its addresses into one AF_XDP socket per receive
// queue. Used whole, the link receives from all the sockets and sends
// through the socket of queue 0; Split divides the queues among several
// links, one per engine of a Device.
//
// Frames are built in place in the UMEM and delivered from it. When a frame
// of MTU+22 bytes fits one UMEM chunk, TxFrame lends a chunk. On larger MTUs
// (9000 with 4 KiB chunks) frames take several descriptors (multi-buffer).
// In copy mode the sockets then use the contiguous layout (see package
// xdp): TxFrame lends a frame of several adjacent chunks, and a received
// frame's pieces lie one after the other, so neither direction copies. In
// zero-copy mode, TxFrame lends a staging buffer, Send copies the frame
// into as many chunks as it needs, and received multi-buffer frames are
// copied into one buffer before delivery.
type Link struct {
	*queueSet // the whole link: every socket
	ifname    string
	mtu       atomic.Int64 // the link's MTU: the interface's (ifMTU), at most carry
	ifMTU     atomic.Int64 // the interface's MTU as last told (SetMTU)
	carry     int          // the largest MTU the frames are sized for: bufLen-26
	mac       [6]byte
	prog      *bpf.Program
	socks     []*xdp.Socket
	closed    atomic.Bool
	frags     int // UMEM chunks a frame may take
	txFrames  int // frames a socket can transmit at once
	sets      []*queueSet
	split     bool

	bufLen  int // carry+26: largest frame plus slack, as TxFrame promises
	inPlace bool

	keepIRQs   bool
	irqState   string
	irqMu      sync.Mutex
	irqsMoved  []irqAffinity
	irqCPUs    unix.CPUSet // the CPUs alignIRQs chose so far
	irqsClosed bool

	// bindNote says why the bind mode is not what the driver offers, or
	// warns of a driver's known fault (zeroCopyHazard); "" when neither.
	bindNote string

	groupMu sync.Mutex
	groups  groupSockets // the multicast groups joined (mcast.go)
	// flowMACs are the group MAC addresses the interface was told to
	// receive for the device's flows (flows.go), under groupMu.
	flowMACs map[[6]byte]bool

	// Read by Stats from other goroutines.
	rxOversized, rxBadDesc, rxJoined, txStaged, txNoBuffer, txBusyWaits atomic.Uint64
}

var _ roce.Splitter = (*Link)(nil)

// ErrLinkDown is returned by Open for an interface that is down; its other
// errors come from packages bpf and xdp.
var ErrLinkDown = errors.New("interface is down")

// Open attaches softnic's XDP program to the interface named ifname
// (in the calling thread's network namespace), opens an AF_XDP socket on
// each of its receive queues and steers RoCEv2 frames for cfg.Addrs into
// them. On error nothing is left attached.
func Open(ifname string, cfg Config) (*Link, error) {
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("AF_XDP link on %q: %w (%v)", ifname, bpf.ErrNoInterface, err)
	}
	if ifc.Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("AF_XDP link on %q: %w", ifname, ErrLinkDown)
	}
	if cfg.IRQState != "" {
		if err := restoreIRQState(cfg.IRQState); err != nil {
			return nil, fmt.Errorf("AF_XDP link on %q: restore interrupt vectors: %w", ifname, err)
		}
	}
	carry := max(ifc.MTU, cfg.CarryMTU)
	note := ""
	if cfg.Socket.Mode != xdp.ModeCopy {
		switch hazard := zeroCopyHazard(ifname); {
		case hazard != "" && cfg.Socket.Mode == xdp.ModeAuto:
			cfg.Socket.Mode, note = xdp.ModeCopy, "copy mode chosen: "+hazard
		case hazard != "":
			note = "zero-copy as asked, but " + hazard
		}
	}
	l, err := openAt(ifc, carry, cfg)
	if l != nil {
		l.bindNote = note
	}
	return l, err
}

// openAt is Open once the mode is settled.
func openAt(ifc *net.Interface, carry int, cfg Config) (*Link, error) {
	if l, ok := openZeroCopyAtMTU(ifc, carry, cfg); ok {
		return l, nil
	}
	l, err := open(ifc, carry, cfg)
	if err != nil && carry > ifc.MTU {
		// Frames for the larger MTU may need multi-buffer, which the
		// driver or kernel may not offer: frames for today's MTU, and
		// an MTU that follows the interface's only up to there.
		l, err = open(ifc, ifc.MTU, cfg)
	}
	return l, err
}

// openZeroCopyAtMTU opens the link zero-copy with frames for the
// interface's MTU, where ModeAuto would otherwise end in copy mode: frames
// for carry need multi-buffer, and the driver offers zero-copy but for
// one buffer a frame only (virtio-net, xdp-zc-max-segs 1). Zero-copy is
// worth more than following the MTU past today's without a restart.
func openZeroCopyAtMTU(ifc *net.Interface, carry int, cfg Config) (*Link, bool) {
	if cfg.Socket.Mode != xdp.ModeAuto || carry <= ifc.MTU || !socketConfig(cfg.Socket, carry+26).MultiBuffer {
		return nil, false
	}
	f, err := xdp.QueryDriverFeatures(ifc.Index)
	if err != nil || !f.ZeroCopy() || f.ZCMaxSegs > 1 {
		return nil, false
	}
	cfg.Socket.Mode = xdp.ModeZeroCopy
	l, err := open(ifc, ifc.MTU, cfg)
	return l, err == nil
}

// open is Open with frames sized for a link of MTU carry.
func open(ifc *net.Interface, carry int, cfg Config) (l *Link, err error) {
	ifname := ifc.Name
	queues := rxQueues(ifc.Index)
	l = &Link{ifname: ifname, carry: carry, bufLen: carry + 26, keepIRQs: cfg.KeepIRQs, irqState: cfg.IRQState}
	l.mtu.Store(int64(ifc.MTU))
	l.ifMTU.Store(int64(ifc.MTU))
	l.groups.open(ifc.Index)
	copy(l.mac[:], ifc.HardwareAddr)
	defer func() {
		if err != nil {
			l.Close()
			l = nil
		}
	}()
	if l.prog, err = bpf.Attach(ifname, cfg.Mode); err != nil {
		return l, fmt.Errorf("AF_XDP link: %w", err)
	}
	for _, a := range cfg.Addrs {
		if err := l.prog.AddAddr(a); err != nil {
			return l, fmt.Errorf("AF_XDP link on %q: %w", ifname, err)
		}
	}
	sc, err := l.openSockets(ifc.Index, queues, socketConfig(cfg.Socket, l.bufLen))
	if err != nil {
		return l, fmt.Errorf("AF_XDP link on %q: %w", ifname, err)
	}
	l.inPlace = l.bufLen <= l.socks[0].TxFrameSize()
	l.frags = (l.bufLen + sc.FrameSize - 1) / sc.FrameSize
	l.txFrames = sc.NumFrames
	if l.queueSet, err = l.newQueueSet(l.socks); err != nil {
		return l, err
	}
	return l, nil
}

// SetMTU tells the link the interface's MTU changed to mtu: it sends and
// receives IP packets of up to that size from now on, or of up to
// CarriedMTU if mtu is larger. It returns the MTU the link now has. Any
// goroutine may call it.
func (l *Link) SetMTU(mtu int) int {
	l.ifMTU.Store(int64(mtu))
	mtu = min(mtu, l.carry)
	l.mtu.Store(int64(mtu))
	return mtu
}

// CarriedMTU is the largest MTU the link's frames are sized for
// (Config.CarryMTU or the interface's MTU at Open).
func (l *Link) CarriedMTU() int { return l.carry }

// rxQueues returns how many receive queues of the interface get a socket.
func rxQueues(ifindex int) int {
	if nl, err := netlink.LinkByIndex(ifindex); err == nil && nl.Attrs().NumRxQueues > 1 {
		return min(nl.Attrs().NumRxQueues, bpf.MaxQueues)
	}
	return 1
}

// socketConfig fills in the defaults of sc for frames of up to bufLen bytes.
func socketConfig(sc xdp.Config, bufLen int) xdp.Config {
	if sc.FrameSize == 0 {
		sc.FrameSize = 4096
	}
	if sc.NumFrames == 0 {
		sc.NumFrames = 4096
	}
	// Copy mode puts received data 256 bytes (XDP_PACKET_HEADROOM) into
	// the chunk; frames that do not fit after it need multi-buffer.
	if bufLen > sc.FrameSize-unix.XDP_PACKET_HEADROOM {
		sc.MultiBuffer = true
	}
	return sc
}

// openSockets opens a socket on each of the first queues receive queues
// and steers their frames to it. It returns the configuration the sockets
// use, which queue 0's decides (openFirstSocket).
func (l *Link) openSockets(ifindex, queues int, sc xdp.Config) (xdp.Config, error) {
	for q := 0; q < queues; q++ {
		var s *xdp.Socket
		var err error
		if q == 0 {
			s, sc, err = openFirstSocket(ifindex, l.bufLen, sc)
		} else {
			s, err = xdp.Open(ifindex, q, sc)
		}
		if err != nil {
			if q > 0 && errors.Is(err, xdp.ErrNoQueue) {
				break // fewer active queues than allocated ones
			}
			return sc, err
		}
		l.socks = append(l.socks, s)
		if err := l.prog.SetSocket(q, s.FD()); err != nil {
			return sc, err
		}
	}
	return sc, nil
}

func (l *Link) newQueueSet(socks []*xdp.Socket) (*queueSet, error) {
	q := &queueSet{l: l, socks: socks, tx: socks[0], wakeFD: -1}
	var err error
	if q.wakeFD, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("AF_XDP link on %q: eventfd: %w", l.ifname, err)
	}
	// Wake may be called from any goroutine, even racing with Close, so
	// the eventfd is closed only once nothing can reach the set any more:
	// closing it in Close could make a late Wake write to a reused fd.
	runtime.AddCleanup(q, func(fd int) { unix.Close(fd) }, q.wakeFD)
	q.rxDescs = make([]xdp.Desc, 64*l.frags)
	q.rxBuf = make([]byte, l.bufLen)
	if !l.inPlace {
		// Enough staging buffers to keep the TX ring busy.
		n := 64
		q.staging = make([]byte, n*l.bufLen)
		q.reserve = make([][]xdp.Desc, n)
		for i := range n {
			q.reserve[i] = make([]xdp.Desc, 0, l.frags)
			q.stagingFree = append(q.stagingFree, i)
		}
	}
	q.txq = make([]xdp.Desc, 0, l.txFrames) // never more than the transmit frames
	l.sets = append(l.sets, q)
	return q, nil
}

// NumQueues implements Splitter: the receive queues with a socket.
func (l *Link) NumQueues() int { return len(l.socks) }

// Split implements Splitter: link i of the n receives from queues i, i+n,
// i+2n... and sends through queue i. The whole link must not send or
// receive afterwards (Stats and Close still work), and Split works once.
func (l *Link) Split(n int) ([]roce.Link, error) {
	if n < 1 || n > len(l.socks) || l.split {
		return nil, fmt.Errorf("split AF_XDP link on %q with %d queues in %d: %w", l.ifname, len(l.socks), n, roce.ErrSplit)
	}
	l.split = true
	links := make([]roce.Link, n)
	for i := range n {
		var socks []*xdp.Socket
		for k := i; k < len(l.socks); k += n {
			socks = append(socks, l.socks[k])
		}
		q, err := l.newQueueSet(socks)
		if err != nil {
			return nil, err
		}
		links[i] = q
	}
	return links, nil
}

// openFirstSocket opens the socket of queue 0. Frames that need several
// chunks are staged in zero-copy mode but laid out contiguously in copy
// mode, so ModeAuto asks for zero-copy first. It returns the configuration
// the other queues' sockets are to use.
func openFirstSocket(ifindex, bufLen int, sc xdp.Config) (*xdp.Socket, xdp.Config, error) {
	if !sc.MultiBuffer || sc.Mode == xdp.ModeZeroCopy || sc.Contiguous {
		s, err := xdp.Open(ifindex, 0, sc)
		return s, sc, err
	}
	if sc.Mode == xdp.ModeAuto {
		zc := sc
		zc.Mode = xdp.ModeZeroCopy
		if s, err := xdp.Open(ifindex, 0, zc); err == nil {
			return s, zc, nil
		}
		// No zero-copy (veth, most drivers without multi-buffer zero-copy):
		// copy mode below reports whatever is really wrong.
	}
	frame := sc.FrameSize
	if frame == 0 {
		frame = 4096
	}
	sc.Contiguous = true
	sc.TxFrameSize = (bufLen + frame - 1) / frame * frame
	s, err := xdp.Open(ifindex, 0, sc)
	return s, sc, err
}

// poolRelease bounds how long Close waits for the kernel to release the
// closed sockets' buffer pools before it detaches the program.
const poolRelease = 2 * time.Second

// Program returns the attached steering program (to add or remove addresses).
func (l *Link) Program() *bpf.Program { return l.prog }

// Stats returns the program's, the sockets' and the link's counters. Any
// goroutine may call it while the link runs (not concurrently with Close).
func (l *Link) Stats() (Stats, error) {
	st := Stats{RxOversized: l.rxOversized.Load(), RxBadDesc: l.rxBadDesc.Load(), RxJoined: l.rxJoined.Load(), TxStaged: l.txStaged.Load(),
		TxNoBuffer: l.txNoBuffer.Load(), TxBusyWaits: l.txBusyWaits.Load()}
	for _, q := range l.sets {
		st.TxQueued += int(q.txQueued.Load())
	}
	var errs []error
	var err error
	if st.Program, err = l.prog.Stats(); err != nil {
		errs = append(errs, err)
	}
	for _, s := range l.socks {
		ss, err := s.Stats()
		errs = append(errs, err)
		st.Sockets = append(st.Sockets, ss)
	}
	return st, errors.Join(errs...)
}

// Close detaches the XDP program (the interface is as before Open)
// and frees the sockets. Close the Device using the link first.
func (l *Link) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	var errs []error
	l.groupMu.Lock()
	l.setFlowMACs(nil) // not the socket's: the interface keeps them otherwise
	l.groups.close()
	l.groupMu.Unlock()
	// The sockets go first, the program last: a driver that turns queues
	// off with its program (virtio-net's XDP_TX ones) must see their pools
	// released first (xdp.WaitPoolsReleased says why).
	var queues []int
	for q, s := range l.socks {
		if l.prog != nil {
			l.prog.ClearSocket(q)
		}
		queues = append(queues, s.Queue())
		errs = append(errs, s.Close())
	}
	if l.prog != nil {
		if len(queues) > 0 && !xdp.WaitPoolsReleased(l.prog.Ifindex(), queues, poolRelease) {
			errs = append(errs, fmt.Errorf("AF_XDP link on %q: the kernel still holds a socket's pool after %v", l.ifname, poolRelease))
		}
		errs = append(errs, l.prog.Close())
	}
	l.irqMu.Lock()
	restoreIRQs(l.irqsMoved)
	l.irqsMoved, l.irqsClosed = nil, true
	if l.irqState != "" {
		errs = append(errs, saveIRQState(l.irqState, nil))
	}
	l.irqMu.Unlock()
	for _, q := range l.sets {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		unix.Write(q.wakeFD, one[:]) // a Wait still in ppoll returns
	}
	return errors.Join(errs...)
}
