package verbs_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// transfer moves size bytes from x to y with op (SEND, WRITE or READ, where
// READ pulls y's bytes into x) and checks them byte for byte.
func transfer(t *testing.T, x, y *endpoint, op verbs.WROpcode, size int, seed byte) {
	t.Helper()
	// Guard bytes around the target catch writes outside the message.
	const guard = 64
	lmr, lbuf := regMR(t, x.pd, size+2*guard, allAccess)
	rmr, rbuf := regMR(t, y.pd, size+2*guard, allAccess)
	defer lmr.Dereg()
	defer rmr.Dereg()
	src, dst := lbuf, rbuf
	if op == verbs.WRRDMARead {
		src, dst = rbuf, lbuf
	}
	fill(src, seed)
	fill(dst, ^seed)
	want := append([]byte(nil), dst...)
	copy(want[guard:guard+size], src[guard:guard+size])
	id := uint64(seed)<<32 | uint64(size)
	switch op {
	case verbs.WRSend:
		require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: id, SGL: []verbs.SGE{rmr.SGE(guard, size)}}))
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{lmr.SGE(guard, size)}}))
	default:
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{lmr.SGE(guard, size)}, RemoteAddr: rmr.Addr() + guard, RKey: rmr.RKey()}))
	}
	wc := waitOK(t, x.scq, id)
	require.Equal(t, uint32(size), wc.ByteLen)
	if op == verbs.WRSend {
		rwc := waitOK(t, y.rcq, id)
		require.Equal(t, uint32(size), rwc.ByteLen)
		require.Equal(t, x.qp.QPN(), rwc.SrcQP)
	}
	if !bytesEqual(want, dst) {
		require.FailNowf(t, "data differs", "%v of %d bytes: at byte %d", op, size, firstDiff(want, dst))
	}
}

func bytesEqual(a, b []byte) bool { return firstDiff(a, b) < 0 }

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

var dataOps = []verbs.WROpcode{verbs.WRSend, verbs.WRRDMAWrite, verbs.WRRDMARead}

func TestOperationsAllMTUsAndSizes(t *testing.T) { forEachMode(t, testOperationsAllMTUsAndSizes) }

func testOperationsAllMTUsAndSizes(t *testing.T, m mode) {
	for mtu := verbs.MTU256; mtu <= verbs.MTU4096; mtu++ {
		t.Run(fmt.Sprint(mtu.Bytes()), func(t *testing.T) {
			o := defaultOpts()
			o.mtu = mtu
			_, x, y := connectedPairMode(t, m, memlink.Config{}, o)
			b := mtu.Bytes()
			sizes := []int{0, 1, 3, b - 1, b, b + 1, 2 * b, 5*b + 7, 64 << 10, 1<<20 + 13}
			for _, op := range dataOps {
				for i, size := range sizes {
					transfer(t, x, y, op, size, byte(i+1))
					transfer(t, y, x, op, size, byte(i+101)) // and the other way
				}
			}
		})
	}
}

func TestOperations16MiB(t *testing.T) {
	if testing.Short() {
		t.Skip("16 MiB transfers, seconds each: needs a run without -short")
	}
	for _, mtu := range []verbs.MTU{verbs.MTU256, verbs.MTU4096} {
		t.Run(fmt.Sprint(mtu.Bytes()), func(t *testing.T) {
			o := defaultOpts()
			o.mtu = mtu
			_, x, y := connectedPair(t, memlink.Config{}, o)
			for i, op := range dataOps {
				transfer(t, x, y, op, 16<<20, byte(i+1))
			}
		})
	}
}

func TestPSNWrapAround(t *testing.T) {
	o := defaultOpts()
	o.psnA, o.psnB = 0xfffff0, 0xffffff
	_, x, y := connectedPair(t, memlink.Config{}, o)
	// Each 40 KiB message takes 40 or 41 PSNs, so both sequences wrap early
	// on (0xfffff0 + 16 and 0xffffff + 1).
	for i := range 6 {
		for _, op := range dataOps {
			transfer(t, x, y, op, 40<<10+i, byte(i))
			transfer(t, y, x, op, 40<<10+i, byte(i+50))
		}
	}
}

