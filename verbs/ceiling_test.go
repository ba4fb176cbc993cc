package verbs_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// The raw ceiling of the engine benchmarks: what moving frames between two
// goroutines costs with no protocol at all. A producer copies each frame
// into a slot of a single-producer single-consumer ring and publishes it;
// a consumer copies it out and frees the slot, so every byte is copied
// twice, as the engine over memlink copies a WRITE's payload (gather into
// the frame, scatter into the region). Run in the same process as the
// engine benchmarks, their ratio to it is what the engine costs.

// ceilingRing is the SPSC ring: head is the next slot the producer fills,
// tail the next the consumer empties, each written by one side only.
type ceilingRing struct {
	slots [][]byte
	lens  []int
	head  atomic.Uint64
	_     [56]byte // head and tail on their own cache lines
	tail  atomic.Uint64
}

func newCeilingRing(slots, size int) *ceilingRing {
	r := &ceilingRing{slots: make([][]byte, slots), lens: make([]int, slots)}
	for i := range r.slots {
		r.slots[i] = make([]byte, size)
	}
	return r
}

// ceilingBatch is how many frames the producer fills before it publishes
// them, as the engine queues a pass's frames and flushes the link once.
const ceilingBatch = 32

// produce copies src into the ring n times, publishing every ceilingBatch
// frames and waiting (yielding) while the ring is full.
func (r *ceilingRing) produce(src []byte, n int) {
	size := uint64(len(r.slots))
	head := r.head.Load()
	tail := r.tail.Load()
	for k := range n {
		for head-tail >= size {
			r.head.Store(head)
			runtime.Gosched()
			tail = r.tail.Load()
		}
		i := head % size
		r.lens[i] = copy(r.slots[i], src)
		head++
		if (k+1)%ceilingBatch == 0 || k == n-1 {
			r.head.Store(head)
		}
	}
}

// consume copies n frames out of the ring into dst, taking every frame
// published at once and freeing their slots together, and waiting while
// the ring is empty. It returns the sum of the first bytes, so that the
// copies are used.
func (r *ceilingRing) consume(dst []byte, n int) (sum int) {
	size := uint64(len(r.slots))
	tail := r.tail.Load()
	for left := uint64(n); left > 0; {
		head := r.head.Load()
		if head == tail {
			runtime.Gosched()
			continue
		}
		for ; tail != head; tail++ {
			i := tail % size
			copy(dst, r.slots[i][:r.lens[i]])
			sum += int(dst[0])
			left--
		}
		r.tail.Store(tail)
	}
	return sum
}

// runCeiling passes b.N frames of size bytes through a ring and reports
// per-core rates: frames and bits per second of the process's CPU time
// (cpuTime), both goroutines' and any waiting they did.
func runCeiling(b *testing.B, size int) {
	r := newCeilingRing(256, size)
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	done := make(chan int)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	cpu0 := cpuTime()
	start := time.Now()
	b.ResetTimer()
	go func() { done <- r.consume(dst, b.N) }()
	r.produce(src, b.N)
	<-done
	b.StopTimer()
	el, cpu := time.Since(start), cpuTime()-cpu0
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	if cpu > 0 {
		reportPerCore(b, b.N, size, cpu)
	}
}

// reportPerCore reports n messages of size bytes per second of CPU time.
func reportPerCore(b *testing.B, n, size int, cpu time.Duration) {
	b.ReportMetric(float64(n)/cpu.Seconds(), "msgs/s-per-core")
	b.ReportMetric(float64(n)*float64(size)*8/cpu.Seconds()/1e9, "Gb/s-per-core")
}

// BenchmarkCeiling64B is the ceiling of the 64-byte message benchmarks.
func BenchmarkCeiling64B(b *testing.B) { runCeiling(b, 64) }

// BenchmarkCeiling4KiB is the ceiling of BenchmarkWrite64KiB, whose
// frames carry 4 KiB (MTU 4096).
func BenchmarkCeiling4KiB(b *testing.B) { runCeiling(b, 4096) }
