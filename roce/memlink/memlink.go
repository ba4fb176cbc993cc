package memlink

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/roce"
)

// Faults sets the probability (0..1) of each fault for every frame sent in
// one direction.
type Faults struct {
	Loss      float64 // the frame disappears
	Duplicate float64 // the frame arrives twice
	Reorder   float64 // the frame is held back ReorderDelay so later ones overtake it
	Delay     float64 // the frame (and the ones queued behind it) arrive up to MaxDelay late
	Corrupt   float64 // one bit of the frame, at CorruptFrom or later, is flipped

	// MaxDelay bounds the extra latency of delayed frames (default 200µs).
	MaxDelay time.Duration
	// ReorderDelay is how long a reordered frame is held (default 50µs).
	ReorderDelay time.Duration
	// CorruptFrom is the first byte that corruption may flip. The default,
	// 42, is the start of the BTH in an untagged IPv4 frame: everything from
	// there on is covered by the ICRC.
	CorruptFrom int
}

// Config describes a link pair.
type Config struct {
	MTU     int    // L3 MTU; default 9000 so that every IB path MTU fits
	Buffers int    // TX buffers per end; default 1024
	Seed    uint64 // seeds the fault generators
	AtoB    Faults // faults on frames sent by end A
	BtoA    Faults // faults on frames sent by end B
	MACA    [6]byte
	MACB    [6]byte
}

// Stats counts what happened to the frames sent by one end.
type Stats struct {
	Sent, Delivered, Lost, Duplicated, Reordered, Delayed, Corrupted atomic.Uint64
}

type item struct {
	at  int64 // delivery time, nanoseconds since the pair's epoch
	seq uint64
	buf []byte // whole pool buffer
	n   int    // frame length
}

// pool holds an end's TX buffers. The end's own goroutine takes them from
// local without a lock; the peer's Receive gives them back into free, under
// mu, a batch at a time, and get moves free onto local when nfree says it
// holds some: a lock and unlock for every frame sent was 3 % of
// BenchmarkWrite64B's CPU time. Returned buffers go on top of local, so
// that the next frames are built in the buffers just used, still in the
// cache; taking them only once local ran out cycled the frames through
// every buffer of the pool (9 MB) and made a 64-byte WRITE slower.
type pool struct {
	local   [][]byte // the owner's alone
	mu      sync.Mutex
	free    [][]byte
	nfree   atomic.Int32 // len(free), read without mu
	starved bool
	owner   *Endpoint
}

func (p *pool) get() []byte {
	if (p.nfree.Load() > 0 || len(p.local) == 0) && !p.refill() {
		return nil
	}
	b := p.local[len(p.local)-1]
	p.local = p.local[:len(p.local)-1]
	return b
}

// refill moves the buffers given back onto local and reports whether local
// has any; if not, the next put wakes the owner.
func (p *pool) refill() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.local = append(p.local, p.free...) // never grows: both lists can hold every buffer
	clear(p.free)
	p.free = p.free[:0]
	p.nfree.Store(0)
	if len(p.local) == 0 {
		p.starved = true
		return false
	}
	return true
}

// put gives buffers back from any goroutine.
func (p *pool) put(bufs ...[]byte) {
	p.mu.Lock()
	p.free = append(p.free, bufs...)
	p.nfree.Store(int32(len(p.free)))
	wake := p.starved
	p.starved = false
	p.mu.Unlock()
	if wake {
		p.owner.Wake()
	}
}

// len counts the buffers in the pool; the owner's goroutine calls it.
func (p *pool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.local) + len(p.free)
}