// TestScatterGather uses 32-entry SGLs of uneven sizes on both sides.
func TestScatterGather(t *testing.T) { forEachMode(t, testScatterGather) }

func testScatterGather(t *testing.T, m mode) {
	o := defaultOpts()
	_, x, y := connectedPairMode(t, m, memlink.Config{}, o)
	const n = 32
	lmr, lbuf := regMR(t, x.pd, 200<<10, allAccess)
	rmr, rbuf := regMR(t, y.pd, 200<<10, allAccess)
	var lsgl, rsgl []verbs.SGE
	var lsegs, rsegs [][]byte
	off, total := 0, 0
	for i := range n {
		size := 1 + i*97%3000 // uneven, some smaller than a packet, some larger
		lsgl = append(lsgl, lmr.SGE(off, size))
		lsegs = append(lsegs, lbuf[off:off+size])
		off += size + 11 // gaps that must stay untouched
		total += size
	}
	// The receive side splits the same total differently.
	off, rest := 0, total
	for i := range n {
		size := rest / (n - i)
		if i%3 == 0 {
			size += i
		}
		size = min(size, rest)
		if i == n-1 {
			size = rest
		}
		rsgl = append(rsgl, rmr.SGE(off, size))
		rsegs = append(rsegs, rbuf[off:off+size])
		off += size + 5
		rest -= size
	}
	join := func(segs [][]byte) []byte {
		var b []byte
		for _, s := range segs {
			b = append(b, s...)
		}
		return b
	}
	for round, op := range dataOps {
		fill(lbuf, byte(round))
		fill(rbuf, byte(round+100))
		lorig, rorig := append([]byte(nil), lbuf...), append([]byte(nil), rbuf...)
		id := uint64(round)
		switch op {
		case verbs.WRSend:
			require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: id, SGL: rsgl}))
			require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled, SGL: lsgl}))
			waitOK(t, x.scq, id)
			wc := waitOK(t, y.rcq, id)
			require.Equal(t, uint32(total), wc.ByteLen)
			require.Equal(t, join(lsegs), join(rsegs))
		case verbs.WRRDMAWrite:
			require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled, SGL: lsgl,
				RemoteAddr: rmr.Addr() + 100, RKey: rmr.RKey()}))
			waitOK(t, x.scq, id)
			require.Equal(t, join(lsegs), rbuf[100:100+total])
			rsegs = nil
		case verbs.WRRDMARead:
			require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled, SGL: lsgl,
				RemoteAddr: rmr.Addr() + 100, RKey: rmr.RKey()}))
			waitOK(t, x.scq, id)
			require.Equal(t, rbuf[100:100+total], join(lsegs))
		}
		// Bytes outside the SGEs are untouched.
		for i := range lbuf {
			if !inSGL(lmr, lsgl, i) && op != verbs.WRRDMARead {
				require.Equal(t, lorig[i], lbuf[i])
			}
		}
		if op == verbs.WRSend {
			for i := range rbuf {
				if !inSGL(rmr, rsgl, i) {
					require.Equal(t, rorig[i], rbuf[i], "byte %d", i)
				}
			}
		}
	}
}

func inSGL(mr *verbs.MR, sgl []verbs.SGE, i int) bool {
	a := mr.Addr() + uint64(i)
	for _, s := range sgl {
		if a >= s.Addr && a < s.Addr+uint64(s.Length) {
			return true
		}
	}
	return false
}

func TestAtomics(t *testing.T) { forEachMode(t, testAtomics) }

