package xdp

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// fakeRing lays out a ring like the kernel does (producer, consumer, flags,
// entries) in ordinary memory, with both indexes starting at start so tests
// cross the 32-bit wrap.
func fakeRing(size uint32, entry uintptr, start uint32) ([]byte, unix.XDPRingOffset) {
	off := unix.XDPRingOffset{Producer: 0, Consumer: 64, Flags: 128, Desc: 192}
	mem := make([]byte, 192+uintptr(size)*entry)
	*(*uint32)(unsafe.Pointer(&mem[off.Producer])) = start
	*(*uint32)(unsafe.Pointer(&mem[off.Consumer])) = start
	return mem, off
}

// fakeSocket is a Socket whose rings live in ordinary memory, driven by a
// simulated kernel: no privileges needed.
func fakeSocket(t testing.TB, frames, frameSize int, start uint32) *Socket {
	t.Helper()
	cfg := Config{NumFrames: frames, FrameSize: frameSize}
	require.NoError(t, cfg.setDefaults())
	s := &Socket{fd: -1, cfg: cfg, layout: cfg.layout()}
	s.umem = make([]byte, frames*frameSize)
	fakeRings(s, start)
	return s
}

// fakeRings gives s its four rings in ordinary memory, sized and attached
// as Open does, both indexes of each starting at start, and its frames
// (initFrames).
func fakeRings(s *Socket, start uint32) {
	for _, r := range s.ringSpecs() {
		mem, off := fakeRing(uint32(r.n), r.esize, start)
		r.attach(mem, off, r.n)
	}
	s.initFrames()
}

// kernel is the simulated other side of a fakeSocket.
type kernel struct {
	s       *Socket
	held    []uint64 // fill addresses taken but not yet used
	inUse   map[uint64]bool
	rng     *rand.Rand
	seq     uint32
	lazyFQ  uint32 // fill entries consumed but not yet published (like the kernel)
	txSeen  int
	pending []uint64 // TX frames sent, completion not yet posted
}

func (k *kernel) takeFill(n int) {
	r := &k.s.fill.ring
	for i := 0; i < n; i++ {
		cons := *r.consumer + k.lazyFQ
		if cons == *r.producer {
			break
		}
		addr := k.s.fill.addrs[cons&r.mask]
		if k.inUse[addr] {
			panic("fill ring handed the kernel a frame it already holds")
		}
		k.inUse[addr] = true
		k.held = append(k.held, addr)
		k.lazyFQ++
	}
	// Publish the consumer only sometimes, as the kernel does.
	if k.rng.IntN(3) == 0 {
		*r.consumer += k.lazyFQ
		k.lazyFQ = 0
	}
}

// deliver puts one packet of frags descriptors on the RX ring if it can.
func (k *kernel) deliver(frags int) bool {
	r := &k.s.rx.ring
	if len(k.held) < frags || r.size-(*r.producer-*r.consumer) < uint32(frags) {
		return false
	}
	for i := 0; i < frags; i++ {
		addr := k.held[0]
		k.held = k.held[1:]
		d := Desc{Addr: addr + 256, Len: 100 + k.seq}
		d.SetMore(i < frags-1)
		k.s.rx.descs[(*r.producer+uint32(i))&r.mask] = d
		delete(k.inUse, addr)
	}
	k.seq++
	*r.producer += uint32(frags)
	return true
}

func (k *kernel) transmit() {
	r := &k.s.tx.ring
	for *r.consumer != *r.producer {
		d := k.s.tx.descs[*r.consumer&r.mask]
		k.pending = append(k.pending, d.Addr)
		*r.consumer++
		k.txSeen++
	}
	c := &k.s.comp.ring
	for len(k.pending) > 0 && c.size-(*c.producer-*c.consumer) > 0 && k.rng.IntN(2) == 0 {
		k.s.comp.addrs[*c.producer&c.mask] = k.pending[0]
		k.pending = k.pending[1:]
		*c.producer++
	}
}

