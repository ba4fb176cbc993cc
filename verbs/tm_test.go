package verbs_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// tmWorld is a sender (an ordinary RC QP) and a receiver whose QP is on a
// tag matching SRQ, whose CQ takes every completion of the receive side.
type tmWorld struct {
	p      *testPair
	tx, rx *endpoint
	srq    *verbs.SRQ
	tcq    *verbs.CQ
	txMR   *verbs.MR
	txBuf  []byte
	rxMR   *verbs.MR
	rxBuf  []byte
}

func newTMWorld(t *testing.T, m mode) *tmWorld {
	t.Helper()
	o := defaultOpts()
	p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
	require.Equal(t, uint32(verbs.TMCapRC), p.b.Query().TM.Flags&verbs.TMCapRC)
	pd := p.b.AllocPD()
	tcq, err := p.b.CreateCQ(256, nil)
	require.NoError(t, err)
	srq, err := pd.NewTMSRQ(verbs.TMSRQInit{MaxWR: 64, MaxSGE: 1, CQ: tcq, MaxNumTags: 4, MaxOps: 8})
	require.NoError(t, err)
	tx := newEndpoint(t, p.a, nil, o, nil)
	o.sendWR = 0 // the TM SRQ owns the send queue, as pyverbs' test asks
	rx := newEndpoint(t, p.b, pd, o, srq)
	o.sendWR = 256
	connect(t, tx, rx, o)
	w := &tmWorld{p: p, tx: tx, rx: rx, srq: srq, tcq: tcq}
	w.txMR, w.txBuf = regMR(t, tx.pd, 8192, allAccess|verbs.AccessLocalWrite)
	w.rxMR, w.rxBuf = regMR(t, pd, 8192, verbs.AccessLocalWrite)
	return w
}

// tmh writes a TM header at b.
func tmh(b []byte, op header.TMOpcode, tag uint64, ctx uint32) {
	h := header.TMH(b[:header.TMHLen])
	clear(h)
	h.SetOpcode(op)
	h.SetAppCtx(ctx)
	h.SetTag(tag)
}

// send sends n bytes of the sender's buffer from off and waits for its
// completion.
func (w *tmWorld) send(t *testing.T, off, n int) {
	t.Helper()
	require.NoError(t, w.tx.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{w.txMR.SGE(off, n)}}))
	waitOK(t, w.tx.scq, 1)
}

// op posts a list operation and returns its handle and completion.
func (w *tmWorld) op(t *testing.T, wr verbs.OpsWR) (uint32, verbs.WC) {
	t.Helper()
	wr.Flags |= verbs.OpsSignaled
	h, err := w.srq.PostOps(&wr)
	require.NoError(t, err)
	wc := waitWC(t, w.tcq)
	require.Equal(t, wr.ID, wc.WRID)
	return h, wc
}

func (w *tmWorld) add(t *testing.T, tag, id uint64, off, n int, unexp uint32) (uint32, verbs.WC) {
	t.Helper()
	return w.op(t, verbs.OpsWR{ID: 1000 + id, Opcode: verbs.OpsTagAdd, UnexpectedCnt: unexp, RecvID: id,
		SGL: []verbs.SGE{w.rxMR.SGE(off, n)}, Tag: tag, Mask: 0xffff})
}