// Endpoint is one end of a link pair. It implements roce.Link.
type Endpoint struct {
	mtu   int
	mac   [6]byte
	epoch time.Time
	peer  *Endpoint

	// Sending side, used only by the goroutine driving this end.
	pool    pool
	pending []item
	out     []item   // Flush's output; separate from pending, which duplicates would overrun
	dropped [][]byte // Flush's dropped buffers
	faults  Faults
	// timed is set when faults delay or reorder frames: only then do the
	// frames sent carry a delivery time. Untimed ones are due at once, so
	// neither Flush nor the peer's Receive reads the clock for them.
	timed bool
	rng   *rand.Rand
	stats Stats
	down  atomic.Bool
	tap   atomic.Pointer[func([]byte) bool]

	// Receiving side: frames sent by the peer, ordered by delivery time.
	mu      sync.Mutex
	heap    []item
	seq     uint64
	scratch []item
	wake    chan struct{}
	anyWake chan struct{} // the MultiQueue's, if the endpoint is one of its queues
	closed  chan struct{}
	once    sync.Once
	timer   *time.Timer
}

var _ roce.Link = (*Endpoint)(nil)

// Pair returns the two connected ends of a new in-memory link.
func Pair(cfg Config) (a, b *Endpoint) {
	if cfg.MTU == 0 {
		cfg.MTU = 9000
	}
	if cfg.Buffers == 0 {
		cfg.Buffers = 1024
	}
	if cfg.MACA == ([6]byte{}) {
		cfg.MACA = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	}
	if cfg.MACB == ([6]byte{}) {
		cfg.MACB = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
	}
	epoch := time.Now()
	a = newEndpoint(cfg, cfg.MACA, cfg.AtoB, cfg.Seed, epoch)
	b = newEndpoint(cfg, cfg.MACB, cfg.BtoA, cfg.Seed^0x9e3779b97f4a7c15, epoch)
	a.peer, b.peer = b, a
	return a, b
}

func newEndpoint(cfg Config, mac [6]byte, f Faults, seed uint64, epoch time.Time) *Endpoint {
	if f.MaxDelay == 0 {
		f.MaxDelay = 200 * time.Microsecond
	}
	if f.ReorderDelay == 0 {
		f.ReorderDelay = 50 * time.Microsecond
	}
	if f.CorruptFrom == 0 {
		f.CorruptFrom = 42
	}
	e := &Endpoint{
		mtu:     cfg.MTU,
		mac:     mac,
		epoch:   epoch,
		faults:  f,
		timed:   f.Delay > 0 || f.Reorder > 0,
		rng:     rand.New(rand.NewPCG(seed, seed>>1|1)),
		wake:    make(chan struct{}, 1),
		closed:  make(chan struct{}),
		timer:   time.NewTimer(time.Hour),
		pending: make([]item, 0, cfg.Buffers),
		out:     make([]item, 0, 2*cfg.Buffers),
		dropped: make([][]byte, 0, cfg.Buffers),
		heap:    make([]item, 0, 2*cfg.Buffers),
		scratch: make([]item, 0, 2*cfg.Buffers),
	}
	e.timer.Stop()
	e.pool.owner = e
	size := cfg.MTU + 26
	backing := make([]byte, size*cfg.Buffers)
	// Each list can hold every buffer, so neither grows on the packet
	// path.
	e.pool.local = make([][]byte, 0, cfg.Buffers)
	e.pool.free = make([][]byte, 0, cfg.Buffers)
	for i := range cfg.Buffers {
		e.pool.local = append(e.pool.local, backing[i*size:(i+1)*size:(i+1)*size])
	}
	return e
}

// MTU implements roce.Link.
func (e *Endpoint) MTU() int { return e.mtu }

// HardwareAddr implements roce.Link.
func (e *Endpoint) HardwareAddr() [6]byte { return e.mac }

// Stats returns the counters of the frames this end sent.
func (e *Endpoint) Stats() *Stats { return &e.stats }

// SetDown makes this end drop everything it sends, like a peer that went
// silent, until called with false.
func (e *Endpoint) SetDown(down bool) { e.down.Store(down) }

// SetTap installs fn, which sees (and may modify) every frame this end sends
// before faults apply; returning false drops the frame. nil removes it.
func (e *Endpoint) SetTap(fn func(frame []byte) bool) {
	if fn == nil {
		e.tap.Store(nil)
		return
	}
	e.tap.Store(&fn)
}

// TxFrame implements roce.Link.
func (e *Endpoint) TxFrame() []byte { return e.pool.get() }

