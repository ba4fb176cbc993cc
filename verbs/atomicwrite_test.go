package verbs_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// flushOpts are the default options with the responder QPs allowing
// global FLUSHes, which rxe asks of a QP as of a region.
func flushOpts() qpOpts {
	o := defaultOpts()
	o.access |= verbs.AccessFlushGlobal
	return o
}

// TestAtomicWriteAndFlush: an ATOMIC_WRITE lands its 8 bytes unchanged
// after the WRITE before it, and FLUSHes of a range and of a whole region
// complete, each with its own completion opcode.
func TestAtomicWriteAndFlush(t *testing.T) { forEachMode(t, testAtomicWriteAndFlush) }

func testAtomicWriteAndFlush(t *testing.T, m mode) {
	_, x, y := connectedPairMode(t, m, memlink.Config{}, flushOpts())
	lmr, lbuf := regMR(t, x.pd, 4096, allAccess)
	rmr, rbuf := regMR(t, y.pd, 4096, allAccess|verbs.AccessFlushGlobal)
	fill(lbuf, 3)
	word := [8]byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}
	wrs := []verbs.SendWR{
		{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{lmr.SGE(0, 2048)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()},
		{ID: 2, Opcode: verbs.WRAtomicWrite, Flags: verbs.SendSignaled, RemoteAddr: rmr.Addr() + 2048,
			RKey: rmr.RKey(), AtomicWrite: word},
		{ID: 3, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RemoteAddr: rmr.Addr(), RKey: rmr.RKey(),
			FlushLength: 2056, FlushType: verbs.FlushGlobal, FlushLevel: verbs.FlushRange},
		{ID: 4, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RemoteAddr: rmr.Addr() + 5000, RKey: rmr.RKey(),
			FlushType: verbs.FlushGlobal, FlushLevel: verbs.FlushMR},
	}
	n, err := x.qp.PostSendList(wrs)
	require.NoError(t, err)
	require.Equal(t, len(wrs), n)
	wc := waitOK(t, x.scq, 2)
	require.Equal(t, verbs.WCAtomicWrite, wc.Opcode)
	require.Equal(t, uint32(8), wc.ByteLen)
	require.Equal(t, word[:], rbuf[2048:2056], "the bytes as they lay in the request")
	require.True(t, bytes.Equal(lbuf[:2048], rbuf[:2048]), "the WRITE before it landed first")
	wc = waitOK(t, x.scq, 3)
	require.Equal(t, verbs.WCFlush, wc.Opcode)
	require.Equal(t, uint32(2056), wc.ByteLen)
	wc = waitOK(t, x.scq, 4)
	require.Equal(t, verbs.WCFlush, wc.Opcode)
	require.Equal(t, make([]byte, 4096-2056), rbuf[2056:])
	noWC(t, y.rcq) // neither consumes a receive

	// A second ATOMIC_WRITE replaces the word whole.
	binary.NativeEndian.PutUint64(word[:], 0x0102030405060708)
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 5, Opcode: verbs.WRAtomicWrite, Flags: verbs.SendSignaled,
		RemoteAddr: rmr.Addr() + 2048, RKey: rmr.RKey(), AtomicWrite: word}))
	waitOK(t, x.scq, 5)
	require.Equal(t, uint64(0x0102030405060708), binary.NativeEndian.Uint64(rbuf[2048:]))
}

// refusal posts wr from x to y's region and checks that it fails with st,
// the completion of the responder's NAK, and that the requester's QP is in
// error.
func refusal(t *testing.T, x *endpoint, wr *verbs.SendWR, st verbs.WCStatus) {
	t.Helper()
	wr.Flags |= verbs.SendSignaled
	require.NoError(t, x.qp.PostSend(wr))
	wc := waitWC(t, x.scq)
	require.Equal(t, wr.ID, wc.WRID)
	require.Equal(t, st, wc.Status, "%v: %v", wr.Opcode, wc.Status)
	require.Equal(t, verbs.QPSErr, x.qp.State())
}

// TestAtomicWriteRefused: the responder NAKs an ATOMIC_WRITE to an
// unaligned address (invalid request, IBA A19.4.2) and one to a region
// without remote write (remote access error), writing nothing.
func TestAtomicWriteRefused(t *testing.T) { forEachMode(t, testAtomicWriteRefused) }