func testAtomics(t *testing.T, m mode) {
	_, x, y := connectedPairMode(t, m, memlink.Config{}, defaultOpts())
	lmr, lbuf := regMR(t, x.pd, 64, allAccess)
	rmr, rbuf := regMR(t, y.pd, 64, allAccess)
	target := func() uint64 { return binary.NativeEndian.Uint64(rbuf[8:]) }
	result := func() uint64 { return binary.NativeEndian.Uint64(lbuf[16:]) }
	binary.NativeEndian.PutUint64(rbuf[8:], 100)
	post := func(id uint64, op verbs.WROpcode, cmpAdd, swap uint64) {
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{lmr.SGE(16, 8)}, RemoteAddr: rmr.Addr() + 8, RKey: rmr.RKey(), CompareAdd: cmpAdd, Swap: swap}))
		wc := waitOK(t, x.scq, id)
		require.Equal(t, uint32(8), wc.ByteLen)
	}
	post(1, verbs.WRAtomicFetchAndAdd, 5, 0)
	require.Equal(t, uint64(100), result())
	require.Equal(t, uint64(105), target())
	post(2, verbs.WRAtomicCmpAndSwp, 99, 7) // compare fails
	require.Equal(t, uint64(105), result())
	require.Equal(t, uint64(105), target())
	post(3, verbs.WRAtomicCmpAndSwp, 105, 7) // compare matches
	require.Equal(t, uint64(105), result())
	require.Equal(t, uint64(7), target())
	post(4, verbs.WRAtomicFetchAndAdd, ^uint64(0), 0) // wraps: adds -1
	require.Equal(t, uint64(7), result())
	require.Equal(t, uint64(6), target())
	require.Equal(t, make([]byte, 8), rbuf[:8])
	require.Equal(t, make([]byte, 48), rbuf[16:])
}

func TestImmediateAndInvalidate(t *testing.T) { forEachMode(t, testImmediateAndInvalidate) }

func testImmediateAndInvalidate(t *testing.T, m mode) {
	_, x, y := connectedPairMode(t, m, memlink.Config{}, defaultOpts())
	lmr, lbuf := regMR(t, x.pd, 8192, allAccess)
	rmr, rbuf := regMR(t, y.pd, 8192, allAccess)
	fill(lbuf, 3)

	// SEND with immediate.
	require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{rmr.SGE(0, 8192)}}))
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{lmr.SGE(0, 3000)}, Imm: 0xdeadbeef}))
	waitOK(t, x.scq, 1)
	wc := waitOK(t, y.rcq, 1)
	require.Equal(t, verbs.WCRecv, wc.Opcode)
	require.Equal(t, verbs.WCWithImm, wc.Flags&verbs.WCWithImm)
	require.Equal(t, uint32(0xdeadbeef), wc.Imm)
	require.Equal(t, uint32(3000), wc.ByteLen)
	require.Equal(t, lbuf[:3000], rbuf[:3000])

	// RDMA WRITE with immediate consumes a receive but places data by RETH.
	require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: 2}))
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{lmr.SGE(100, 5000)}, RemoteAddr: rmr.Addr() + 3000, RKey: rmr.RKey(), Imm: 42}))
	waitOK(t, x.scq, 2)
	wc = waitOK(t, y.rcq, 2)
	require.Equal(t, verbs.WCRecvRDMAWithImm, wc.Opcode)
	require.Equal(t, uint32(42), wc.Imm)
	require.Equal(t, uint32(5000), wc.ByteLen)
	require.Equal(t, lbuf[100:5100], rbuf[3000:8000])

	// SEND with invalidate: the named rkey stops working.
	victim, _ := regMR(t, y.pd, 64, allAccess)
	require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: 3, SGL: []verbs.SGE{rmr.SGE(0, 64)}}))
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{lmr.SGE(0, 10)}, InvalidateRKey: victim.RKey()}))
	waitOK(t, x.scq, 3)
	wc = waitOK(t, y.rcq, 3)
	require.Equal(t, verbs.WCWithInv, wc.Flags&verbs.WCWithInv)
	require.Equal(t, victim.RKey(), wc.InvalidatedRKey)
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{lmr.SGE(0, 8)}, RemoteAddr: victim.Addr(), RKey: victim.RKey()}))
	wc = waitWC(t, x.scq)
	require.Equal(t, verbs.WCRemAccessErr, wc.Status)
	require.NoError(t, victim.Dereg())
}

func TestInlineUnsignaledAndFence(t *testing.T) { forEachMode(t, testInlineUnsignaledAndFence) }

