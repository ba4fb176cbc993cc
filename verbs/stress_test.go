package verbs_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// stressDir is one direction of a QP pair: a requester issuing random
// operations and the peer receiving its SENDs.
type stressDir struct {
	name       string
	req, resp  *endpoint
	rng        *rand.Rand
	window     int
	maxSize    int
	local      *verbs.MR // window slots of maxSize: sources and READ targets
	lbuf       []byte
	remote     *verbs.MR // window slots: WRITE targets
	rbuf       []byte
	readSrc    *verbs.MR // fixed pattern READs come from
	readBuf    []byte
	atomicWord uint64 // expected value of the word at remote offset 0 of readSrc's... (see counter)
	counter    *verbs.MR
	cbuf       []byte
	recv       *verbs.MR
	recvBuf    []byte
	recvSlots  int

	mu       sync.Mutex
	expected []expectRecv // SENDs and WRITE_WITH_IMMs the receiver must see, in order
}

type expectRecv struct {
	seed uint64
	size int
	imm  bool
	immV uint32
}

type pendingOp struct {
	op     verbs.WROpcode
	seed   uint64
	size   int
	slot   int
	remote uint64 // offset in the remote area
	orig   uint64 // expected atomic result
}

func pattern(b []byte, seed uint64) {
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
}

func randSize(rng *rand.Rand, maxSize int) int {
	switch r := rng.IntN(10); {
	case r < 5:
		return rng.IntN(257)
	case r < 8:
		return rng.IntN(4097)
	default:
		return rng.IntN(maxSize + 1)
	}
}

// run issues n operations and checks each completion and its data.
func (d *stressDir) run(t *testing.T, n int) error {
	pending := make([]pendingOp, 0, d.window)
	var wcs [16]verbs.WC
	posted, done := 0, 0
	nextID := uint64(0)
	tmp := make([]byte, d.maxSize)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for done < n {
		for posted < n && len(pending) < d.window {
			slot := int(nextID % uint64(d.window))
			op := pendingOp{seed: uint64(d.rng.Uint32())<<20 | nextID, slot: slot}
			ops := []verbs.WROpcode{verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm,
				verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd}
			op.op = ops[d.rng.IntN(len(ops))]
			op.size = randSize(d.rng, d.maxSize)
			wr := verbs.SendWR{ID: nextID, Opcode: op.op, Flags: verbs.SendSignaled}
			// The local side is one to three SGEs over the slot.
			var sgl [3]verbs.SGE
			nsge := 1 + d.rng.IntN(3)
			off, left := slot*d.maxSize, op.size
			for k := range nsge {
				n := left
				if k < nsge-1 {
					n = d.rng.IntN(left + 1)
				}
				sgl[k] = d.local.SGE(off, n)
				off, left = off+n, left-n
			}
			lsgl := sgl[:nsge]
			switch op.op {
			case verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
				pattern(d.lbuf[slot*d.maxSize:slot*d.maxSize+op.size], op.seed)
				wr.SGL = lsgl
				if op.size > 0 && op.size <= 64 && d.rng.IntN(2) == 0 {
					wr.Flags |= verbs.SendInline
					wr.InlineData = d.lbuf[slot*d.maxSize : slot*d.maxSize+op.size]
					wr.SGL = nil
				}
				wr.Imm = uint32(op.seed)
				wr.RemoteAddr, wr.RKey = d.remote.Addr()+uint64(slot*d.maxSize), d.remote.RKey()
				if op.op != verbs.WRRDMAWrite {
					d.mu.Lock()
					d.expected = append(d.expected, expectRecv{seed: op.seed, size: op.size,
						imm: op.op == verbs.WRRDMAWriteWithImm || op.op == verbs.WRSendWithImm, immV: uint32(op.seed)})
					d.mu.Unlock()
				}
			case verbs.WRRDMARead:
				op.remote = uint64(d.rng.IntN(len(d.readBuf) - op.size + 1))
				wr.SGL = lsgl
				wr.RemoteAddr, wr.RKey = d.readSrc.Addr()+op.remote, d.readSrc.RKey()
			default:
				op.size = 8
				wr.SGL = []verbs.SGE{d.local.SGE(slot*d.maxSize, 8)}
				wr.RemoteAddr, wr.RKey = d.counter.Addr(), d.counter.RKey()
				op.orig = d.atomicWord
				if op.op == verbs.WRAtomicFetchAndAdd {
					wr.CompareAdd = op.seed
					d.atomicWord += op.seed
				} else {
					wr.CompareAdd = d.atomicWord
					if d.rng.IntN(4) == 0 {
						wr.CompareAdd++ // a compare that fails
					} else {
						d.atomicWord = op.seed
					}
					wr.Swap = op.seed
				}
			}
			if err := d.req.qp.PostSend(&wr); err != nil {
				return fmt.Errorf("%s: post %d: %w", d.name, nextID, err)
			}
			pending = append(pending, op)
			nextID++
			posted++
		}
		got, err := d.req.scq.Wait(ctx, wcs[:])
		if err != nil {
			return fmt.Errorf("%s: waiting after %d of %d: %w\nrequester %s\nresponder %s", d.name, done, n, err,
				d.req.qp.DebugState(), d.resp.qp.DebugState())
		}
		for _, wc := range wcs[:got] {
			want := uint64(done)
			if wc.Status != verbs.WCSuccess || wc.WRID != want {
				return fmt.Errorf("%s: completion %d: got WR %d status %v", d.name, want, wc.WRID, wc.Status)
			}
			op := pending[0]
			pending = pending[1:]
			if wc.ByteLen != uint32(op.size) {
				return fmt.Errorf("%s: WR %d (%v): byte_len %d, want %d", d.name, want, op.op, wc.ByteLen, op.size)
			}
			l := d.lbuf[op.slot*d.maxSize : op.slot*d.maxSize+op.size]
			switch op.op {
			case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
				r := d.rbuf[op.slot*d.maxSize : op.slot*d.maxSize+op.size]
				pattern(tmp[:op.size], op.seed)
				if i := firstDiff(tmp[:op.size], r); i >= 0 {
					return fmt.Errorf("%s: WRITE %d of %d bytes: byte %d wrong", d.name, want, op.size, i)
				}
			case verbs.WRRDMARead:
				if i := firstDiff(d.readBuf[op.remote:op.remote+uint64(op.size)], l); i >= 0 {
					return fmt.Errorf("%s: READ %d of %d bytes: byte %d wrong", d.name, want, op.size, i)
				}
			case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
				if v := binary.NativeEndian.Uint64(l); v != op.orig {
					return fmt.Errorf("%s: atomic %d returned %d, want %d", d.name, want, v, op.orig)
				}
			}
			done++
		}
	}
	if v := binary.NativeEndian.Uint64(d.cbuf); v != d.atomicWord {
		return fmt.Errorf("%s: atomic word %d, want %d", d.name, v, d.atomicWord)
	}
	return nil
}

