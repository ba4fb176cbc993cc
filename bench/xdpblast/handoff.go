package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/xdp"
)

// handOffSide is where one side's two threads of a hand-off ping-pong
// meet. The application posts the sequence number to send next, as a
// perftest loop posts a work request; the I/O thread publishes the
// sequence number of the last frame that arrived, as softnic's engine
// bumps the memory region a WRITE lands in. Each counter has its own cache
// line, as a send queue and a memory region would.
type handOffSide struct {
	posted  atomic.Uint64
	_       [56]byte
	arrived atomic.Uint64
	_       [56]byte
}

// handOffPingPong runs the ping-pong with each side split in two threads:
// an I/O thread that owns the socket (softnic's engine) and an application
// thread (perftest's latency loop), four polling threads on the machine's
// cores in all. The ping application measures; the pong application posts
// every sequence number that arrives.
func handOffPingPong(ctx context.Context, pingSock, pongSock *xdp.Socket, fr pingFrames, o PingOptions) (rtts []time.Duration, lost int, err error) {
	var stop atomic.Bool
	var ping, pong handOffSide
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); errs[0] = ping.io(pingSock, fr.ping, fr.pingAck, &stop) }()
	go func() { defer wg.Done(); errs[1] = pong.io(pongSock, fr.pong, fr.pongAck, &stop) }()
	go func() { defer wg.Done(); pong.reflect(&stop) }()
	rtts, lost, err = ping.measure(ctx, o)
	stop.Store(true)
	wg.Wait()
	return rtts, lost, errors.Join(err, errs[0], errs[1])
}

// io drives the socket until stop is set: it publishes the sequence number
// of each ping-pong frame that arrives (acknowledging it first when ack is
// set) and sends frame for each newly posted sequence number, yielding the
// CPU when there was nothing to do.
func (h *handOffSide) io(s *xdp.Socket, frame, ack []byte, stop *atomic.Bool) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	descs := make([]xdp.Desc, 16)
	var sent uint64
	for !stop.Load() {
		work := false
		if n := s.Receive(descs); n > 0 {
			work = true
			for _, d := range descs[:n] {
				in := s.Frame(d)
				if d.More() || len(in) != len(frame) {
					continue // an ACK, or not a frame of ours
				}
				seq := binary.LittleEndian.Uint64(in[seqOffset:])
				h.arrived.Store(seq)
				if ack != nil {
					if err := sendFrame(s, ack, seq|ackBit); err != nil {
						return fmt.Errorf("acknowledge: %w", err)
					}
				}
			}
			if err := s.Release(descs[:n]); err != nil {
				return err
			}
		}
		if p := h.posted.Load(); p != sent {
			sent = p
			if err := sendFrame(s, frame, p); err != nil {
				return err
			}
			work = true
		}
		if !work {
			osYield()
		}
	}
	return nil
}

// reflect is the pong application: it posts every sequence number that
// arrives, until stop is set.
func (h *handOffSide) reflect(stop *atomic.Bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var last uint64
	for !stop.Load() {
		if a := h.arrived.Load(); a != last {
			last = a
			h.posted.Store(a)
			continue
		}
		osYield()
	}
}

// measure is the ping application: it posts o.Warmup+o.Count sequence
// numbers one at a time, waits for each to come back, and returns the
// measured round trips, counting (and replacing) those that do not come
// back within o.Timeout.
func (h *handOffSide) measure(ctx context.Context, o PingOptions) (rtts []time.Duration, lost int, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rtts = make([]time.Duration, 0, o.Count)
	var seq uint64
	done := 0
	for len(rtts) < o.Count {
		if ctx.Err() != nil {
			return nil, lost, ctx.Err()
		}
		if lost > 20 && lost*10 > done {
			return nil, lost, fmt.Errorf("%d of %d round trips lost", lost, seq)
		}
		seq++
		t0 := time.Now()
		h.posted.Store(seq)
		back := true
		for h.arrived.Load() != seq {
			if time.Since(t0) > o.Timeout {
				back = false
				break
			}
			osYield()
		}
		if !back {
			lost++
			continue
		}
		if rtt := time.Since(t0); done >= o.Warmup {
			rtts = append(rtts, rtt)
		}
		done++
	}
	return rtts, lost, nil
}