func testInlineUnsignaledAndFence(t *testing.T, m mode) {
	_, x, y := connectedPairMode(t, m, memlink.Config{}, defaultOpts())
	lmr, lbuf := regMR(t, x.pd, 4096, allAccess)
	rmr, rbuf := regMR(t, y.pd, 4096, allAccess)

	// Inline data is copied at post time: changing it afterwards has no effect.
	data := []byte("inline payload, copied by PostSend")
	msg := append([]byte(nil), data...)
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendInline,
		InlineData: data, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
	copy(data, "XXXXXXXXXXXX")
	// Unsignaled WRs give no completion; a signaled one after them does, and
	// implies them done.
	require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: 2, SGL: []verbs.SGE{rmr.SGE(1000, 100)}}))
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendInline,
		InlineData: []byte("hello")}))
	// Fenced READ of what the inline WRITE placed, then a WRITE that
	// overwrites it: the fence orders them.
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled | verbs.SendFence,
		SGL: []verbs.SGE{lmr.SGE(0, len(msg))}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
	copy(lbuf[2000:], "overwritten")
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled | verbs.SendFence,
		SGL: []verbs.SGE{lmr.SGE(2000, 11)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
	waitOK(t, x.scq, 3)
	waitOK(t, x.scq, 4)
	noWC(t, x.scq)
	require.Equal(t, msg, lbuf[:len(msg)])
	require.Equal(t, "overwritten", string(rbuf[:11]))
	wc := waitOK(t, y.rcq, 2)
	require.Equal(t, uint32(5), wc.ByteLen)
	require.Equal(t, "hello", string(rbuf[1000:1005]))

	// Too much inline data, or inline READ, is refused at post time. 32
	// SGEs make room for 512 inline bytes (16 each, as rxe counts them),
	// though the QP asked for 256.
	require.Equal(t, 512, x.qp.Cap().MaxInlineData)
	require.ErrorIs(t, x.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendInline,
		InlineData: make([]byte, 513)}), verbs.ErrInvalidArgument)
	require.ErrorIs(t, x.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRRDMARead, Flags: verbs.SendInline,
		InlineData: make([]byte, 8)}), verbs.ErrInvalidArgument)
}

func TestInlineRounding(t *testing.T) { forEachMode(t, testInlineRounding) }

// testInlineRounding checks that a QP's inline room is at least what its
// send SGEs would take in an entry, 16 bytes each, as rxe rounds it: a QP
// that asked for none and one SGE sends 16 bytes inline (rdma_xclient).
func testInlineRounding(t *testing.T, m mode) {
	for _, c := range []struct{ sge, inline, want int }{{1, 0, 16}, {0, 0, 16}, {4, 0, 64}, {1, 100, 100}, {2, 20, 32}} {
		o := defaultOpts()
		o.sge, o.inline = c.sge, c.inline
		_, x, y := connectedPairMode(t, m, memlink.Config{}, o)
		require.Equal(t, c.want, x.qp.Cap().MaxInlineData, "%d SGEs, %d inline bytes asked", c.sge, c.inline)
		rmr, rbuf := regMR(t, y.pd, 4096, allAccess)
		require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{rmr.SGE(0, 4096)}}))
		data := make([]byte, c.want)
		fill(data, byte(c.want))
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendInline | verbs.SendSignaled,
			InlineData: data}))
		waitOK(t, x.scq, 1)
		wc := waitOK(t, y.rcq, 1)
		require.Equal(t, uint32(c.want), wc.ByteLen)
		require.Equal(t, data, rbuf[:c.want])
		require.ErrorIs(t, x.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendInline,
			InlineData: make([]byte, c.want+1)}), verbs.ErrInvalidArgument)
	}
}

func TestSharedReceiveQueue(t *testing.T) { forEachMode(t, testSharedReceiveQueue) }