// receive checks, in order, the receives of the messages the requester
// announced in d.expected, until ctx ends.
func (d *stressDir) receive(ctx context.Context) error {
	var wcs [16]verbs.WC
	tmp := make([]byte, d.maxSize)
	seen := 0
	for slot := range d.recvSlots {
		if err := d.resp.qp.PostRecv(&verbs.RecvWR{ID: uint64(slot), SGL: []verbs.SGE{d.recv.SGE(slot*d.maxSize, d.maxSize)}}); err != nil {
			return err
		}
	}
	nextSlot := 0
	for {
		got, err := d.resp.rcq.Wait(ctx, wcs[:])
		if err != nil {
			if ctx.Err() != nil {
				return nil // the test checks that nothing expected is missing
			}
			return fmt.Errorf("%s receiver: after %d messages: %w", d.name, seen, err)
		}
		for _, wc := range wcs[:got] {
			d.mu.Lock()
			if len(d.expected) == 0 {
				d.mu.Unlock()
				return fmt.Errorf("%s receiver: unexpected completion %+v", d.name, wc)
			}
			exp := d.expected[0]
			d.expected = d.expected[1:]
			d.mu.Unlock()
			if wc.Status != verbs.WCSuccess || wc.WRID != uint64(nextSlot) {
				return fmt.Errorf("%s receiver: message %d: WR %d status %v, want WR %d", d.name, seen, wc.WRID, wc.Status, nextSlot)
			}
			if wc.ByteLen != uint32(exp.size) || (wc.Flags&verbs.WCWithImm != 0) != exp.imm || (exp.imm && wc.Imm != exp.immV) {
				return fmt.Errorf("%s receiver: message %d: %+v, want %+v", d.name, seen, wc, exp)
			}
			if wc.Opcode == verbs.WCRecv {
				pattern(tmp[:exp.size], exp.seed)
				b := d.recvBuf[nextSlot*d.maxSize : nextSlot*d.maxSize+exp.size]
				if i := firstDiff(tmp[:exp.size], b); i >= 0 {
					return fmt.Errorf("%s receiver: message %d of %d bytes: byte %d wrong", d.name, seen, exp.size, i)
				}
			}
			if err := d.resp.qp.PostRecv(&verbs.RecvWR{ID: uint64(nextSlot),
				SGL: []verbs.SGE{d.recv.SGE(nextSlot*d.maxSize, d.maxSize)}}); err != nil {
				return err
			}
			nextSlot = (nextSlot + 1) % d.recvSlots
			seen++
		}
	}
}

