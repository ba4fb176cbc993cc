package capture

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkCaptureCost measures what a whole-frame capture costs the
// CPUs, per frame kept, in each of its ways to the file: the lane's own
// time (its thread's CPU time: the copy, the clock is not read here) and
// the rest of the process's (the writer goroutine, the system calls it
// makes and the kernel's work in them). The lane puts 4154-byte frames (a
// write_bw frame at IB MTU 4096) in bursts of 1 MiB with a pause after
// each, about 1 GB/s, so that the writer can keep up; the files go to
// $TMPDIR (a disk or tmpfs: the figures differ). CPU time, unlike
// throughput, holds still on a machine others load.
func BenchmarkCaptureCost(b *testing.B) {
	for _, out := range []string{"rings", "direct"} {
		b.Run(out, func(b *testing.B) { benchCaptureCost(b, out) })
	}
}

func benchCaptureCost(b *testing.B, out string) {
	file, err := os.Create(filepath.Join(b.TempDir(), "c.pcap"))
	if err != nil {
		b.Fatal(err)
	}
	defer file.Close()
	put, stop, counts := startCostCapture(b, out, file)
	frame := make([]byte, 4154)
	const burst = (1 << 20) / 4154
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self0, lane0 := cpuTime(unix.RUSAGE_SELF), cpuTime(unix.RUSAGE_THREAD)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		put(frame, int64(i))
		if i%burst == burst-1 {
			time.Sleep(time.Millisecond)
		}
	}
	lane := cpuTime(unix.RUSAGE_THREAD) - lane0
	stop()
	self := cpuTime(unix.RUSAGE_SELF) - self0
	written, dropped := counts()
	if written == 0 {
		b.Fatal("no frame written")
	}
	b.ReportMetric(float64(lane)/float64(written), "lane-ns/kept")
	b.ReportMetric(float64(self-lane)/float64(written), "rest-ns/kept")
	b.ReportMetric(float64(dropped)/float64(b.N), "dropped/frame")
}

// startCostCapture starts a capture of one lane into file: how to put a
// frame, how to stop (writing everything out) and the counts.
func startCostCapture(b *testing.B, out string, file *os.File) (put func([]byte, int64) bool, stop func(), counts func() (uint64, uint64)) {
	const ahead = 32 << 20
	if out == "rings" {
		r := newCaptureRing(ahead, DefaultSnaplen)
		c := &Capture{rings: []*captureRing{r}, w: file, stop: make(chan struct{}), done: make(chan struct{})}
		go c.run()
		return r.put, func() { close(c.stop); <-c.done },
			func() (uint64, uint64) { return c.written.Load(), r.dropped.Load() }
	}
	header := make([]byte, 24)
	f := newCaptureStream(ahead, DefaultSnaplen, 0, 1)
	var err error
	if f.out, err = newDirectOut(f, file, header); err != nil {
		b.Fatal(err)
	}
	halt, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		f.run(halt, func(err error) { b.Error(err) })
	}()
	l := f.lanes[0]
	return l.put, func() {
			f.stopLanes()
			close(halt)
			<-done
			if err := f.out.finish(); err != nil {
				b.Error(err)
			}
		},
		func() (uint64, uint64) { return l.written.Load(), l.dropped.Load() }
}

// cpuTime is the user and system CPU time of who (RUSAGE_SELF or
// RUSAGE_THREAD).
func cpuTime(who int) time.Duration {
	var ru unix.Rusage
	unix.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
