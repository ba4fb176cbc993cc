package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/bpf"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/xdp"
)

// Options of one blast run.
type Options struct {
	Size     int           // Ethernet frame length without FCS (at least 64 for IPv4/UDP plus a sequence number)
	Duration time.Duration // how long to send; ignored when Count > 0
	Count    int           // frames to send; 0 means send for Duration
	MTU      int           // veth MTU; 0 picks 1500, or 9000 when Size needs it
	Batch    int           // descriptors per Transmit/Receive call
	Frames   int           // UMEM frames per socket
	BusyPoll bool
	Queues   int // queue pairs, one sending and one receiving socket each (default 1)
}

// Result of a run, as seen by the receiver.
type Result struct {
	Sent, Received uint64 // frames
	Bytes          uint64 // received frame bytes (Ethernet header included, no FCS)
	Elapsed        time.Duration
	SenderStats    xdp.Stats
	ReceiverStats  xdp.Stats
	Program        bpf.Stats
	VethDropped    uint64   // frames the sending veth dropped (receiver queue full)
	PerQueue       []uint64 // frames received on each queue
}

// FramesPerSecond is the receive rate.
func (r Result) FramesPerSecond() float64 { return float64(r.Received) / r.Elapsed.Seconds() }

// Gbps is the received Ethernet payload rate in gigabits per second.
func (r Result) Gbps() float64 { return float64(r.Bytes) * 8 / r.Elapsed.Seconds() / 1e9 }

func (o *Options) setDefaults() error {
	if o.Size < 64 {
		return fmt.Errorf("frame size %d below 64", o.Size)
	}
	if o.MTU == 0 {
		o.MTU = 1500
		if o.Size-14 > 1500 {
			o.MTU = 9000
		}
	}
	if o.Size-14 > o.MTU {
		return fmt.Errorf("frame size %d does not fit MTU %d", o.Size, o.MTU)
	}
	if o.Batch == 0 {
		o.Batch = 64
	}
	if o.Frames == 0 {
		o.Frames = 4096
	}
	if o.Queues == 0 {
		o.Queues = 1
	}
	if o.Count == 0 && o.Duration == 0 {
		o.Duration = 3 * time.Second
	}
	return nil
}

// Run builds two namespaces joined by a veth pair, attaches the steering
// program and an AF_XDP socket on the receiving end, and blasts UDP/4791
// frames from an AF_XDP socket on the sending end. Everything is removed
// before it returns.
func Run(ctx context.Context, o Options) (res Result, err error) {
	if err := o.setDefaults(); err != nil {
		return res, err
	}
	pair, err := netnstest.New(netnstest.Config{MTU: o.MTU, Queues: o.Queues})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, pair.Close()) }()
	r, err := openRig(pair, o)
	if err != nil {
		return res, err
	}
	defer r.close()

	frame := make([]byte, o.Size)
	buildFrame(frame, pair.A.MAC, pair.B.MAC, pair.A.Addr4(), pair.B.Addr4())
	c := r.run(ctx, frame, o)
	if res, err = r.sum(c); err != nil {
		return res, err
	}
	// veth drops what its peer's queue cannot take before XDP sees it.
	if l, err := pair.A.Link(); err == nil && l.Attrs().Statistics != nil {
		res.VethDropped = l.Attrs().Statistics.TxDropped
	}
	// Interrupted before a frame came, the run is stopped, not failed.
	if res.Received == 0 && ctx.Err() == nil {
		return res, fmt.Errorf("no frame arrived (sent %d; receiver %+v)", res.Sent, res.ReceiverStats)
	}
	return res, nil
}

// rig is a run's sockets: one per queue on each side, because veth hands
// a frame sent on TX queue q to the peer's RX queue q, and the receiving
// side's steering program.
type rig struct {
	prog     *bpf.Program
	rxs, txs []*xdp.Socket // on pair.B, pair.A
}

// openRig attaches the program on the receiving end and opens the sockets.
func openRig(pair *netnstest.Pair, o Options) (*rig, error) {
	r := &rig{rxs: make([]*xdp.Socket, o.Queues), txs: make([]*xdp.Socket, o.Queues)}
	if err := pair.B.Do(func() (err error) { r.prog, err = bpf.Attach(pair.B.Ifname, bpf.ModeAuto); return err }); err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	if err := r.openSockets(pair, o); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *rig) openSockets(pair *netnstest.Pair, o Options) error {
	if err := r.prog.AddAddr(pair.B.Addr4()); err != nil {
		return err
	}
	cfg := xdp.Config{NumFrames: o.Frames, MultiBuffer: o.Size > 4096-256, BusyPoll: o.BusyPoll}
	for q := range o.Queues {
		if err := pair.B.Do(func() (err error) { r.rxs[q], err = xdp.Open(pair.B.Ifindex, q, cfg); return err }); err != nil {
			return fmt.Errorf("receiver: %w", err)
		}
		if err := r.prog.SetSocket(q, r.rxs[q].FD()); err != nil {
			return err
		}
		if err := pair.A.Do(func() (err error) { r.txs[q], err = xdp.Open(pair.A.Ifindex, q, cfg); return err }); err != nil {
			return fmt.Errorf("sender: %w", err)
		}
	}
	return nil
}