func newStressDir(t *testing.T, name string, req, resp *endpoint, seed uint64) *stressDir {
	d := &stressDir{name: name, req: req, resp: resp, rng: rand.New(rand.NewPCG(seed, 7)), window: 16,
		maxSize: 24 << 10, recvSlots: 32}
	d.local, d.lbuf = regMR(t, req.pd, d.window*d.maxSize, allAccess)
	d.remote, d.rbuf = regMR(t, resp.pd, d.window*d.maxSize, allAccess)
	d.readSrc, d.readBuf = regMR(t, resp.pd, 256<<10, allAccess)
	pattern(d.readBuf, seed)
	d.counter, d.cbuf = regMR(t, resp.pd, 8, allAccess)
	d.recv, d.recvBuf = regMR(t, resp.pd, d.recvSlots*d.maxSize, allAccess)
	return d
}

// TestStressLossyLink runs random operations of random sizes on several QPs,
// both ways, over a link that loses, duplicates, reorders, delays and
// corrupts frames; every byte and every completion is checked. Through the
// daemon, every QP is a daemon client.
func TestStressLossyLink(t *testing.T) { forEachMode(t, testStressLossyLink) }

func testStressLossyLink(t *testing.T, m mode) {
	total := 100_000
	if testing.Short() {
		total = 10_000
	}
	if v, err := strconv.Atoi(os.Getenv("SOFTNIC_STRESS_OPS")); err == nil {
		total = v // for quick runs under the race detector
	}
	before := runtime.NumGoroutine()
	faults := memlink.Faults{Loss: 0.05, Duplicate: 0.02, Reorder: 0.05, Corrupt: 0.01, Delay: 0.01}
	seed := uint64(42)
	if v, err := strconv.ParseUint(os.Getenv("SOFTNIC_STRESS_SEED"), 10, 64); err == nil {
		seed = v // to soak the engine under other fault patterns
	}
	p := newPairMode(t, m, memlink.Config{Seed: seed, AtoB: faults, BtoA: faults}, verbs.Config{})
	mtus := []verbs.MTU{verbs.MTU1024, verbs.MTU4096, verbs.MTU256, verbs.MTU2048}
	var dirs []*stressDir
	for i, mtu := range mtus {
		o := defaultOpts()
		o.mtu = mtu
		o.timeout = 8 // 1 ms
		o.minRNR = 1
		o.maxRd = 4
		o.sendWR, o.recvWR = 64, 64
		o.psnA, o.psnB = verbs.PSN(0xffffff-uint32(i)*1000), verbs.PSN(uint32(i)*77777)
		x := newEndpoint(t, p.a, nil, o, nil)
		y := newEndpoint(t, p.b, nil, o, nil)
		connect(t, x, y, o)
		dirs = append(dirs, newStressDir(t, fmt.Sprintf("qp%d A->B", i), x, y, seed+uint64(i)),
			newStressDir(t, fmt.Sprintf("qp%d B->A", i), y, x, seed+uint64(i+100)))
	}
	per := total / len(dirs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 2*len(dirs))
	var wg sync.WaitGroup
	var recvWG sync.WaitGroup
	for _, d := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- d.run(t, per)
		}()
		recvWG.Add(1)
		go func() {
			defer recvWG.Done()
			err := d.receive(ctx)
			errs <- err
		}()
	}
	wg.Wait()
	for range dirs {
		require.NoError(t, <-errs)
	}
	// Receivers finish once the last expected message is in.
	require.Eventually(t, func() bool {
		for _, d := range dirs {
			d.mu.Lock()
			left := len(d.expected)
			d.mu.Unlock()
			if left != 0 {
				return false
			}
		}
		return true
	}, time.Minute, time.Millisecond)
	cancel()
	recvWG.Wait()
	for range dirs {
		require.NoError(t, <-errs)
	}
	// Exactly once: nothing more arrives.
	for _, d := range dirs {
		noWC(t, d.req.scq)
	}
	st := p.la.Stats()
	t.Logf("A->B frames: sent %d lost %d dup %d reordered %d corrupted %d; B: bad ICRC %d; retransmits A %d B %d",
		st.Sent.Load(), st.Lost.Load(), st.Duplicated.Load(), st.Reordered.Load(), st.Corrupted.Load(),
		p.engB.RoCE().Counters().Rx.BadICRC.Load(), p.engA.Counters().Retransmits.Load(), p.engB.Counters().Retransmits.Load())
	require.NotZero(t, p.engB.RoCE().Counters().Rx.BadICRC.Load(), "corrupted frames must be caught by the ICRC")
	require.NotZero(t, st.Lost.Load())
	require.NotZero(t, st.Duplicated.Load())
	// No goroutine outlives the devices (and daemons).
	p.close()
	// (Polled by hand: require.Eventually runs its own goroutine.)
	after := runtime.NumGoroutine()
	for deadline := time.Now().Add(10 * time.Second); after > before && time.Now().Before(deadline); after = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	require.LessOrEqual(t, after, before, "goroutines leaked")
}
