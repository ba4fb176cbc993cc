package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softnic/softnic/bpf"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/xdp"
)

// WriteLatFrame is the frame of an 8-byte RDMA WRITE ONLY over IPv4, the
// packet of perftest's write_lat at 8 bytes: Ethernet 14 + IPv4 20 + UDP 8
// + BTH 12 + RETH 16 + payload 8 + ICRC 4.
const WriteLatFrame = 14 + 20 + 8 + 12 + 16 + 8 + 4

// PingOptions of one ping-pong run.
type PingOptions struct {
	Size    int           // Ethernet frame length without FCS (default WriteLatFrame; at least 64)
	Count   int           // measured round trips (default 5000)
	Warmup  int           // round trips before the measured ones (default Count/10)
	MTU     int           // veth MTU (default 1500)
	Timeout time.Duration // a round trip without its echo after this counts as lost and is sent again (default 200ms)
	// Frames is the UMEM size of each socket; one frame is in flight at a
	// time, so a few suffice. Default 64.
	Frames   int
	BusyPoll bool
	// HandOff splits each side into an I/O thread, which owns the socket,
	// and an application thread, meeting through shared counters: the
	// shape of softnic's engine and perftest's latency loop (an experiment;
	// four polling threads).
	HandOff bool
	// Ack makes each side answer every frame of the ping-pong with a frame
	// of an RC ACK's size (AckFrame bytes), sent with its own kick before
	// the reply, as softnic's responder acknowledges each WRITE (an
	// experiment).
	Ack bool
}

// AckFrame is the frame of an RC ACKNOWLEDGE: Ethernet 14 + IPv4 20 + UDP 8
// + BTH 12 + AETH 4 + ICRC 4.
const AckFrame = 14 + 20 + 8 + 12 + 4 + 4

// ackBit marks the sequence number of an ACK frame, which answers the
// frame of the same sequence number and is not itself answered.
const ackBit = 1 << 63

// PingResult is a ping-pong's half round trips (the one-way latency as
// perftest's write_lat reports it) over the measured round trips.
type PingResult struct {
	Rounds                      int // measured round trips
	Lost                        int // frames or echoes that never came back (sent again)
	Median, P99, Min, Max, Mean time.Duration
	PingStats, PongStats        xdp.Stats
	PingProgram, PongProgram    bpf.Stats
}

// seqOffset is where the frame carries the round trip's sequence number
// (the BTH's place in a RoCEv2 frame), so that a late echo of a lost round
// trip is never taken for the current one.
const seqOffset = 14 + 20 + 8

func (o *PingOptions) setDefaults() error {
	if o.Size == 0 {
		o.Size = WriteLatFrame
	}
	if o.Size < 64 {
		return fmt.Errorf("frame size %d below 64", o.Size)
	}
	if o.MTU == 0 {
		o.MTU = 1500
	}
	if o.Size-14 > o.MTU || o.Size > 4096-256 {
		return fmt.Errorf("frame size %d does not fit MTU %d or one UMEM chunk", o.Size, o.MTU)
	}
	if o.Count == 0 {
		o.Count = 5000
	}
	if o.Count < 1 || o.Warmup < 0 {
		return fmt.Errorf("round trips %d, warm-up %d", o.Count, o.Warmup)
	}
	if o.Warmup == 0 {
		o.Warmup = o.Count / 10
	}
	if o.Timeout == 0 {
		o.Timeout = 200 * time.Millisecond
	}
	if o.Frames == 0 {
		o.Frames = 64
	}
	return nil
}

// endpoint is one side of the ping-pong: an AF_XDP socket on queue 0 of
// its end of the veth, with the steering program delivering to it the
// UDP/4791 frames for its address.
type endpoint struct {
	prog *bpf.Program
	sock *xdp.Socket
}

func openEndpoint(e *netnstest.End, cfg xdp.Config) (ep endpoint, err error) {
	err = e.Do(func() (err error) {
		if ep.prog, err = bpf.Attach(e.Ifname, bpf.ModeAuto); err != nil {
			return err
		}
		ep.sock, err = xdp.Open(e.Ifindex, 0, cfg)
		return err
	})
	if err == nil {
		err = ep.prog.AddAddr(e.Addr4())
	}
	if err == nil {
		err = ep.prog.SetSocket(0, ep.sock.FD())
	}
	if err != nil {
		ep.close()
		return endpoint{}, fmt.Errorf("%s: %w", e.Namespace, err)
	}
	return ep, nil
}