func testSharedReceiveQueue(t *testing.T, m mode) {
	o := defaultOpts()
	p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
	pdB := p.b.AllocPD()
	srq, err := pdB.NewSRQ(64, 4)
	require.NoError(t, err)
	// Two senders on A, two QPs on B sharing one SRQ.
	x1 := newEndpoint(t, p.a, nil, o, nil)
	x2 := newEndpoint(t, p.a, x1.pd, o, nil)
	y1 := newEndpoint(t, p.b, pdB, o, srq)
	y2 := newEndpoint(t, p.b, pdB, o, srq)
	connect(t, x1, y1, o)
	connect(t, x2, y2, o)
	require.ErrorIs(t, y1.qp.PostRecv(&verbs.RecvWR{}), verbs.ErrInvalidArgument)

	rmr, rbuf := regMR(t, pdB, 16*100, allAccess)
	for i := range 16 {
		require.NoError(t, srq.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rmr.SGE(i*100, 100)}}))
	}
	require.Equal(t, 16, srq.Len())
	smr, sbuf := regMR(t, x1.pd, 100, allAccess)
	fill(sbuf, 9)
	for i := range 16 {
		x := x1
		if i%2 == 1 {
			x = x2
		}
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{smr.SGE(0, 10+i)}}))
		waitOK(t, x.scq, uint64(i))
	}
	// Receives were consumed in posting order, whichever QP got the message.
	for i := range 16 {
		y := y1
		if i%2 == 1 {
			y = y2
		}
		wc := waitOK(t, y.rcq, uint64(i))
		require.Equal(t, uint32(10+i), wc.ByteLen)
	}
	for i := range 16 {
		// Message i consumed receive i: its bytes sit at i*100.
		require.Equal(t, sbuf[:10+i], rbuf[i*100:i*100+10+i], "message %d", i)
	}
	require.Equal(t, 0, srq.Len())
}

// TestSendQueueDepthOne posts again as soon as the completion is polled,
// with room for one work request: the slot must be free by then.
func TestSendQueueDepthOne(t *testing.T) {
	o := defaultOpts()
	o.sendWR, o.recvWR = 1, 1
	_, x, y := connectedPair(t, memlink.Config{}, o)
	lmr, _ := regMR(t, x.pd, 64, allAccess)
	rmr, _ := regMR(t, y.pd, 64, allAccess)
	for i := range 500 {
		op := verbs.WRRDMARead
		if i%2 == 0 {
			op = verbs.WRRDMAWrite
		}
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: op, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{lmr.SGE(0, 64)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
		waitOK(t, x.scq, uint64(i))
	}
	// The same for receives.
	for i := range 200 {
		require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rmr.SGE(0, 64)}}))
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{lmr.SGE(0, 8)}}))
		waitOK(t, y.rcq, uint64(i))
		waitOK(t, x.scq, uint64(i))
	}
}

// TestLoopback connects two QPs of the same device: the packets never reach
// the link, as with a NIC looping back traffic to its own GID.
func TestLoopback(t *testing.T) {
	p := newPair(t, memlink.Config{})
	o := defaultOpts()
	o.mtu = verbs.MTU4096
	x := newEndpoint(t, p.a, nil, o, nil)
	y := newEndpoint(t, p.a, nil, o, nil)
	connect(t, x, y, o)
	for i, op := range dataOps {
		for _, size := range []int{0, 1, 4096, 100_000, 2 << 20} {
			transfer(t, x, y, op, size, byte(i))
			transfer(t, y, x, op, size, byte(i+9))
		}
	}
	require.Zero(t, p.la.Stats().Sent.Load(), "nothing went out on the link")
	require.NotZero(t, p.a.RoCE().Counters().Loopback.Load())
}

func TestPostSendList(t *testing.T) { forEachMode(t, testPostSendList) }

func testPostSendList(t *testing.T, m mode) {
	o := defaultOpts()
	o.sendWR = 8
	_, x, y := connectedPairMode(t, m, memlink.Config{}, o)
	lmr, lbuf := regMR(t, x.pd, 1024, allAccess)
	rmr, rbuf := regMR(t, y.pd, 1024, allAccess)
	fill(lbuf, 1)
	wrs := make([]verbs.SendWR, 10)
	for i := range wrs {
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{lmr.SGE(i*100, 100)}, RemoteAddr: rmr.Addr() + uint64(i*100), RKey: rmr.RKey()}
	}
	wrs[3].SGL = make([]verbs.SGE, 100) // too many SGEs: the list stops there
	n, err := x.qp.PostSendList(wrs)
	require.ErrorIs(t, err, verbs.ErrInvalidArgument)
	require.Equal(t, 3, n)
	wrs[3].SGL = []verbs.SGE{lmr.SGE(300, 100)}
	// 8 slots, of which the first 3 WRs may still hold some: at least 5 go.
	n, err = x.qp.PostSendList(wrs[3:])
	if err != nil {
		require.ErrorIs(t, err, verbs.ErrQueueFull)
	}
	require.GreaterOrEqual(t, n, 5)
	posted := 3 + n
	for i := range posted {
		waitOK(t, x.scq, uint64(i))
	}
	n, err = x.qp.PostSendList(wrs[posted:])
	require.NoError(t, err)
	require.Equal(t, 10-posted, n)
	for i := posted; i < 10; i++ {
		waitOK(t, x.scq, uint64(i))
	}
	require.Equal(t, lbuf[:1000], rbuf[:1000])
}