// Send implements roce.Link.
func (e *Endpoint) Send(frame []byte) {
	e.pending = append(e.pending, item{buf: frame[:cap(frame)], n: len(frame)})
}

func (e *Endpoint) now() int64 { return int64(time.Since(e.epoch)) }

// Flush implements roce.Link: it applies the faults and hands the frames to
// the peer.
func (e *Endpoint) Flush() error {
	if len(e.pending) == 0 {
		return nil
	}
	select {
	case <-e.closed:
		for _, it := range e.pending {
			e.pool.put(it.buf)
		}
		e.pending = e.pending[:0]
		return roce.ErrLinkClosed
	default:
	}
	var now int64 // an untimed frame is due at the epoch, at once
	if e.timed {
		now = e.now()
	}
	f := &e.faults
	out := e.out[:0]
	dropped := e.dropped[:0]
	var tap func([]byte) bool
	if p := e.tap.Load(); p != nil {
		tap = *p
	}
	e.stats.Sent.Add(uint64(len(e.pending))) // one atomic add a batch, not one a frame
	for _, it := range e.pending {
		if e.down.Load() || (tap != nil && !tap(it.buf[:it.n])) || e.roll(f.Loss) {
			e.stats.Lost.Add(1)
			dropped = append(dropped, it.buf)
			continue
		}
		it.at = now
		e.corruptAndDelay(&it)
		out = append(out, it)
		if e.roll(f.Duplicate) {
			if dup := e.pool.get(); dup != nil {
				copy(dup, it.buf[:it.n])
				out = append(out, item{at: it.at, buf: dup, n: it.n})
				e.stats.Duplicated.Add(1)
			}
		}
	}
	if len(dropped) > 0 {
		e.pool.put(dropped...)
	}
	e.peer.deliver(out)
	clear(out)
	clear(dropped)
	clear(e.pending)
	e.out, e.dropped, e.pending = out[:0], dropped[:0], e.pending[:0]
	return nil
}

// corruptAndDelay applies the faults that keep a frame but change it or
// its arrival time, drawing from the generator in a fixed order.
func (e *Endpoint) corruptAndDelay(it *item) {
	f := &e.faults
	if e.roll(f.Corrupt) && it.n > f.CorruptFrom {
		bit := f.CorruptFrom*8 + e.rng.IntN((it.n-f.CorruptFrom)*8)
		it.buf[bit/8] ^= 1 << (bit % 8)
		e.stats.Corrupted.Add(1)
	}
	if e.roll(f.Delay) {
		it.at += int64(e.rng.Int64N(int64(f.MaxDelay)) + 1)
		e.stats.Delayed.Add(1)
	}
	if e.roll(f.Reorder) {
		it.at += int64(f.ReorderDelay)
		e.stats.Reordered.Add(1)
	}
}

func (e *Endpoint) roll(p float64) bool { return p > 0 && e.rng.Float64() < p }

// deliver queues frames sent by the peer for reception.
func (e *Endpoint) deliver(items []item) {
	if len(items) == 0 {
		return
	}
	e.mu.Lock()
	for _, it := range items {
		e.seq++
		it.seq = e.seq
		e.push(it)
	}
	e.mu.Unlock()
	e.Wake()
}

// Receive implements roce.Link.
func (e *Endpoint) Receive(fn func(frame []byte), max int) int {
	now := int64(math.MaxInt64) // every untimed frame is due
	if e.peer.timed {
		now = e.now()
	}
	e.mu.Lock()
	batch := e.scratch[:0]
	if e.peer.timed {
		for len(batch) < max && len(e.heap) > 0 && e.heap[0].at <= now {
			batch = append(batch, e.pop())
		}
	} else {
		batch = e.takeFront(batch, max)
	}
	e.mu.Unlock()
	if len(batch) == 0 {
		return 0
	}
	for _, it := range batch {
		fn(it.buf[:it.n])
	}
	fn(nil)
	// The frames came from the peer's pool; give the buffers back.
	p := &e.peer.pool
	p.mu.Lock()
	for _, it := range batch {
		p.free = append(p.free, it.buf)
	}
	p.nfree.Store(int32(len(p.free)))
	wake := p.starved
	p.starved = false
	p.mu.Unlock()
	if wake {
		e.peer.Wake()
	}
	e.peer.stats.Delivered.Add(uint64(len(batch)))
	clear(batch) // drop references so the scratch holds no stale frames
	e.scratch = batch[:0]
	return len(batch)
}