func (ep endpoint) close() {
	if ep.sock != nil {
		ep.sock.Close()
	}
	if ep.prog != nil {
		ep.prog.Close()
	}
}

// PingPong builds two namespaces joined by a veth pair, with the steering
// program and an AF_XDP socket at both ends. The ping side (A) sends a
// frame and waits for its echo; the pong side (B) sends every frame it
// receives straight back. Both poll their RX rings and call sched_yield
// between empty polls, as softnic's engine and perftest's latency loops do
// on a machine with few cores; each runs on its own OS thread. Everything
// is removed before it returns.
func PingPong(ctx context.Context, o PingOptions) (res PingResult, err error) {
	if err := o.setDefaults(); err != nil {
		return res, err
	}
	pair, err := netnstest.New(netnstest.Config{MTU: o.MTU})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, pair.Close()) }()
	cfg := xdp.Config{NumFrames: o.Frames, BusyPoll: o.BusyPoll}
	ping, err := openEndpoint(&pair.A, cfg)
	if err != nil {
		return res, fmt.Errorf("ping side: %w", err)
	}
	defer ping.close()
	pong, err := openEndpoint(&pair.B, cfg)
	if err != nil {
		return res, fmt.Errorf("pong side: %w", err)
	}
	defer pong.close()

	fr := pingFrames{ping: make([]byte, o.Size), pong: make([]byte, o.Size)}
	buildFrame(fr.ping, pair.A.MAC, pair.B.MAC, pair.A.Addr4(), pair.B.Addr4())
	buildFrame(fr.pong, pair.B.MAC, pair.A.MAC, pair.B.Addr4(), pair.A.Addr4())
	if o.Ack {
		fr.pingAck, fr.pongAck = make([]byte, AckFrame), make([]byte, AckFrame)
		buildFrame(fr.pingAck, pair.A.MAC, pair.B.MAC, pair.A.Addr4(), pair.B.Addr4())
		buildFrame(fr.pongAck, pair.B.MAC, pair.A.MAC, pair.B.Addr4(), pair.A.Addr4())
	}

	var rtts []time.Duration
	var lost int
	if o.HandOff {
		rtts, lost, err = handOffPingPong(ctx, ping.sock, pong.sock, fr, o)
	} else {
		var stop atomic.Bool
		var wg sync.WaitGroup
		var pongErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			pongErr = echo(pong.sock, fr.pongAck, &stop)
		}()
		rtts, lost, err = pingLoop(ctx, ping.sock, fr.ping, fr.pingAck, o)
		stop.Store(true)
		wg.Wait()
		err = errors.Join(err, pongErr)
	}
	if err != nil {
		return res, err
	}
	res.Rounds, res.Lost = len(rtts), lost
	res.Median, res.P99, res.Min, res.Max, res.Mean = halfStats(rtts)
	res.PingStats, _ = ping.sock.Stats()
	res.PongStats, _ = pong.sock.Stats()
	res.PingProgram, _ = ping.prog.Stats()
	res.PongProgram, _ = pong.prog.Stats()
	return res, nil
}

// pingFrames are the frames each side sends: its ping-pong frame and, with
// PingOptions.Ack, its ACK frame (nil otherwise).
type pingFrames struct {
	ping, pong       []byte
	pingAck, pongAck []byte
}

// halfStats sorts round trips and returns the median, 99th percentile,
// minimum, maximum and mean of their halves.
func halfStats(rtts []time.Duration) (median, p99, least, most, mean time.Duration) {
	if len(rtts) == 0 {
		return
	}
	slices.Sort(rtts)
	var sum time.Duration
	for _, d := range rtts {
		sum += d
	}
	n := len(rtts)
	return rtts[n/2] / 2, rtts[n*99/100] / 2, rtts[0] / 2, rtts[n-1] / 2, sum / time.Duration(n) / 2
}

