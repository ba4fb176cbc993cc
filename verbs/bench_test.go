package verbs_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// cpuTime returns the CPU time (user and system) the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// streamer keeps window signaled work requests in flight on one QP.
type streamer struct {
	x      *endpoint
	wr     verbs.SendWR
	window int
	wcs    [64]verbs.WC
	ctx    context.Context
}

// run posts n work requests, keeping the window full, and waits for all.
func (s *streamer) run(tb testing.TB, n int) {
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < s.window {
			s.wr.ID = uint64(posted)
			if err := s.x.qp.PostSend(&s.wr); err != nil {
				tb.Fatal(err)
			}
			posted++
		}
		got, err := s.x.scq.Wait(s.ctx, s.wcs[:])
		if err != nil {
			tb.Fatal(err)
		}
		for _, wc := range s.wcs[:got] {
			if wc.Status != verbs.WCSuccess {
				tb.Fatalf("completion %d: %v", wc.WRID, wc.Status)
			}
		}
		done += got
	}
}

func newStreamer(tb testing.TB, op verbs.WROpcode, size, window int, mtu verbs.MTU) *streamer {
	o := defaultOpts()
	o.mtu = mtu
	o.sendWR = 2 * window
	_, x, y := connectedPair(tb, memlink.Config{Buffers: 2048}, o)
	lmr, _ := regMR(tb, x.pd, size, allAccess)
	rmr, _ := regMR(tb, y.pd, size, allAccess)
	s := &streamer{x: x, window: window, ctx: context.Background(),
		wr: verbs.SendWR{Opcode: op, Flags: verbs.SendSignaled, SGL: []verbs.SGE{lmr.SGE(0, size)},
			RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}}
	if op == verbs.WRSend {
		// A receiver that keeps receives posted.
		go func() {
			var wcs [64]verbs.WC
			rwr := verbs.RecvWR{SGL: []verbs.SGE{rmr.SGE(0, size)}}
			for range 4 * window {
				if y.qp.PostRecv(&rwr) != nil {
					return
				}
			}
			for {
				n, err := y.rcq.Wait(context.Background(), wcs[:])
				if err != nil {
					return
				}
				for range n {
					if y.qp.PostRecv(&rwr) != nil {
						return
					}
				}
			}
		}()
	}
	return s
}

// runRate warms s up, then sends b.N messages and reports their rate, in
// wall-clock time and per second of the process's CPU time (both devices'
// engines, the poster and any spinning: reportPerCore).
func (s *streamer) runRate(b *testing.B) {
	s.run(b, 256)
	b.ReportAllocs()
	cpu0 := cpuTime()
	start := time.Now()
	b.ResetTimer()
	s.run(b, b.N)
	b.StopTimer()
	el, cpu := time.Since(start), cpuTime()-cpu0
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	if cpu > 0 {
		reportPerCore(b, b.N, int(s.wr.SGL[0].Length), cpu)
	}
}

// BenchmarkWrite64KiB measures RDMA WRITE throughput of 64 KiB messages
// over the in-memory link (MTU 4096). GB/s-per-core divides the bytes by
// the CPU time of the whole process: both devices' engines and the poster.
func BenchmarkWrite64KiB(b *testing.B) {
	s := newStreamer(b, verbs.WRRDMAWrite, 64<<10, 16, verbs.MTU4096)
	s.run(b, 64) // warm up
	b.SetBytes(64 << 10)
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	s.run(b, b.N)
	b.StopTimer()
	cpu := cpuTime() - cpu0
	if cpu > 0 {
		b.ReportMetric(float64(b.N)*(64<<10)/cpu.Seconds()/1e9, "GB/s-per-core")
		reportPerCore(b, b.N, 64<<10, cpu)
	}
}

// BenchmarkSmallMessageRate measures 64-byte SENDs (inline) per second.
func BenchmarkSmallMessageRate(b *testing.B) {
	s := newStreamer(b, verbs.WRSend, 64, 64, verbs.MTU1024)
	buf := make([]byte, 64)
	s.wr.Flags |= verbs.SendInline
	s.wr.InlineData = buf
	s.wr.SGL = nil
	s.run(b, 256)
	b.ReportAllocs()
	cpu0 := cpuTime()
	start := time.Now()
	b.ResetTimer()
	s.run(b, b.N)
	b.StopTimer()
	el := time.Since(start)
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	if cpu > 0 {
		reportPerCore(b, b.N, 64, cpu)
	}
}

