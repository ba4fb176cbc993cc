package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/roce/xdplink"
	"github.com/softnic/softnic/tools/oob"
	"github.com/softnic/softnic/tools/perftest"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/xdp"
)

// inproc runs both perftest sides in this process, each on its own
// AF_XDP device in its namespace, the out-of-band exchange over a pipe:
// the same engine and link code as `softnic perf`, but where allocations
// can be counted and the CPU profiled.
type inproc struct {
	pair  *netnstest.Pair
	devs  [2]perftest.Device // server (A), client (B)
	links []*xdplink.Link
	done  []func()
}

func openInproc(mtu int, busyPoll bool) (h *inproc, err error) {
	h = &inproc{}
	h.pair, err = netnstest.New(netnstest.Config{MTU: mtu,
		AddrsA: []netip.Prefix{netip.MustParsePrefix("10.49.0.1/24")},
		AddrsB: []netip.Prefix{netip.MustParsePrefix("10.49.0.2/24")}})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	ends := [2]*netnstest.End{&h.pair.A, &h.pair.B}
	for i, end := range ends {
		peer := ends[1-i]
		if err := end.Do(func() error {
			nd, err := xdplink.LookupNetdev(end.Ifname)
			if err != nil {
				return err
			}
			link, err := xdplink.Open(end.Ifname, xdplink.Config{Addrs: nd.GIDs, Socket: xdp.Config{BusyPoll: busyPoll}})
			if err != nil {
				return fmt.Errorf("AF_XDP link on %s: %w", end.Ifname, err)
			}
			dev, err := verbs.Open(link, verbs.Config{Addrs: nd.GIDs})
			if err != nil {
				link.Close()
				return err
			}
			h.done = append(h.done, func() { dev.Close(); link.Close() })
			h.links = append(h.links, link)
			var mac [6]byte
			copy(mac[:], peer.MAC)
			dev.RoCE().SetNeighbor(peer.Addr4(), mac)
			h.devs[i] = perftest.Device{Verbs: dev, Name: end.Ifname, LinkMTU: nd.MTU}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func (h *inproc) Close() {
	for i := len(h.done) - 1; i >= 0; i-- {
		h.done[i]()
	}
	h.pair.Close()
}

// packets is the number of frames both devices have sent.
func (h *inproc) packets() uint64 {
	return h.devs[0].Verbs.Counters().TxPackets.Load() + h.devs[1].Verbs.Counters().TxPackets.Load()
}

// losses sums both devices' retransmission counters: go-back-N restarts,
// retransmit timeouts and requests that arrived ahead of their PSN (a
// frame before them was lost).
func (h *inproc) losses() (retransmits, timeouts, outOfSeq uint64) {
	for _, d := range h.devs {
		c := d.Verbs.Counters()
		retransmits += c.Retransmits.Load()
		timeouts += c.Timeouts.Load()
		outOfSeq += c.RxOutOfSeq.Load()
	}
	return
}

// kicks is the number of sendto wakeups of both links' TX paths.
func (h *inproc) kicks() uint64 {
	var n uint64
	for _, l := range h.links {
		st, err := l.Stats()
		if err != nil {
			continue
		}
		for _, sk := range st.Sockets {
			n += sk.Counters.Kicks
		}
	}
	return n
}

// run runs one perftest test between the two devices and returns the
// client's report.
func (h *inproc) run(ctx context.Context, test oob.Test, size uint64, mtu int, iters uint64, qps int) (string, error) {
	// A TCP connection, not net.Pipe: the exchange's closing messages
	// cross, which needs the buffering TCP gives.
	cs, cc, err := loopbackConn()
	if err != nil {
		return "", err
	}
	defer cs.Close()
	defer cc.Close()
	var serverOut, clientOut bytes.Buffer
	params := func(server bool) perftest.Params {
		p := perftest.NewParams(test)
		p.Server, p.Size, p.Iters, p.MTU, p.GIDIndex, p.ReportGbits, p.NumQPs = server, size, iters, mtu, 1, true, qps
		// The peak's computation is quadratic in iters: keep it out of
		// the profile.
		p.NoPeak = true
		return p
	}
	var wg sync.WaitGroup
	var serr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		serr = perftest.Run(ctx, h.devs[0], cs, params(true), &serverOut)
		cs.Close() // a failed server must not leave the client waiting
	}()
	cerr := perftest.Run(ctx, h.devs[1], cc, params(false), &clientOut)
	cc.Close()
	wg.Wait()
	if cerr != nil {
		return clientOut.String(), fmt.Errorf("client: %w", cerr)
	}
	if serr != nil {
		return clientOut.String(), fmt.Errorf("server: %w", serr)
	}
	return clientOut.String(), nil
}

// loopbackConn returns both ends of a TCP connection on 127.0.0.1.
func loopbackConn() (net.Conn, net.Conn, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	s, err := l.Accept()
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return s, c, nil
}

// measured is the cost of one in-process run.
type measured struct {
	mallocs, packets, kicks         uint64
	retransmits, timeouts, outOfSeq uint64
	out                             string
}

func (h *inproc) measure(ctx context.Context, test oob.Test, size uint64, mtu int, iters uint64, qps int, profile string) (measured, error) {
	var m measured
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return m, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return m, err
		}
		defer pprof.StopCPUProfile()
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	p0, k0 := h.packets(), h.kicks()
	r0, t0, o0 := h.losses()
	out, err := h.run(ctx, test, size, mtu, iters, qps)
	p1, k1 := h.packets(), h.kicks()
	r1, t1, o1 := h.losses()
	runtime.ReadMemStats(&after)
	m = measured{mallocs: after.Mallocs - before.Mallocs, packets: p1 - p0, kicks: k1 - k0,
		retransmits: r1 - r0, timeouts: t1 - t0, outOfSeq: o1 - o0, out: out}
	return m, err
}

// allocs counts the allocations per packet of 64 KiB RDMA WRITEs between
// two in-process devices over AF_XDP: two runs of different lengths, so
// that what a run allocates once (QPs, buffers, the exchange) cancels and
// what remains is what moving more packets costs. With profileDir set it
// also writes CPU profiles of write_bw at 64 KiB (one QP and 1024; IB MTU
// 4096 and 1024) and 64 B, and of write_lat.
func (s *suite) allocs(ctx context.Context, profileDir string) {
	fmt.Println("== softnic allocations per packet and CPU profiles (both sides in-process over AF_XDP, 9000-byte veth)")
	f := &Figure{Key: "softnic/allocs", Group: groupSoftnic, Unit: unitPkt, LowerIsBetter: true,
		Name: "allocations per packet, write_bw 64 KiB steady state"}
	defer s.report(f)
	if profileDir != "" {
		if err := os.MkdirAll(profileDir, 0o755); err != nil {
			f.Err = err.Error()
			return
		}
	}
	h, err := openInproc(9000, s.busyPoll)
	if err != nil {
		f.Err = err.Error()
		return
	}
	defer h.Close()
	const short, long = 500, 20000
	// A first run warms up what is allocated once per process.
	if _, err := h.measure(ctx, oob.WriteBW, 64<<10, 4096, short, 1, ""); err != nil {
		f.Err = err.Error()
		return
	}
	a, err := h.measure(ctx, oob.WriteBW, 64<<10, 4096, short, 1, "")
	if err != nil {
		f.Err = err.Error()
		return
	}
	prof := ""
	if profileDir != "" {
		prof = filepath.Join(profileDir, "cpu-write_bw.pprof")
	}
	b, err := h.measure(ctx, oob.WriteBW, 64<<10, 4096, long, 1, prof)
	if err != nil {
		f.Err = err.Error()
		return
	}
	if b.packets <= a.packets {
		f.Err = fmt.Sprintf("the longer run sent no more packets (%d, %d)", a.packets, b.packets)
		return
	}
	extra := float64(b.mallocs) - float64(a.mallocs)
	f.Value = max(0, extra) / float64(b.packets-a.packets)
	f.Note = fmt.Sprintf("%+.0f mallocs for %d more packets (runs of %d and %d messages: %d and %d mallocs); one per packet would show ≥ 1",
		extra, b.packets-a.packets, short, long, a.mallocs, b.mallocs)
	if bw, err := parseBW(b.out); err == nil {
		f.Note += fmt.Sprintf("; in-process write_bw %.2f Gb/s, %d retransmissions", bw.Avg, b.retransmits)
	}
	s.kicksFigure("64k", "64 KiB", b)
	prof = ""
	if profileDir != "" {
		prof = filepath.Join(profileDir, "cpu-write_bw_64B.pprof")
	}
	small, err := h.measure(ctx, oob.WriteBW, 64, 1024, 100000, 1, prof)
	if err != nil {
		small.packets = 0
		fmt.Fprintf(os.Stderr, "suite: 64 B write_bw: %v\n", err)
	}
	s.kicksFigure("64", "64 B", small)
	if profileDir != "" {
		many, err := h.measure(ctx, oob.WriteBW, 64<<10, 4096, 150, 1024, filepath.Join(profileDir, "cpu-write_bw_1024qp.pprof"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "suite: 1024-QP write_bw profile: %v\n", err)
		} else if bw, err := parseBW(many.out); err == nil {
			fmt.Printf("  (in-process write_bw 64 KiB over 1024 QPs: %.2f Gb/s, %d retransmissions, %d timeouts, %d out of sequence; profile in %s)\n",
				bw.Avg, many.retransmits, many.timeouts, many.outOfSeq, profileDir)
		}
		// Enough round trips for a profile with samples to read.
		lat, err := h.measure(ctx, oob.WriteLat, 8, 1024, uint64(max(s.latIters, 10000)), 1, filepath.Join(profileDir, "cpu-write_lat.pprof"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "suite: write_lat profile: %v\n", err)
		} else if l, err := parseLat(lat.out); err == nil {
			fmt.Printf("  (in-process write_lat 8 B: median %.2f µs, p99 %.2f µs; profile in %s)\n", l.Typical, l.P99, profileDir)
		}
		s.profileSmallMTU(ctx, profileDir)
	}
}

// profileSmallMTU profiles write_bw of 64 KiB messages at IB MTU 1024 on a
// 1500-byte link, where every frame fits one UMEM chunk.
func (s *suite) profileSmallMTU(ctx context.Context, profileDir string) {
	h, err := openInproc(1500, s.busyPoll)
	if err != nil {
		fmt.Fprintf(os.Stderr, "suite: 1500-byte link: %v\n", err)
		return
	}
	defer h.Close()
	m, err := h.measure(ctx, oob.WriteBW, 64<<10, 1024, 10000, 1, filepath.Join(profileDir, "cpu-write_bw_mtu1024.pprof"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "suite: write_bw profile at IB MTU 1024: %v\n", err)
		return
	}
	if bw, err := parseBW(m.out); err == nil {
		fmt.Printf("  (in-process write_bw 64 KiB at IB MTU 1024, 1500-byte link: %.2f Gb/s, %.3f kicks per frame, %d retransmissions; profile in %s)\n",
			bw.Avg, float64(m.kicks)/float64(max(m.packets, 1)), m.retransmits, profileDir)
	}
}

// kicksFigure reports the TX system calls per frame of an in-process run:
// the cost the AF_XDP ceiling amortises over a batch of 64 frames.
func (s *suite) kicksFigure(key, what string, m measured) {
	f := &Figure{Key: "softnic/kicks/" + key, Group: groupSoftnic, Unit: "sendto/frame", LowerIsBetter: true,
		Name: fmt.Sprintf("TX kicks (sendto) per frame, write_bw %s, in-process", what)}
	if m.packets == 0 {
		f.Err = "no packets measured"
	} else {
		f.Value = float64(m.kicks) / float64(m.packets)
		f.Note = fmt.Sprintf("%d kicks for %d frames, data and ACKs of both sides; xdpblast kicks once per 64 frames", m.kicks, m.packets)
	}
	s.report(f)
}