// TestSendQueueDepth checks that a QP holds no more than its depth of send
// work requests, in every mode: through the daemon a ring's slot is free
// again when its request is done, not when the daemon takes it into its
// engine's queue (which would let a QP hold twice its depth).
func TestSendQueueDepth(t *testing.T) { forEachMode(t, testSendQueueDepth) }

func testSendQueueDepth(t *testing.T, m mode) {
	o := defaultOpts()
	o.sendWR = 4
	// Nothing x sends arrives: its WRITEs stay outstanding, retried.
	_, x, _ := connectedPairMode(t, m, memlink.Config{AtoB: memlink.Faults{Loss: 1}}, o)
	lmr, _ := regMR(t, x.pd, 64, allAccess)
	write := func(id uint64, flags verbs.SendFlags) error {
		return x.qp.PostSend(&verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, Flags: flags,
			SGL: []verbs.SGE{lmr.SGE(0, 64)}, RemoteAddr: 0x1000, RKey: 1})
	}
	for i := range 4 {
		require.NoError(t, write(uint64(i), verbs.SendFlags(i%2)*verbs.SendSignaled))
	}
	// However long the daemon has had to take them into its engine.
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		require.ErrorIs(t, write(99, verbs.SendSignaled), verbs.ErrQueueFull)
	}
}

// TestRecvQueueDepth checks that a QP's receive queue and an SRQ hold no
// more than their depth of receives, in every mode (see
// TestSendQueueDepth).
func TestRecvQueueDepth(t *testing.T) { forEachMode(t, testRecvQueueDepth) }

func testRecvQueueDepth(t *testing.T, m mode) {
	o := defaultOpts()
	o.recvWR = 4
	_, _, y := connectedPairMode(t, m, memlink.Config{}, o) // nothing is sent
	srq, err := y.pd.NewSRQ(4, 1)
	require.NoError(t, err)
	mr, _ := regMR(t, y.pd, 64, allAccess)
	recv := verbs.RecvWR{SGL: []verbs.SGE{mr.SGE(0, 64)}}
	for range 4 {
		require.NoError(t, y.qp.PostRecv(&recv))
		require.NoError(t, srq.PostRecv(&recv))
	}
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		require.ErrorIs(t, y.qp.PostRecv(&recv), verbs.ErrQueueFull, "QP's receive queue")
		require.ErrorIs(t, srq.PostRecv(&recv), verbs.ErrQueueFull, "SRQ")
	}
}

func TestPostRecvList(t *testing.T) { forEachMode(t, testPostRecvList) }

func testPostRecvList(t *testing.T, m mode) {
	o := defaultOpts()
	o.recvWR = 4
	_, x, y := connectedPairMode(t, m, memlink.Config{}, o)
	lmr, lbuf := regMR(t, x.pd, 64, allAccess)
	rmr, rbuf := regMR(t, y.pd, 6*64, allAccess)
	fill(lbuf, 3)
	wrs := make([]verbs.RecvWR, 6)
	for i := range wrs {
		wrs[i] = verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rmr.SGE(i*64, 64)}}
	}
	n, err := y.qp.PostRecvList(wrs)
	require.ErrorIs(t, err, verbs.ErrQueueFull)
	require.Equal(t, 4, n)
	for i := range 4 {
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{lmr.SGE(0, 64)}}))
		waitOK(t, x.scq, uint64(i))
		waitOK(t, y.rcq, uint64(i))
		require.Equal(t, lbuf, rbuf[i*64:(i+1)*64])
	}
}
