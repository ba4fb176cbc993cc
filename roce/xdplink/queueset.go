package xdplink

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/bpf"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/xdp"
)

// queueSet is a roce.Link over some of a Link's sockets: it receives from
// all of them and sends through the first. One goroutine drives it.
type queueSet struct {
	l      *Link
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

	cpuOnce sync.Once
	cpu     int
}

// CPU returns the CPU that takes the interrupts of the set's queues, -1
// when they have none (veth) or it is unknown. Its first call moves the
// queues' vectors to the CPU of the first queue's receive vector, unless
// Config.KeepIRQs: the engine that drives the set runs best beside them
// (irq.go says why). The Device asks only for the links its engines use.
func (q *queueSet) CPU() int {
	q.cpuOnce.Do(func() {
		queues := make([]int, len(q.socks))
		for i, s := range q.socks {
			queues[i] = s.Queue()
		}
		q.cpu = q.l.alignIRQs(queues)
	})
	return q.cpu
}

// MTU implements roce.Link.
func (q *queueSet) MTU() int { return int(q.l.mtu.Load()) }

// MaxMTU implements roce.MTULink: the MTU the frames are sized for.
func (q *queueSet) MaxMTU() int { return q.l.carry }

// NetdevMTU implements roce.MTULink: the interface's MTU (SetMTU).
func (q *queueSet) NetdevMTU() int { return int(q.l.ifMTU.Load()) }

// HardwareAddr implements roce.Link.
func (q *queueSet) HardwareAddr() [6]byte { return q.l.mac }

// Close implements roce.Link: it closes the whole link.
func (q *queueSet) Close() error { return q.l.Close() }

// TxFrame implements roce.Link.
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

// Send implements roce.Link.
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

// Flush implements roce.Link.
func (q *queueSet) Flush() error {
	if q.l.closed.Load() {
		return roce.ErrLinkClosed
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

// Receive implements roce.Link.
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
		if d := q.deliver(s, descs[:n], fn); d > 0 {
			fn(nil)
			delivered += d
		}
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
			if len(q.rxBuf) > 0 && &b[0] == &q.rxBuf[0] {
				fn(nil) // the next joined frame reuses rxBuf
			}
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

// Wait implements roce.Link.
func (q *queueSet) Wait(timeout time.Duration) error {
	_, err := q.WaitDoorbell(-1, timeout)
	return err
}

// WaitDoorbell implements roce.DoorbellLink: Wait, which also returns
// when the eventfd doorbell (if not negative) is readable, and then reads
// it. The kernel wakes the engine's thread itself, at its priority, with
// no other thread between the doorbell and the engine.
func (q *queueSet) WaitDoorbell(doorbell int, timeout time.Duration) (rung bool, err error) {
	if q.l.closed.Load() {
		return false, roce.ErrLinkClosed
	}
	if q.starved {
		// Completions free TX buffers without waking poll; look for them
		// now and poll briefly while starved.
		if q.tx.Complete() > 0 {
			q.starved = false
			return false, nil
		}
		timeout = atMost(timeout, time.Millisecond)
	}
	if len(q.txq) > 0 || q.tx.TxPending() > 0 {
		// Frames wait on the TX ring that the kernel refused (copy mode:
		// the driver's queue was full). Nothing wakes poll when the
		// driver frees room, and the receiver may have nothing left to
		// answer, so sleeping until the next timer left them there until
		// the retransmit timeout. Look again
		// soon; the next Flush kicks them, whether or not the driver
		// has completed a frame meanwhile.
		q.l.txBusyWaits.Add(1)
		timeout = atMost(timeout, txRetry)
		defer q.tx.RetryTx()
	}
	var fds [2 + bpf.MaxQueues]unix.PollFd
	fds[0] = unix.PollFd{Fd: int32(q.wakeFD), Events: unix.POLLIN}
	// A negative fd is left out by poll(2).
	fds[1] = unix.PollFd{Fd: int32(doorbell), Events: unix.POLLIN}
	for i, s := range q.socks {
		fds[2+i] = unix.PollFd{Fd: int32(s.FD()), Events: unix.POLLIN}
	}
	if err := q.ppoll(fds[:2+len(q.socks)], timeout); err != nil {
		return false, err
	}
	var v [8]byte
	if fds[0].Revents&unix.POLLIN != 0 {
		unix.Read(q.wakeFD, v[:])
	}
	if fds[1].Revents&unix.POLLIN != 0 {
		_, rerr := unix.Read(doorbell, v[:])
		rung = rerr == nil
	}
	if q.l.closed.Load() {
		return rung, roce.ErrLinkClosed
	}
	return rung, nil
}

// atMost returns timeout shortened to limit; a negative timeout (no limit)
// becomes limit.
func atMost(timeout, limit time.Duration) time.Duration {
	if timeout < 0 || timeout > limit {
		return limit
	}
	return timeout
}

// txRetry is how long Wait sleeps while frames wait on the TX ring: a
// virtio-net queue of 256 frames holds milliseconds of a guest's wire.
const txRetry = 200 * time.Microsecond

// ppoll waits for fds for up to timeout (negative: without limit). It uses
// ppoll, not poll: the engine's retransmission timers are finer than poll's
// milliseconds.
func (q *queueSet) ppoll(fds []unix.PollFd, timeout time.Duration) error {
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
		_, err := unix.Ppoll(fds, ts, nil)
		if err == nil {
			return nil
		}
		if err != unix.EINTR {
			return fmt.Errorf("AF_XDP link on %q: poll: %w", q.l.ifname, err)
		}
		// The Go runtime's preemption signals interrupt ppoll; sleep out
		// the rest of the timeout so a timed Wait is not cut short.
		if q.l.closed.Load() {
			return roce.ErrLinkClosed
		}
		if timeout > 0 {
			if timeout = time.Until(deadline); timeout <= 0 {
				return nil
			}
		} else if timeout == 0 {
			return nil
		}
	}
}

// Wake implements roce.Link; any goroutine may call it.
func (q *queueSet) Wake() {
	if q.l.closed.Load() {
		return
	}
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(q.wakeFD, one[:])
}