// TestTMEager matches eager messages against tagged buffers, and sends
// the unexpected, untagged and malformed ones to ordinary receives, with
// the list operations' completions and the phases of SYNC.
func TestTMEager(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		w := newTMWorld(t, m)
		for i := range 8 {
			require.NoError(t, w.srq.PostRecv(&verbs.RecvWR{ID: uint64(100 + i), SGL: []verbs.SGE{w.rxMR.SGE(4096+i*256, 256)}}))
		}
		fill(w.txBuf, 3)

		h5, wc := w.add(t, 5, 55, 0, 1024, 0)
		require.Equal(t, verbs.WCTMAdd, wc.Opcode)
		require.Zero(t, wc.Flags)
		tmh(w.txBuf, header.TMEager, 0x10005, 0xc0ffee) // the mask keeps 0x0005
		w.send(t, 0, 200)
		wc = waitOK(t, w.tcq, 55)
		require.Equal(t, verbs.WCTMRecv, wc.Opcode)
		require.Equal(t, verbs.WCTMMatch|verbs.WCTMDataValid, wc.Flags)
		require.EqualValues(t, 0x10005, wc.TMTag)
		require.EqualValues(t, 0xc0ffee, wc.TMPriv)
		require.EqualValues(t, 184, wc.ByteLen)
		require.Equal(t, w.txBuf[16:200], w.rxBuf[:184], "the payload after the TMH")

		// A message of three packets (MTU 1024): the header is skipped in
		// the first only.
		w.add(t, 8, 88, 0, 4096, 0)
		fill(w.txBuf[16:], 5)
		tmh(w.txBuf, header.TMEager, 8, 0)
		w.send(t, 0, 3000)
		wc = waitOK(t, w.tcq, 88)
		require.Equal(t, verbs.WCTMMatch|verbs.WCTMDataValid, wc.Flags)
		require.EqualValues(t, 2984, wc.ByteLen)
		require.Equal(t, w.txBuf[16:3000], w.rxBuf[:2984])
		tmh(w.txBuf, header.TMEager, 0x10005, 0xc0ffee)

		// The entry was consumed: a DEL of it fails, and the same tag is now
		// unexpected, delivered whole to an ordinary receive.
		_, wc = w.op(t, verbs.OpsWR{ID: 7, Opcode: verbs.OpsTagDel, Handle: h5})
		require.Equal(t, verbs.WCTMErr, wc.Status)
		w.send(t, 0, 100)
		wc = waitOK(t, w.tcq, 100)
		require.Equal(t, verbs.WCTMRecv, wc.Opcode)
		require.Zero(t, wc.Flags)
		require.Equal(t, w.txBuf[:100], w.rxBuf[4096:4196])

		// An ADD with the old count is out of phase: no match until SYNC.
		_, wc = w.add(t, 6, 66, 1024, 1024, 0)
		require.Equal(t, verbs.WCTMSyncReq, wc.Flags)
		tmh(w.txBuf, header.TMEager, 6, 0)
		w.send(t, 0, 64)
		wc = waitOK(t, w.tcq, 101)
		require.Equal(t, verbs.WCTMRecv, wc.Opcode, "unexpected while out of phase")
		_, wc = w.op(t, verbs.OpsWR{ID: 8, Opcode: verbs.OpsTagSync, UnexpectedCnt: 2})
		require.Equal(t, verbs.WCTMSync, wc.Opcode)
		require.Zero(t, wc.Flags)
		w.send(t, 0, 64)
		wc = waitOK(t, w.tcq, 66)
		require.Equal(t, verbs.WCTMMatch|verbs.WCTMDataValid, wc.Flags)

		// DEL of a live entry: its tag is unexpected afterwards.
		h7, _ := w.add(t, 7, 77, 2048, 64, 3)
		_, wc = w.op(t, verbs.OpsWR{ID: 9, Opcode: verbs.OpsTagDel, Handle: h7, UnexpectedCnt: 3})
		require.Equal(t, verbs.WCSuccess, wc.Status)
		require.Equal(t, verbs.WCTMDel, wc.Opcode)
		tmh(w.txBuf, header.TMEager, 7, 0)
		w.send(t, 0, 32)
		wc = waitOK(t, w.tcq, 102)
		require.Equal(t, verbs.WCTMRecv, wc.Opcode)

		// NO_TAG: whole, as TM_NO_TAG, not counted.
		tmh(w.txBuf, header.TMNoTag, 5, 0)
		w.send(t, 0, 48)
		wc = waitOK(t, w.tcq, 103)
		require.Equal(t, verbs.WCTMNoTag, wc.Opcode)
		require.Equal(t, w.txBuf[:48], w.rxBuf[4096+3*256:4096+3*256+48])

		// Not TM headers: too short, an unknown opcode, a rendezvous
		// request cut inside its RVH. They arrive whole, as plain receives.
		w.send(t, 0, 15)
		wc = waitOK(t, w.tcq, 104)
		require.Equal(t, verbs.WCRecv, wc.Opcode)
		require.EqualValues(t, 15, wc.ByteLen)
		tmh(w.txBuf, 0xee, 5, 0)
		w.send(t, 0, 40)
		require.Equal(t, verbs.WCRecv, waitOK(t, w.tcq, 105).Opcode)
		tmh(w.txBuf, header.TMRndv, 5, 0)
		w.send(t, 0, 31)
		require.Equal(t, verbs.WCRecv, waitOK(t, w.tcq, 106).Opcode)

		// A bad DEL handle and an unknown opcode are refused at the post.
		_, err := w.srq.PostOps(&verbs.OpsWR{Opcode: verbs.OpsTagDel, Handle: 0})
		require.ErrorIs(t, err, verbs.ErrInvalidArgument)
		_, err = w.srq.PostOps(&verbs.OpsWR{Opcode: 9})
		require.ErrorIs(t, err, verbs.ErrInvalidArgument)
		noWC(t, w.rx.rcq)
	})
}