func testAtomicWriteRefused(t *testing.T, m mode) {
	word := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	t.Run("unaligned", func(t *testing.T) {
		_, x, y := connectedPairMode(t, m, memlink.Config{}, flushOpts())
		rmr, rbuf := regMR(t, y.pd, 64, allAccess)
		refusal(t, x, &verbs.SendWR{ID: 1, Opcode: verbs.WRAtomicWrite, RemoteAddr: rmr.Addr() + 4, RKey: rmr.RKey(),
			AtomicWrite: word}, verbs.WCRemInvReqErr)
		require.Equal(t, make([]byte, 64), rbuf)
	})
	t.Run("no remote write", func(t *testing.T) {
		_, x, y := connectedPairMode(t, m, memlink.Config{}, flushOpts())
		rmr, rbuf := regMR(t, y.pd, 64, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
		refusal(t, x, &verbs.SendWR{ID: 1, Opcode: verbs.WRAtomicWrite, RemoteAddr: rmr.Addr(), RKey: rmr.RKey(),
			AtomicWrite: word}, verbs.WCRemAccessErr)
		require.Equal(t, make([]byte, 64), rbuf)
	})
	t.Run("past the region", func(t *testing.T) {
		_, x, y := connectedPairMode(t, m, memlink.Config{}, flushOpts())
		rmr, _ := regMR(t, y.pd, 64, allAccess)
		refusal(t, x, &verbs.SendWR{ID: 1, Opcode: verbs.WRAtomicWrite, RemoteAddr: rmr.Addr() + 64, RKey: rmr.RKey(),
			AtomicWrite: word}, verbs.WCRemAccessErr)
	})
}

// TestFlushRefused: a FLUSH to a region without FLUSH access is NAKed
// with a remote access error, as is a persistent FLUSH (no region can
// grant one: registering persistent access fails); one to a QP that does
// not allow FLUSHes is an invalid request, as rxe answers.
func TestFlushRefused(t *testing.T) { forEachMode(t, testFlushRefused) }

func testFlushRefused(t *testing.T, m mode) {
	flush := func(mr *verbs.MR, typ verbs.FlushType, level verbs.FlushLevel) *verbs.SendWR {
		return &verbs.SendWR{ID: 7, Opcode: verbs.WRFlush, RemoteAddr: mr.Addr(), RKey: mr.RKey(), FlushLength: 64,
			FlushType: typ, FlushLevel: level}
	}
	t.Run("region without flush", func(t *testing.T) {
		_, x, y := connectedPairMode(t, m, memlink.Config{}, flushOpts())
		rmr, _ := regMR(t, y.pd, 64, allAccess)
		refusal(t, x, flush(rmr, verbs.FlushGlobal, verbs.FlushRange), verbs.WCRemAccessErr)
	})
	t.Run("whole region without flush", func(t *testing.T) {
		_, x, y := connectedPairMode(t, m, memlink.Config{}, flushOpts())
		rmr, _ := regMR(t, y.pd, 64, allAccess)
		refusal(t, x, flush(rmr, verbs.FlushGlobal, verbs.FlushMR), verbs.WCRemAccessErr)
	})
	t.Run("persistent", func(t *testing.T) {
		o := flushOpts()
		o.access |= verbs.AccessFlushPersistent
		_, x, y := connectedPairMode(t, m, memlink.Config{}, o)
		_, err := y.pd.RegMR(make([]byte, 64), allAccess|verbs.AccessFlushPersistent)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument)
		rmr, _ := regMR(t, y.pd, 64, allAccess|verbs.AccessFlushGlobal)
		refusal(t, x, flush(rmr, verbs.FlushPersistent, verbs.FlushRange), verbs.WCRemAccessErr)
	})
	t.Run("QP without flush", func(t *testing.T) {
		_, x, y := connectedPairMode(t, m, memlink.Config{}, defaultOpts())
		rmr, _ := regMR(t, y.pd, 64, allAccess|verbs.AccessFlushGlobal)
		refusal(t, x, flush(rmr, verbs.FlushGlobal, verbs.FlushRange), verbs.WCRemInvReqErr)
	})
}

// TestAtomicWriteDuplicate loses the responses of an ATOMIC_WRITE and of
// the WRITE after it to the same word: the requester sends both again,
// and the responder answers the repeated ATOMIC_WRITE from its resource
// without executing it again, which would put its value back over the
// WRITE's.
func TestAtomicWriteDuplicate(t *testing.T) { forEachMode(t, testAtomicWriteDuplicate) }