// A long random run across the 32-bit index wrap: every received frame is
// owned once, multi-buffer packets are never split, every frame comes back,
// and no transmit frame is handed out while the kernel holds it.
func TestRingsAgainstSimulatedKernel(t *testing.T) {
	for _, start := range []uint32{0, 0xffffff00} {
		s := fakeSocket(t, 64, 2048, start)
		k := &kernel{s: s, inUse: map[uint64]bool{}, rng: rand.New(rand.NewPCG(1, 2))}
		descs := make([]Desc, 8)
		out := map[uint64]bool{} // TX frames the application holds or the kernel has
		got, sentPk := 0, 0
		for step := 0; step < 20000; step++ {
			k.takeFill(k.rng.IntN(8))
			k.deliver(1 + k.rng.IntN(3))
			n := s.Receive(descs[:3+k.rng.IntN(len(descs)-2)]) // room for the largest packet (3 descriptors)
			for i, d := range descs[:n] {
				if i == n-1 {
					require.False(t, d.More(), "start %#x step %d: Receive split a packet", start, step)
				}
				require.NotNil(t, s.Frame(d), "descriptor %+v outside the UMEM", d)
				require.Equal(t, uint32(100+got), d.Len, "start %#x step %d: descriptor of packet %d, want packet %d", start, step, d.Len-100, got)
				if !d.More() {
					got++
				}
			}
			require.NoError(t, s.Release(descs[:n]))
			if d, _, ok := s.NextTxFrame(); ok {
				require.False(t, out[d.Addr], "transmit frame %#x handed out twice", d.Addr)
				out[d.Addr] = true
				d.Len = 60
				n, err := s.Transmit([]Desc{d})
				require.NoError(t, err)
				require.Equal(t, 1, n, "transmit")
				sentPk++
			}
			k.transmit()
			for _, a := range s.freeTx {
				delete(out, a)
			}
			if s.Complete() > 0 {
				for _, a := range s.freeTx {
					delete(out, a)
				}
			}
		}
		require.GreaterOrEqual(t, got, 1000, "start %#x: packets received", start)
		require.GreaterOrEqual(t, sentPk, 1000, "start %#x: packets sent", start)
		require.Zero(t, s.ctr.ownershipErrors.Load(), "start %#x: ownership errors", start)
		// Every receive frame is on the fill ring, in the kernel, or free.
		rxPending := int(*s.rx.producer - *s.rx.consumer)
		total := len(k.held) + int(s.fill.prodOutstanding()-k.lazyFQ) + rxPending + len(s.freeRx)
		assert.Equal(t, 32, total, "start %#x: receive frames accounted for", start)
	}
}

func TestDescMore(t *testing.T) {
	var d Desc
	d.SetMore(true)
	require.True(t, d.More(), "SetMore(true)")
	require.Equal(t, uint32(unix.XDP_PKT_CONTD), d.Options, "SetMore(true)")
	d.SetMore(false)
	require.False(t, d.More(), "SetMore(false)")
	require.Zero(t, d.Options, "SetMore(false)")
	require.Equal(t, unsafe.Sizeof(unix.XDPDesc{}), unsafe.Sizeof(Desc{}), "Desc does not have the layout of struct xdp_desc")
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []Config{
		{FrameSize: 3000}, {FrameSize: 1024}, {FrameSize: 8192},
		{NumFrames: 3}, {NumFrames: 1}, {RxRingSize: 100}, {TxRingSize: 3},
		{NumFrames: 1 << 30}, {TxFrameSize: 8192},
		{Contiguous: true, Mode: ModeZeroCopy}, {Contiguous: true, TxFrameSize: 5000},
		{Contiguous: true, NumFrames: 8, TxFrameSize: 3 * 4096},
	} {
		assert.Error(t, c.setDefaults(), "%+v accepted", c)
	}
	c := Config{}
	if assert.NoError(t, c.setDefaults(), "defaults") {
		assert.Equal(t, 4096, c.FrameSize, "defaults")
		assert.Equal(t, 4096, c.NumFrames, "defaults")
		assert.Equal(t, 2048, c.RxRingSize, "defaults")
	}
}