// close closes the sockets, then detaches the program.
func (r *rig) close() {
	for _, s := range append(r.rxs, r.txs...) {
		if s != nil {
			s.Close()
		}
	}
	r.prog.Close()
}

// queueCounts is what each queue's sender and receiver counted.
type queueCounts struct {
	sent     []atomic.Uint64
	sendErrs []error
	rx       []rxCount
}

// run blasts frame on every queue, a sender and a receiver goroutine each,
// until the duration is over, the count is sent or ctx ends, and waits
// for the receivers to drain.
func (r *rig) run(ctx context.Context, frame []byte, o Options) *queueCounts {
	var stop, sendersDone atomic.Bool
	var senders, receivers sync.WaitGroup
	c := &queueCounts{sent: make([]atomic.Uint64, o.Queues), sendErrs: make([]error, o.Queues), rx: make([]rxCount, o.Queues)}
	for q := range o.Queues {
		qo := o
		if o.Count > 0 {
			qo.Count = o.Count / o.Queues
			if q == 0 {
				qo.Count += o.Count % o.Queues
			}
		}
		senders.Add(1)
		go func() {
			defer senders.Done()
			c.sendErrs[q] = blast(r.txs[q], frame, qo, &stop, &c.sent[q])
		}()
		receivers.Add(1)
		go func() {
			defer receivers.Done()
			c.rx[q] = receive(r.rxs[q], qo, &sendersDone)
		}()
	}
	// Stop after the duration (or on interrupt); counted runs stop by themselves.
	done := make(chan struct{})
	go func() { senders.Wait(); sendersDone.Store(true); close(done) }()
	var timeout <-chan time.Time
	if o.Count == 0 {
		timeout = time.After(o.Duration)
	}
	select {
	case <-done:
	case <-timeout:
	case <-ctx.Done():
	}
	stop.Store(true)
	<-done
	receivers.Wait()
	return c
}

// sum adds up the queues' counts and the sockets' and program's
// statistics; the elapsed time runs from the first frame received on any
// queue to the last.
func (r *rig) sum(c *queueCounts) (res Result, err error) {
	if err := errors.Join(c.sendErrs...); err != nil {
		return res, fmt.Errorf("sender: %w", err)
	}
	var first, last time.Time
	for q, rc := range c.rx {
		if rc.err != nil {
			return res, rc.err
		}
		res.Sent += c.sent[q].Load()
		res.Received += rc.frames
		res.PerQueue = append(res.PerQueue, rc.frames)
		res.Bytes += rc.bytes
		if !rc.first.IsZero() && (first.IsZero() || rc.first.Before(first)) {
			first = rc.first
		}
		if rc.last.After(last) {
			last = rc.last
		}
		ts, _ := r.txs[q].Stats()
		rs, _ := r.rxs[q].Stats()
		res.SenderStats = addStats(res.SenderStats, ts)
		res.ReceiverStats = addStats(res.ReceiverStats, rs)
	}
	res.Elapsed = last.Sub(first)
	if res.Elapsed <= 0 {
		res.Elapsed = time.Nanosecond
	}
	res.Program, _ = r.prog.Stats()
	return res, nil
}

// rxCount is what one receiving socket counted.
type rxCount struct {
	frames, bytes uint64
	first, last   time.Time
	err           error
}

// receive counts frames on one socket until it has o.Count of them, or the
// senders are done and nothing arrived for 200ms.
func receive(rx *xdp.Socket, o Options, sendersDone *atomic.Bool) (c rxCount) {
	descs := make([]xdp.Desc, o.Batch)
	start := time.Now()
	for {
		n := rx.Receive(descs)
		if n == 0 {
			if o.Count > 0 && c.frames >= uint64(o.Count) {
				return c
			}
			if sendersDone.Load() && time.Since(c.last) > 200*time.Millisecond && time.Since(start) > 200*time.Millisecond {
				return c
			}
			rx.Wait(time.Millisecond, -1)
			continue
		}
		c.last = time.Now()
		if c.first.IsZero() {
			c.first = c.last
		}
		for _, d := range descs[:n] {
			c.bytes += uint64(d.Len)
			if !d.More() {
				c.frames++
			}
		}
		if err := rx.Release(descs[:n]); err != nil {
			c.err = err
			return c
		}
	}
}

