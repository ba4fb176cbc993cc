package roce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/softnic/softnic/bpf"
	"github.com/softnic/softnic/xdp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// XDPLinkConfig configures an AF_XDP link.
type XDPLinkConfig struct {
	// Addrs are the addresses whose RoCEv2 frames are steered to softnic
	// (the device's GID table); other traffic stays with the kernel.
	Addrs []netip.Addr
	// Socket sizes each per-queue AF_XDP socket; MultiBuffer is set
	// automatically when the link MTU needs it, and with it the contiguous
	// layout unless the mode is ModeZeroCopy (ModeAuto tries zero-copy
	// first).
	Socket xdp.Config
	// Mode selects native or generic XDP (default: whatever the driver offers).
	Mode bpf.Mode
}

// XDPLinkStats gathers the link's counters.
type XDPLinkStats struct {
	Program     bpf.Stats
	Sockets     []xdp.Stats
	RxOversized uint64 // multi-buffer frames longer than MTU+26 bytes: dropped
	RxBadDesc   uint64 // descriptors outside the UMEM: dropped
	RxJoined    uint64 // multi-buffer frames copied into one buffer to deliver them
	TxStaged    uint64 // frames copied from a staging buffer into several chunks
	TxNoBuffer  uint64 // TxFrame calls that found no free buffer
	TxQueued    int    // frames sent but not yet on the TX ring (ring full)
}

// XDPLink is a Link over AF_XDP on a real interface: softnic's XDP program
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
type XDPLink struct {
	*queueSet // the whole link: every socket
	ifname    string
	mtu       int
	mac       [6]byte
	prog      *bpf.Program
	socks     []*xdp.Socket
	closed    atomic.Bool
	frags     int // UMEM chunks a frame may take
	txFrames  int // frames a socket can transmit at once
	sets      []*queueSet
	split     bool

	bufLen  int // MTU+26: largest frame plus slack, as TxFrame promises
	inPlace bool

	// Read by Stats from other goroutines.
	rxOversized, rxBadDesc, rxJoined, txStaged, txNoBuffer atomic.Uint64
}

// queueSet is a Link over some of an XDPLink's sockets: it receives from
// all of them and sends through the first. One goroutine drives it.
type queueSet struct {
	l      *XDPLink
	socks  []*xdp.Socket
	tx     *xdp.Socket
	wakeFD int

	staging     []byte       // backing of the staging buffers (large MTU), bufLen each
	stagingFree []int        // indexes of the staging buffers not lent out
	reserve     [][]xdp.Desc // chunks reserved for each lent staging buffer, by index
	txq         []xdp.Desc
	starved     bool
	txQueued    atomic.Int64 // read by Stats

	rxDescs []xdp.Desc
	rxBuf   []byte
	next    int // socket to receive from first, for fairness
}

var _ Link = (*XDPLink)(nil)

// Errors of OpenXDPLink besides those of packages bpf and xdp.
var ErrLinkDown = errors.New("interface is down")