// TestTMRndv: a matched rendezvous request makes the receiver READ the
// sender's buffer into the tagged buffer and send the FIN, with the
// receiver's two completions (MATCH, then DATA_VALID) and the sender's
// receive of the FIN; a buffer too small gets the headers and
// RNDV_INCOMPLETE.
func TestTMRndv(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		w := newTMWorld(t, m)
		// The FIN lands in the very buffer the READ reads, as in pyverbs'
		// test: only a FIN sent after the READ completed leaves the data
		// read as it was.
		require.NoError(t, w.tx.qp.PostRecv(&verbs.RecvWR{ID: 42, SGL: []verbs.SGE{w.txMR.SGE(4096, 64)}}))
		fill(w.txBuf[4096:], 9)
		want := append([]byte(nil), w.txBuf[4096:7096]...)
		req := w.txBuf[:64]
		tmh(req, header.TMRndv, 9, 0x77)
		rvh := header.RVH(req[16:32])
		rvh.SetVA(w.txMR.Addr() + 4096)
		rvh.SetRKey(w.txMR.RKey())
		rvh.SetLength(3000)

		w.add(t, 9, 99, 0, 4096, 0)
		w.send(t, 0, 64)
		wc := waitOK(t, w.tcq, 99)
		require.Equal(t, verbs.WCTMRecv, wc.Opcode)
		require.Equal(t, verbs.WCTMMatch, wc.Flags)
		require.EqualValues(t, 9, wc.TMTag)
		wc = waitOK(t, w.tcq, 99)
		require.Equal(t, verbs.WCTMRecv, wc.Opcode)
		require.Equal(t, verbs.WCTMDataValid, wc.Flags)
		require.EqualValues(t, 3000, wc.ByteLen)
		require.Zero(t, wc.TMTag, "DATA_VALID has no TM header, as ConnectX's")
		require.True(t, bytes.Equal(want, w.rxBuf[:3000]), "the READ's data")

		wc = waitOK(t, w.tx.rcq, 42)
		finBuf := w.txBuf[4096:]
		require.Equal(t, verbs.WCRecv, wc.Opcode)
		require.EqualValues(t, 32, wc.ByteLen)
		require.Equal(t, byte(header.TMFin), finBuf[0])
		require.Equal(t, uint64(9), binary.BigEndian.Uint64(finBuf[8:]))
		require.Equal(t, []byte(req[16:32]), finBuf[16:32], "the FIN carries the RVH")
		noWC(t, w.rx.scq) // the READ and FIN complete nothing of the QP's own

		// Too small a buffer: the headers land there, and the program
		// finishes the rendezvous.
		w.add(t, 10, 100, 5000, 1000, 0)
		tmh(req, header.TMRndv, 10, 0)
		w.send(t, 0, 64)
		wc = waitWC(t, w.tcq)
		require.Equal(t, verbs.WCTMRndvIncomplete, wc.Status)
		require.EqualValues(t, 100, wc.WRID)
		require.Equal(t, req[:32], w.rxBuf[5000:5032])
		noWC(t, w.tx.rcq)

		// A request naming no region of the sender's: the READ is NAKed,
		// the buffer completes with its error, and the QP is in error.
		w.add(t, 11, 111, 0, 4096, 0)
		tmh(req, header.TMRndv, 11, 0)
		rvh.SetRKey(w.txMR.RKey() + 0x100)
		w.send(t, 0, 64)
		require.Equal(t, verbs.WCTMMatch, waitOK(t, w.tcq, 111).Flags)
		wc = waitWC(t, w.tcq)
		require.EqualValues(t, 111, wc.WRID)
		require.Equal(t, verbs.WCTMRecv, wc.Opcode)
		require.Equal(t, verbs.WCRemAccessErr, wc.Status)
		noWC(t, w.rx.scq)
	})
}

// TestTMGarbage sends SENDs of random bytes and lengths, a TM opcode in
// front of half of them, to a TM SRQ's QP: each lands whole in an
// ordinary receive, as RECV, TM_RECV (unexpected) or TM_NO_TAG, and the
// QP lives on.
func TestTMGarbage(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		w := newTMWorld(t, m)
		w.add(t, 0x5a5a, 1, 0, 64, 0) // a tag random ones miss (mask 0xffff: 1 in 65536)
		src := rand.NewChaCha8([32]byte{1})
		rng := rand.New(src)
		unexpected := 0
		for i := range 64 {
			n := rng.IntN(200)
			src.Read(w.txBuf[:n])
			if n > 0 && i%2 == 0 {
				w.txBuf[0] = byte(rng.IntN(5))
			}
			if n >= 16 {
				w.txBuf[14], w.txBuf[15] = 0, 0 // never the listed tag
			}
			require.NoError(t, w.srq.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{w.rxMR.SGE(4096, 256)}}))
			w.send(t, 0, n)
			wc := waitOK(t, w.tcq, uint64(i))
			require.EqualValues(t, n, wc.ByteLen)
			require.Equal(t, w.txBuf[:n], w.rxBuf[4096:4096+n])
			h, isTM := header.ParseTMH(w.txBuf[:n])
			switch {
			case !isTM || h.Opcode() > header.TMEager || h.Opcode() == header.TMFin:
				require.Equal(t, verbs.WCRecv, wc.Opcode, "%d bytes % x", n, w.txBuf[:min(n, 4)])
			case h.Opcode() == header.TMNoTag:
				require.Equal(t, verbs.WCTMNoTag, wc.Opcode)
			default:
				require.Equal(t, verbs.WCTMRecv, wc.Opcode)
				require.Zero(t, wc.Flags)
				unexpected++
			}
		}
		require.NotZero(t, unexpected, "some tagged messages")
		// The listed tag still matches, in phase with the unexpected count.
		w.op(t, verbs.OpsWR{ID: 5, Opcode: verbs.OpsTagSync, UnexpectedCnt: uint32(unexpected)})
		tmh(w.txBuf, header.TMEager, 0x5a5a, 0)
		w.send(t, 0, 40)
		require.Equal(t, verbs.WCTMMatch|verbs.WCTMDataValid, waitOK(t, w.tcq, 1).Flags)
	})
}