// BenchmarkWrite64B measures small RDMA WRITE message rate.
func BenchmarkWrite64B(b *testing.B) {
	s := newStreamer(b, verbs.WRRDMAWrite, 64, 64, verbs.MTU1024)
	s.runRate(b)
}

// TestSteadyStateZeroAllocs checks that moving packets allocates nothing:
// AllocsPerRun counts the mallocs of every goroutine, the engines included,
// while WRITEs, READs and SENDs stream.
func TestSteadyStateZeroAllocs(t *testing.T) {
	for _, c := range []struct {
		name string
		op   verbs.WROpcode
		size int
	}{{"write", verbs.WRRDMAWrite, 64 << 10}, {"read", verbs.WRRDMARead, 64 << 10}, {"send", verbs.WRSend, 4096},
		{"small-write", verbs.WRRDMAWrite, 64}} {
		t.Run(c.name, func(t *testing.T) {
			s := newStreamer(t, c.op, c.size, 16, verbs.MTU4096)
			s.run(t, 200) // reach steady state: rings, maps and timers warmed up
			const perRun = 100
			allocs := testing.AllocsPerRun(10, func() { s.run(t, perRun) })
			packets := perRun * max(c.size/4096, 1)
			t.Logf("%v allocations per run of %d messages (%d packets)", allocs, perRun, packets)
			require.Zero(t, allocs, "allocations per run of %d packets", packets)
		})
	}
}

// BenchmarkWrite64BList posts the small WRITEs in lists of 16 (one doorbell
// per list), as ibverbs programs post chained work requests.
func BenchmarkWrite64BList(b *testing.B) {
	s := newStreamer(b, verbs.WRRDMAWrite, 64, 64, verbs.MTU1024)
	s.run(b, 256)
	wrs := make([]verbs.SendWR, 16)
	for i := range wrs {
		wrs[i] = s.wr
		wrs[i].Flags = 0
	}
	wrs[15].Flags = verbs.SendSignaled // one completion per list
	b.ReportAllocs()
	cpu0 := cpuTime()
	start := time.Now()
	b.ResetTimer()
	lists := (b.N + 15) / 16
	inflight := 0
	for posted := 0; posted < lists; {
		for inflight < 4 && posted < lists {
			if _, err := s.x.qp.PostSendList(wrs); err != nil {
				require.NoError(b, err)
			}
			posted++
			inflight++
		}
		got, err := s.x.scq.Wait(s.ctx, s.wcs[:])
		if err != nil {
			require.NoError(b, err)
		}
		inflight -= got
	}
	for inflight > 0 {
		got, err := s.x.scq.Wait(s.ctx, s.wcs[:])
		if err != nil {
			require.NoError(b, err)
		}
		inflight -= got
	}
	b.StopTimer()
	el, cpu := time.Since(start), cpuTime()-cpu0
	b.ReportMetric(float64(lists*16)/el.Seconds(), "msgs/s")
	if cpu > 0 {
		reportPerCore(b, lists*16, 64, cpu)
	}
}

// BenchmarkWrite64BWithIdleQPs is BenchmarkWrite64B with 128 connected but
// idle QP pairs on the same devices: quiet QPs must cost the engine nothing.
func BenchmarkWrite64BWithIdleQPs(b *testing.B) {
	o := defaultOpts()
	o.mtu = verbs.MTU1024
	o.sendWR = 128
	p, x, y := connectedPair(b, memlink.Config{Buffers: 2048}, o)
	idle := o
	idle.sendWR, idle.recvWR = 4, 4
	for range 128 {
		connect(b, newEndpoint(b, p.a, nil, idle, nil), newEndpoint(b, p.b, nil, idle, nil), idle)
	}
	lmr, _ := regMR(b, x.pd, 64, allAccess)
	rmr, _ := regMR(b, y.pd, 64, allAccess)
	s := &streamer{x: x, window: 64, ctx: context.Background(),
		wr: verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{lmr.SGE(0, 64)},
			RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}}
	s.runRate(b)
}