// OpenXDPLink attaches softnic's XDP program to the interface named ifname
// (in the calling thread's network namespace), opens an AF_XDP socket on
// each of its receive queues and steers RoCEv2 frames for cfg.Addrs into
// them. On error nothing is left attached.
func OpenXDPLink(ifname string, cfg XDPLinkConfig) (l *XDPLink, err error) {
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("AF_XDP link on %q: %w (%v)", ifname, bpf.ErrNoInterface, err)
	}
	if ifc.Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("AF_XDP link on %q: %w", ifname, ErrLinkDown)
	}
	queues := 1
	if nl, err := netlink.LinkByIndex(ifc.Index); err == nil && nl.Attrs().NumRxQueues > 1 {
		queues = min(nl.Attrs().NumRxQueues, bpf.MaxQueues)
	}
	l = &XDPLink{ifname: ifname, mtu: ifc.MTU}
	copy(l.mac[:], ifc.HardwareAddr)
	defer func() {
		if err != nil {
			l.Close()
			l = nil
		}
	}()
	sc := cfg.Socket
	if sc.FrameSize == 0 {
		sc.FrameSize = 4096
	}
	if sc.NumFrames == 0 {
		sc.NumFrames = 4096
	}
	l.bufLen = l.mtu + 26
	// Copy mode puts received data 256 bytes (XDP_PACKET_HEADROOM) into
	// the chunk; frames that do not fit after it need multi-buffer.
	if l.bufLen > sc.FrameSize-unix.XDP_PACKET_HEADROOM {
		sc.MultiBuffer = true
	}
	if l.prog, err = bpf.Attach(ifname, cfg.Mode); err != nil {
		return l, fmt.Errorf("AF_XDP link: %w", err)
	}
	for _, a := range cfg.Addrs {
		if err := l.prog.AddAddr(a); err != nil {
			return l, fmt.Errorf("AF_XDP link on %q: %w", ifname, err)
		}
	}
	for q := 0; q < queues; q++ {
		var s *xdp.Socket
		if q == 0 {
			s, sc, err = openFirstSocket(ifc.Index, l.bufLen, sc)
		} else {
			s, err = xdp.Open(ifc.Index, q, sc)
		}
		if err != nil {
			if q > 0 && errors.Is(err, xdp.ErrNoQueue) {
				break // fewer active queues than allocated ones
			}
			return l, fmt.Errorf("AF_XDP link on %q: %w", ifname, err)
		}
		l.socks = append(l.socks, s)
		if err := l.prog.SetSocket(q, s.FD()); err != nil {
			return l, fmt.Errorf("AF_XDP link on %q: %w", ifname, err)
		}
	}
	l.inPlace = l.bufLen <= l.socks[0].TxFrameSize()
	l.frags = (l.bufLen + sc.FrameSize - 1) / sc.FrameSize
	l.txFrames = sc.NumFrames
	if l.queueSet, err = l.newQueueSet(l.socks); err != nil {
		return l, err
	}
	return l, nil
}

func (l *XDPLink) newQueueSet(socks []*xdp.Socket) (*queueSet, error) {
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
func (l *XDPLink) NumQueues() int { return len(l.socks) }

// Split implements Splitter: link i of the n receives from queues i, i+n,
// i+2n... and sends through queue i. The whole link must not send or
// receive afterwards (Stats and Close still work), and Split works once.
func (l *XDPLink) Split(n int) ([]Link, error) {
	if n < 1 || n > len(l.socks) || l.split {
		return nil, fmt.Errorf("split AF_XDP link on %q with %d queues in %d: %w", l.ifname, len(l.socks), n, ErrSplit)
	}
	l.split = true
	links := make([]Link, n)
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

// MTU implements Link.
func (q *queueSet) MTU() int { return q.l.mtu }

// HardwareAddr implements Link.
func (q *queueSet) HardwareAddr() [6]byte { return q.l.mac }

// Close implements Link: it closes the whole link.
func (q *queueSet) Close() error { return q.l.Close() }

// Program returns the attached steering program (to add or remove addresses).
func (l *XDPLink) Program() *bpf.Program { return l.prog }

// TxFrame implements Link.
func (q *queueSet) TxFrame() []byte {
	if q.l.closed.Load() {
		return nil
	}
	if q.l.inPlace {
		_, buf, ok := q.tx.NextTxFrame()
		if !ok {
			q.starve()
			return nil
		}
		q.starved = false
		return buf[:q.l.bufLen]
	}
	// Staging buffer, with the chunks it will need reserved now so Send
	// cannot fail.
	if len(q.stagingFree) == 0 {
		q.starve()
		return nil
	}
	i := q.stagingFree[len(q.stagingFree)-1]
	res := q.reserve[i][:0]
	for n := 0; n < cap(res); n++ {
		d, _, ok := q.tx.NextTxFrame()
		if !ok {
			for _, d := range res {
				q.tx.FreeTxFrame(d)
			}
			q.starve()
			return nil
		}
		res = append(res, d)
	}
	q.reserve[i] = res
	q.stagingFree = q.stagingFree[:len(q.stagingFree)-1]
	q.starved = false
	return q.staging[i*q.l.bufLen : (i+1)*q.l.bufLen : (i+1)*q.l.bufLen]
}

// stagingIndex returns which lent staging buffer frame starts, or -1.
func (q *queueSet) stagingIndex(frame []byte) int {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(q.staging)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(frame)))
	if p < base || p >= base+uintptr(len(q.staging)) || (p-base)%uintptr(q.l.bufLen) != 0 {
		return -1
	}
	i := int((p - base) / uintptr(q.l.bufLen))
	if len(q.reserve[i]) == 0 {
		return -1 // not lent out
	}
	return i
}