// TestContiguousLayout checks the contiguous layout's arithmetic against a
// simulated kernel: receive buffers a chunk less the headroom apart, handed
// back in order, and transmit frames of several chunks sent as several
// descriptors and freed once all of them complete.
func TestContiguousLayout(t *testing.T) {
	cfg := Config{NumFrames: 64, Contiguous: true, TxFrameSize: 3 * 4096}
	require.NoError(t, cfg.setDefaults())
	require.Equal(t, ModeCopy, cfg.Mode, "contiguous layout did not imply copy mode")
	require.True(t, cfg.MultiBuffer, "contiguous layout did not imply multi-buffer")
	l := cfg.layout()
	require.Equal(t, uint64(4096-256), l.rxStride, "layout %+v", l)
	require.Equal(t, 32, l.rxCount, "layout %+v", l)
	require.Zero(t, l.txBase%4096, "layout %+v", l)
	require.GreaterOrEqual(t, l.txBase, uint64(31*(4096-256)+4096), "layout %+v", l)
	require.Equal(t, 3, l.txDescs, "layout %+v", l)
	end := l.txAddr(l.txCount-1) + l.txStride
	require.LessOrEqual(t, end, uint64(64*4096), "last transmit frame ends past the UMEM")
	for i := 0; i < l.rxCount; i++ {
		// The data of buffer i (256 bytes in) maps back to buffer i.
		c, ok := l.rxIndex(uint64(i)*l.rxStride + 256 + 100)
		require.True(t, ok, "receive buffer %d", i)
		require.Equal(t, i, c, "receive buffer %d", i)
	}
	_, ok := l.rxIndex(l.txBase)
	require.False(t, ok, "a transmit address maps to a receive buffer")

	s := &Socket{fd: -1, cfg: cfg, layout: l, umem: make([]byte, 64*4096)}
	fakeRings(s, 0)

	// Kernel: a 5000-byte packet into the first two fill entries, reported
	// in unaligned form (offset in the top 16 bits).
	fill, rx := &s.fill.ring, &s.rx.ring
	for i, n := range []uint32{4096 - 256, 5000 - (4096 - 256)} {
		addr := s.fill.addrs[*fill.consumer&fill.mask]
		*fill.consumer++
		d := Desc{Addr: addr | 256<<unalignedOffsetShift, Len: n}
		d.SetMore(i == 0)
		s.rx.descs[*rx.producer&rx.mask] = d
		*rx.producer++
	}
	descs := make([]Desc, 4)
	require.Equal(t, 2, s.Receive(descs), "descriptors received")
	span := s.Span(descs[:2])
	require.Len(t, span, 5000, "descriptors %+v", descs[:2])
	require.Equal(t, uint64(256), descs[0].Addr, "descriptors %+v", descs[:2])
	require.NoError(t, s.Release(descs[:2]))
	// Released buffers go back after the ones still on the fill ring.
	prod := *fill.producer
	require.Equal(t, []uint64{0, l.rxStride}, []uint64{s.fill.addrs[(prod-2)&fill.mask], s.fill.addrs[(prod-1)&fill.mask]}, "refilled")

	d, buf, ok := s.NextTxFrame()
	require.True(t, ok, "no transmit frame")
	require.Len(t, buf, 3*4096, "transmit frame")
	require.Equal(t, 3*4096, s.TxFrameSize())
	tx := s.AppendTx(nil, d, 9014)
	require.Len(t, tx, 3, "AppendTx: %+v", tx)
	require.Equal(t, uint32(4096), tx[0].Len, "AppendTx: %+v", tx)
	require.True(t, tx[0].More() && tx[1].More() && !tx[2].More(), "AppendTx: %+v", tx)
	require.Equal(t, d.Addr+8192, tx[2].Addr, "AppendTx: %+v", tx)
	require.Equal(t, uint32(9014-8192), tx[2].Len, "AppendTx: %+v", tx)
	n, err := s.Transmit(tx)
	require.NoError(t, err)
	require.Equal(t, 3, n, "Transmit")
	free := len(s.freeTx)
	// Kernel: complete the descriptors one by one; the frame is free
	// after the last.
	for i, td := range s.tx.descs[:3] {
		s.comp.addrs[*s.comp.producer&s.comp.mask] = td.Addr
		*s.comp.producer++
		s.Complete()
		require.Len(t, s.freeTx, free+i/2, "after %d completions", i+1)
	}
	// A descriptor that leaves its frame is refused.
	d, _, _ = s.NextTxFrame()
	_, err = s.Transmit([]Desc{{Addr: d.Addr + 3*4096 - 100, Len: 200}})
	require.Error(t, err, "a descriptor past its transmit frame was queued")
}

// BenchmarkRingsReceiveRelease measures the socket's own cost per received
// frame (ring reads, ownership, fill-ring refill) against a simulated
// kernel that posts 64-descriptor batches; no syscalls are involved.
func BenchmarkRingsReceiveRelease(b *testing.B) {
	s := fakeSocket(b, 4096, 2048, 0)
	descs := make([]Desc, 64)
	fill, rx := &s.fill.ring, &s.rx.ring
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		// Kernel: move 64 frames from the fill ring to the RX ring.
		for i := uint32(0); i < 64; i++ {
			addr := s.fill.addrs[(*fill.consumer)&fill.mask]
			*fill.consumer++
			s.rx.descs[(*rx.producer)&rx.mask] = Desc{Addr: addr + 256, Len: 64}
			*rx.producer++
		}
		n := s.Receive(descs)
		if err := s.Release(descs[:n]); err != nil { // testify only on failure, as below
			require.NoError(b, err)
		}
		done += n
	}
}

// BenchmarkRingsTransmitComplete measures the socket's own cost per sent
// frame (free list, TX ring, completion ring) against a simulated kernel.
func BenchmarkRingsTransmitComplete(b *testing.B) {
	s := fakeSocket(b, 4096, 2048, 0)
	descs := make([]Desc, 0, 64)
	tx, comp := &s.tx.ring, &s.comp.ring
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		descs = descs[:0]
		for len(descs) < 64 {
			d, _, ok := s.NextTxFrame()
			if !ok { // testify only on failure: its Helper call would dominate the loop
				require.FailNow(b, "no free frame")
			}
			d.Len = 64
			descs = append(descs, d)
		}
		n, err := s.Transmit(descs)
		if err != nil || n != 64 {
			require.FailNow(b, "transmit", "%d, %v", n, err)
		}
		// Kernel: send everything and complete it.
		for *tx.consumer != *tx.producer {
			s.comp.addrs[(*comp.producer)&comp.mask] = s.tx.descs[(*tx.consumer)&tx.mask].Addr
			*tx.consumer++
			*comp.producer++
		}
		s.Complete()
		done += n
	}
}