func testAtomicWriteDuplicate(t *testing.T, m mode) {
	o := flushOpts()
	o.timeout = 8 // 1 ms
	p, x, y := connectedPairMode(t, m, memlink.Config{}, o)
	lmr, lbuf := regMR(t, x.pd, 8, allAccess)
	rmr, rbuf := regMR(t, y.pd, 8, allAccess)
	copy(lbuf, "WRITTEN!")
	lost := 0
	p.lb.SetTap(func([]byte) bool {
		lost++
		return lost > 2
	})
	wrs := []verbs.SendWR{
		{ID: 1, Opcode: verbs.WRAtomicWrite, Flags: verbs.SendSignaled, RemoteAddr: rmr.Addr(), RKey: rmr.RKey(),
			AtomicWrite: [8]byte{'A', 'T', 'O', 'M', 'I', 'C', '!', '!'}},
		{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{lmr.SGE(0, 8)},
			RemoteAddr: rmr.Addr(), RKey: rmr.RKey()},
	}
	n, err := x.qp.PostSendList(wrs)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	waitOK(t, x.scq, 1)
	waitOK(t, x.scq, 2)
	p.lb.SetTap(nil)
	require.Equal(t, "WRITTEN!", string(rbuf))
	require.NotZero(t, p.engB.Counters().RxDuplicate.Load(), "the requests came again")
}

// TestAtomicWriteFlushOnTheWire checks the packets against Linux rxe's
// (rxe_opcode.c, rxe_hdr.h, rxe_resp.c): ATOMIC_WRITE is opcode 0x1d with
// a RETH of length 8 and the 8 bytes as payload; FLUSH is 0x1c with the
// FETH (placement type in bits 3-0, selectivity level in bits 5-4) before
// a RETH; each is answered by an RDMA READ RESPONSE ONLY (0x10) of no
// bytes at the request's PSN, with an ACK AETH whose MSN counts it.
func TestAtomicWriteFlushOnTheWire(t *testing.T) {
	p, x, y := connectedPair(t, memlink.Config{}, flushOpts())
	rmr, _ := regMR(t, y.pd, 64, allAccess|verbs.AccessFlushGlobal)
	var reqs, resps []string
	summary := func(frame []byte) string {
		var fr roce.Frame
		require.NoError(t, roce.ParseFrame(frame, &fr))
		var pk header.Packet
		require.NoError(t, header.ParsePacket(fr.IB, &pk))
		s := fmt.Sprintf("%#x psn+%d ackreq %v", uint8(pk.BTH.Opcode()), pk.BTH.PSN().Diff(0x123456),
			pk.BTH.AckReq())
		if pk.FETH != nil {
			s += fmt.Sprintf(" feth %x", []byte(pk.FETH))
		}
		if pk.RETH != nil {
			s += fmt.Sprintf(" va+%d rkey ok %v len %d", pk.RETH.VA()-rmr.Addr(), pk.RETH.RKey() == rmr.RKey(),
				pk.RETH.DMALength())
		}
		if pk.AETH != nil {
			s = fmt.Sprintf("%#x psn+%d syn %#x msn %d", uint8(pk.BTH.Opcode()), pk.BTH.PSN().Diff(0x123456),
				uint8(pk.AETH.Syndrome()), pk.AETH.MSN())
		}
		return s + fmt.Sprintf(" payload %x pad %d", pk.Payload, pk.BTH.PadCount())
	}
	p.la.SetTap(func(f []byte) bool { reqs = append(reqs, summary(f)); return true })
	p.lb.SetTap(func(f []byte) bool { resps = append(resps, summary(f)); return true })
	wrs := []verbs.SendWR{
		{ID: 1, Opcode: verbs.WRAtomicWrite, RemoteAddr: rmr.Addr() + 8, RKey: rmr.RKey(),
			AtomicWrite: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{ID: 2, Opcode: verbs.WRFlush, RemoteAddr: rmr.Addr(), RKey: rmr.RKey(), FlushLength: 16,
			FlushType: verbs.FlushGlobal, FlushLevel: verbs.FlushRange},
		{ID: 3, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RemoteAddr: rmr.Addr(), RKey: rmr.RKey(),
			FlushType: verbs.FlushGlobal, FlushLevel: verbs.FlushMR},
	}
	_, err := x.qp.PostSendList(wrs)
	require.NoError(t, err)
	waitOK(t, x.scq, 3)
	p.la.SetTap(nil)
	p.lb.SetTap(nil)
	require.Equal(t, []string{
		"0x1d psn+0 ackreq true va+8 rkey ok true len 8 payload 0102030405060708 pad 0",
		"0x1c psn+1 ackreq true feth 00000001 va+0 rkey ok true len 16 payload  pad 0",
		"0x1c psn+2 ackreq true feth 00000011 va+0 rkey ok true len 0 payload  pad 0",
	}, reqs)
	require.Equal(t, []string{
		"0x10 psn+0 syn 0x1f msn 1 payload  pad 0",
		"0x10 psn+1 syn 0x1f msn 2 payload  pad 0",
		"0x10 psn+2 syn 0x1f msn 3 payload  pad 0",
	}, resps)
}