// Wait implements roce.Link.
func (e *Endpoint) Wait(timeout time.Duration) error {
	select {
	case <-e.closed:
		return roce.ErrLinkClosed
	default:
	}
	e.mu.Lock()
	if len(e.heap) > 0 {
		until := time.Duration(e.heap[0].at - e.now())
		if until <= 0 {
			e.mu.Unlock()
			return nil
		}
		if timeout < 0 || until < timeout {
			timeout = until
		}
	}
	e.mu.Unlock()
	select {
	case <-e.closed:
		return roce.ErrLinkClosed
	case <-e.wake:
		return nil
	default:
	}
	return sleep(e.closed, e.wake, e.timer, timeout)
}

// sleep waits until closed is closed, wake has a token, or timeout passes
// (a negative timeout waits without limit, 0 not at all). t is the
// caller's stopped timer, reused so that a timed wait allocates nothing.
func sleep(closed, wake <-chan struct{}, t *time.Timer, timeout time.Duration) error {
	if timeout == 0 {
		return nil
	}
	var tc <-chan time.Time
	if timeout > 0 {
		t.Reset(timeout)
		tc = t.C
		defer t.Stop()
	}
	select {
	case <-closed:
		return roce.ErrLinkClosed
	case <-wake:
	case <-tc:
	}
	return nil
}

// Wake implements roce.Link.
func (e *Endpoint) Wake() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
	if e.anyWake != nil {
		select {
		case e.anyWake <- struct{}{}:
		default:
		}
	}
}

// nextArrival returns how long until the next frame sent to this end is
// due, if there is one.
func (e *Endpoint) nextArrival() (time.Duration, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.heap) == 0 {
		return 0, false
	}
	return time.Duration(e.heap[0].at - e.now()), true
}

// Close implements roce.Link. Frames in flight to this end are discarded.
func (e *Endpoint) Close() error {
	e.once.Do(func() {
		close(e.closed)
	})
	return nil
}

// push and pop keep e.heap a binary min-heap ordered by (at, seq); written
// out rather than using container/heap, whose interface boxing allocates.
func (e *Endpoint) push(it item) {
	h := append(e.heap, it)
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !less(&h[i], &h[parent]) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
	e.heap = h
}

func (e *Endpoint) pop() item {
	h := e.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = item{}
	h = h[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && less(&h[l], &h[m]) {
			m = l
		}
		if r < len(h) && less(&h[r], &h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	e.heap = h
	return top
}

// takeFront appends up to max frames of the heap to batch, in order, when
// every frame in it is untimed (at 0): push then only appends, sequence
// numbers rising, so the heap is a sorted array and its front the next
// frames; shifting the rest down keeps it sorted, a heap still. The sift
// down of pop per frame cost 3 % of BenchmarkWrite64B's CPU time.
func (e *Endpoint) takeFront(batch []item, max int) []item {
	n := len(e.heap)
	if max < n {
		n = max
	}
	if n <= 0 {
		return batch
	}
	batch = append(batch, e.heap[:n]...)
	rest := copy(e.heap, e.heap[n:])
	clear(e.heap[rest:])
	e.heap = e.heap[:rest]
	return batch
}

func less(a, b *item) bool { return a.at < b.at || (a.at == b.at && a.seq < b.seq) }

// AppendCounters implements roce.CounterLink: what became of the frames
// this end sent (memlink_sent, memlink_lost, ...), faults included.
func (e *Endpoint) AppendCounters(dst []counters.Counter) []counters.Counter {
	return counters.Append(dst, "memlink_", &e.stats)
}