// pingLoop runs o.Warmup+o.Count round trips and returns the measured ones.
// A round trip whose echo does not come back within o.Timeout is counted
// lost and sent again under a new sequence number. With an ack frame, each
// echo is acknowledged before the next round trip starts.
func pingLoop(ctx context.Context, s *xdp.Socket, frame, ack []byte, o PingOptions) (rtts []time.Duration, lost int, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rtts = make([]time.Duration, 0, o.Count)
	descs := make([]xdp.Desc, 16)
	var seq uint64
	done := 0 // round trips completed, warm-up included
	for len(rtts) < o.Count {
		if ctx.Err() != nil {
			return nil, lost, ctx.Err()
		}
		if lost > 20 && lost*10 > done {
			return nil, lost, fmt.Errorf("%d of %d round trips lost (ping %+v)", lost, seq, mustStats(s))
		}
		seq++
		t0 := time.Now()
		if err := sendFrame(s, frame, seq); err != nil {
			return nil, lost, err
		}
		for {
			n := s.Receive(descs)
			if n == 0 {
				if time.Since(t0) > o.Timeout {
					lost++
					break
				}
				osYield()
				continue
			}
			back := false
			for _, d := range descs[:n] {
				if f := s.Frame(d); len(f) == len(frame) && binary.LittleEndian.Uint64(f[seqOffset:]) == seq {
					back = true
				}
			}
			rtt := time.Since(t0)
			if err := s.Release(descs[:n]); err != nil {
				return nil, lost, err
			}
			if back {
				if done >= o.Warmup {
					rtts = append(rtts, rtt)
				}
				done++
				if ack != nil {
					if err := sendFrame(s, ack, seq|ackBit); err != nil {
						return nil, lost, err
					}
				}
				break
			}
		}
	}
	return rtts, lost, nil
}

// sendFrame copies frame into a transmit chunk with seq in it, queues it
// and kicks the kernel (in copy mode the kick carries the frame across the
// veth into the peer's UMEM).
func sendFrame(s *xdp.Socket, frame []byte, seq uint64) error {
	d, buf, ok := s.NextTxFrame()
	for deadline := time.Now().Add(time.Second); !ok; d, buf, ok = s.NextTxFrame() {
		if err := s.Flush(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no free transmit frame (%+v)", mustStats(s))
		}
	}
	copy(buf, frame)
	binary.LittleEndian.PutUint64(buf[seqOffset:], seq)
	d.Len = uint32(len(frame))
	if _, err := s.Transmit([]xdp.Desc{d}); err != nil {
		return err
	}
	return s.Flush()
}

// echo sends every frame it receives back with the Ethernet and IP
// addresses swapped (the UDP destination stays 4791), until stop is set.
// With an ack frame it first acknowledges each frame (with its own kick),
// and it neither echoes nor acknowledges ACK frames.
func echo(s *xdp.Socket, ack []byte, stop *atomic.Bool) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	descs := make([]xdp.Desc, 16)
	out := make([]xdp.Desc, 0, len(descs))
	for !stop.Load() {
		n := s.Receive(descs)
		if n == 0 {
			osYield()
			continue
		}
		out = out[:0]
		for _, d := range descs[:n] {
			in := s.Frame(d)
			if d.More() || len(in) < seqOffset+8 {
				continue // not a frame of ours
			}
			if seq := binary.LittleEndian.Uint64(in[seqOffset:]); ack != nil {
				if seq&ackBit != 0 {
					continue
				}
				if err := sendFrame(s, ack, seq|ackBit); err != nil {
					return fmt.Errorf("echo: %w", err)
				}
			}
			td, buf, ok := s.NextTxFrame()
			if !ok {
				break // every frame in flight: the ping side resends
			}
			copy(buf, in)
			swapAddrs(buf)
			td.Len = d.Len
			out = append(out, td)
		}
		if _, err := s.Transmit(out); err != nil {
			return fmt.Errorf("echo: %w", err)
		}
		if err := s.Flush(); err != nil {
			return fmt.Errorf("echo: %w", err)
		}
		if err := s.Release(descs[:n]); err != nil {
			return fmt.Errorf("echo: %w", err)
		}
	}
	return nil
}

// swapAddrs turns an Ethernet/IPv4 frame around: MAC and IP source and
// destination trade places (the IP checksum stays valid).
func swapAddrs(b []byte) {
	var mac [6]byte
	copy(mac[:], b[0:6])
	copy(b[0:6], b[6:12])
	copy(b[6:12], mac[:])
	var ip [4]byte
	copy(ip[:], b[26:30])
	copy(b[26:30], b[30:34])
	copy(b[30:34], ip[:])
}

func mustStats(s *xdp.Socket) xdp.Stats {
	st, _ := s.Stats()
	return st
}

// osYield gives the CPU to another runnable thread (sched_yield), as
// softnic's engine does between empty polls: on two cores a poller that
// never leaves its CPU makes the other side wait for a scheduler tick.
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