func (q *queueSet) starve() {
	q.l.txNoBuffer.Add(1)
	q.starved = true
}

// Send implements Link.
func (q *queueSet) Send(frame []byte) {
	if len(frame) == 0 {
		return
	}
	if q.l.inPlace {
		addr, ok := q.tx.Offset(frame)
		if !ok {
			return // not one of our buffers: nothing to send or return
		}
		q.txq = q.tx.AppendTx(q.txq, xdp.Desc{Addr: addr}, len(frame))
		return
	}
	i := q.stagingIndex(frame)
	if i < 0 {
		return
	}
	res := q.reserve[i]
	off, used := 0, 0
	for off < len(frame) && used < len(res) {
		d := res[used]
		buf := q.tx.Frame(xdp.Desc{Addr: d.Addr, Len: uint32(q.tx.FrameSize())})
		c := copy(buf, frame[off:])
		off += c
		d.Len = uint32(c)
		d.SetMore(off < len(frame))
		q.txq = append(q.txq, d)
		used++
	}
	for _, d := range res[used:] {
		q.tx.FreeTxFrame(d)
	}
	if used > 1 {
		q.l.txStaged.Add(1)
	}
	q.reserve[i] = res[:0]
	q.stagingFree = append(q.stagingFree, i)
}

// Flush implements Link.
func (q *queueSet) Flush() error {
	if q.l.closed.Load() {
		return ErrLinkClosed
	}
	if len(q.txq) > 0 {
		n, err := q.tx.Transmit(q.txq)
		q.txq = q.txq[:copy(q.txq, q.txq[n:])]
		if err != nil {
			// The packet at the head has a descriptor the socket refuses:
			// drop that packet, or it would block the queue for good.
			end := 0
			for end < len(q.txq) && q.txq[end].More() {
				end++
			}
			end = min(end+1, len(q.txq))
			q.txq = q.txq[:copy(q.txq, q.txq[end:])]
			return fmt.Errorf("AF_XDP link on %q: %w", q.l.ifname, err)
		}
	}
	q.txQueued.Store(int64(len(q.txq)))
	if err := q.tx.Flush(); err != nil {
		return fmt.Errorf("AF_XDP link on %q: %w", q.l.ifname, err)
	}
	return nil
}

// Receive implements Link.
func (q *queueSet) Receive(fn func(frame []byte), max int) int {
	if q.l.closed.Load() {
		return 0
	}
	delivered := 0
	for k := 0; k < len(q.socks) && delivered < max; k++ {
		s := q.socks[(q.next+k)%len(q.socks)]
		descs := q.rxDescs
		if lim := (max - delivered) * (len(q.rxDescs) / 64); lim < len(descs) {
			descs = descs[:lim]
		}
		n := s.Receive(descs)
		delivered += q.deliver(s, descs[:n], fn)
		s.Release(descs[:n])
	}
	q.next++
	return delivered
}

func (q *queueSet) deliver(s *xdp.Socket, descs []xdp.Desc, fn func([]byte)) int {
	delivered := 0
	for first := 0; first < len(descs); {
		end := first // the frame is descs[first:end+1]
		for end < len(descs)-1 && descs[end].More() {
			end++
		}
		if descs[end].More() {
			// Receive splits a packet only when it alone has more
			// descriptors than rxDescs holds: far over the MTU.
			q.l.rxOversized.Add(1)
		} else if b := q.frameBytes(s, descs[first:end+1]); b != nil {
			fn(b)
			delivered++
		}
		first = end + 1
	}
	return delivered
}