// addStats sums two sockets' statistics.
func addStats(a, b xdp.Stats) xdp.Stats {
	a.RxPackets += b.RxPackets
	a.RxDescs += b.RxDescs
	a.RxBytes += b.RxBytes
	a.TxPackets += b.TxPackets
	a.TxDescs += b.TxDescs
	a.TxBytes += b.TxBytes
	a.TxCompleted += b.TxCompleted
	a.Kicks += b.Kicks
	a.KickErrors += b.KickErrors
	a.RxWakeups += b.RxWakeups
	a.OwnershipErrors += b.OwnershipErrors
	a.RxDropped += b.RxDropped
	a.RxInvalidDescs += b.RxInvalidDescs
	a.TxInvalidDescs += b.TxInvalidDescs
	a.RxRingFull += b.RxRingFull
	a.RxFillRingEmpty += b.RxFillRingEmpty
	a.TxRingEmpty += b.TxRingEmpty
	a.FillPending += b.FillPending
	a.TxPending += b.TxPending
	a.FreeTxFrames += b.FreeTxFrames
	a.FreeRxFrames += b.FreeRxFrames
	return a
}

// blast sends frame repeatedly until stop is set or o.Count frames went out.
// Each transmit chunk gets the frame written once, on first use: the
// measurement is of the rings and the kernel path, not of memcpy.
func blast(s *xdp.Socket, frame []byte, o Options, stop *atomic.Bool, sent *atomic.Uint64) error {
	written := make([]bool, o.Frames)
	fits := len(frame) <= s.FrameSize()
	descs := make([]xdp.Desc, 0, o.Batch*4)
	var count uint64
	for !stop.Load() && (o.Count == 0 || count < uint64(o.Count)) {
		descs = descs[:0]
		for p := 0; p < o.Batch && (o.Count == 0 || count+uint64(p) < uint64(o.Count)); p++ {
			start := len(descs)
			for off := 0; off < len(frame); {
				d, buf, ok := s.NextTxFrame()
				if !ok {
					break
				}
				// A whole frame is written into each chunk once; chunks of
				// multi-buffer frames are refilled each time, as their
				// part of the frame varies.
				if i := d.Addr / uint64(s.FrameSize()); !fits || !written[i] {
					copy(buf, frame[off:])
					written[i] = true
				}
				c := min(len(buf), len(frame)-off)
				off += c
				d.Len = uint32(c)
				d.SetMore(off < len(frame))
				descs = append(descs, d)
			}
			if len(descs) > start && descs[len(descs)-1].More() {
				// Ran out of frames in the middle of a packet: give them back.
				for _, d := range descs[start:] {
					s.FreeTxFrame(d)
				}
				descs = descs[:start]
				break
			}
			if len(descs) == start {
				break
			}
		}
		if len(descs) > 0 {
			n, err := s.Transmit(descs)
			if err != nil {
				return err
			}
			for _, d := range descs[n:] {
				s.FreeTxFrame(d)
			}
			for _, d := range descs[:n] {
				if !d.More() {
					count++
				}
			}
		}
		if err := s.Flush(); err != nil {
			return err
		}
		sent.Store(count)
	}
	// Frames still on the TX ring have not left yet: push them out, so
	// that Sent counts frames the kernel took.
	for deadline := time.Now().Add(time.Second); s.TxPending() > 0; {
		if err := s.Flush(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d frames stuck on the TX ring", s.TxPending())
		}
	}
	sent.Store(count)
	return nil
}

// buildFrame writes an Ethernet/IPv4/UDP frame to port 4791 filling b.
func buildFrame(b []byte, srcMAC, dstMAC []byte, src, dst netip.Addr) {
	copy(b[0:6], dstMAC)
	copy(b[6:12], srcMAC)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(len(b)-14))
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	ip[8] = 64
	ip[9] = 17
	s4, d4 := src.As4(), dst.As4()
	copy(ip[12:16], s4[:])
	copy(ip[16:20], d4[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := b[34:42]
	binary.BigEndian.PutUint16(udp[0:], 0xc000)
	binary.BigEndian.PutUint16(udp[2:], 4791)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(b)-34))
	for i := 42; i < len(b); i++ {
		b[i] = byte(i)
	}
}