// frameBytes returns a received frame's bytes: in place when it has one
// descriptor or its pieces follow each other in the UMEM (the contiguous
// layout), otherwise joined in rxBuf. It returns nil for a frame it drops
// (and counts).
func (q *queueSet) frameBytes(s *xdp.Socket, frame []xdp.Desc) []byte {
	if len(frame) == 1 {
		b := s.Frame(frame[0])
		if b == nil {
			q.l.rxBadDesc.Add(1)
		}
		return b
	}
	if b := s.Span(frame); b != nil {
		if len(b) > len(q.rxBuf) {
			q.l.rxOversized.Add(1)
			return nil
		}
		return b
	}
	asm := 0
	for _, d := range frame {
		b := s.Frame(d)
		if b == nil {
			q.l.rxBadDesc.Add(1)
			return nil
		}
		if asm+len(b) > len(q.rxBuf) {
			q.l.rxOversized.Add(1)
			return nil
		}
		asm += copy(q.rxBuf[asm:], b)
	}
	q.l.rxJoined.Add(1)
	return q.rxBuf[:asm]
}

// Wait implements Link.
func (q *queueSet) Wait(timeout time.Duration) error {
	if q.l.closed.Load() {
		return ErrLinkClosed
	}
	if q.starved {
		// Completions free TX buffers without waking poll; look for them
		// now and poll briefly while starved.
		if q.tx.Complete() > 0 {
			q.starved = false
			return nil
		}
		if timeout < 0 || timeout > time.Millisecond {
			timeout = time.Millisecond
		}
	}
	var fds [1 + bpf.MaxQueues]unix.PollFd
	fds[0] = unix.PollFd{Fd: int32(q.wakeFD), Events: unix.POLLIN}
	for i, s := range q.socks {
		fds[1+i] = unix.PollFd{Fd: int32(s.FD()), Events: unix.POLLIN}
	}
	// ppoll, not poll: the engine's retransmission timers are finer than
	// poll's milliseconds.
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		var ts *unix.Timespec
		if timeout >= 0 {
			t := unix.NsecToTimespec(int64(timeout))
			ts = &t
		}
		_, err := unix.Ppoll(fds[:1+len(q.socks)], ts, nil)
		if err == nil {
			break
		}
		if err != unix.EINTR {
			return fmt.Errorf("AF_XDP link on %q: poll: %w", q.l.ifname, err)
		}
		// The Go runtime's preemption signals interrupt ppoll; sleep out
		// the rest of the timeout so a timed Wait is not cut short.
		if q.l.closed.Load() {
			return ErrLinkClosed
		}
		if timeout > 0 {
			if timeout = time.Until(deadline); timeout <= 0 {
				break
			}
		} else if timeout == 0 {
			break
		}
	}
	if fds[0].Revents&unix.POLLIN != 0 {
		var v [8]byte
		unix.Read(q.wakeFD, v[:])
	}
	if q.l.closed.Load() {
		return ErrLinkClosed
	}
	return nil
}

// Wake implements Link; any goroutine may call it.
func (q *queueSet) Wake() {
	if q.l.closed.Load() {
		return
	}
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(q.wakeFD, one[:])
}

// Stats returns the program's, the sockets' and the link's counters. Any
// goroutine may call it while the link runs (not concurrently with Close).
func (l *XDPLink) Stats() (XDPLinkStats, error) {
	st := XDPLinkStats{RxOversized: l.rxOversized.Load(), RxBadDesc: l.rxBadDesc.Load(), RxJoined: l.rxJoined.Load(), TxStaged: l.txStaged.Load(),
		TxNoBuffer: l.txNoBuffer.Load()}
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

// Close detaches the XDP program (the interface is as before OpenXDPLink)
// and frees the sockets. Close the Device using the link first.
func (l *XDPLink) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	var errs []error
	if l.prog != nil {
		for q := range l.socks {
			l.prog.ClearSocket(q)
		}
		errs = append(errs, l.prog.Close())
	}
	for _, s := range l.socks {
		errs = append(errs, s.Close())
	}
	for _, q := range l.sets {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		unix.Write(q.wakeFD, one[:]) // a Wait still in ppoll returns
	}
	return errors.Join(errs...)
}
