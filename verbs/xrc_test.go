package verbs_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// xrcTarget is one side's XRC receive half: a domain, an SRQ of it, its
// CQ and PD, and a receive QP.
type xrcTarget struct {
	xrcd *verbs.XRCD
	pd   *verbs.PD
	cq   *verbs.CQ
	srq  *verbs.SRQ
	qp   *verbs.QP
	gid  verbs.GID
}

func newXRCTarget(t *testing.T, dev *verbs.Device, f *os.File) *xrcTarget {
	t.Helper()
	x, err := dev.OpenXRCD(f, os.O_CREATE)
	require.NoError(t, err)
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(64, nil)
	require.NoError(t, err)
	srq, err := pd.NewXRCSRQ(x, cq, 16, 2)
	require.NoError(t, err)
	qp, err := x.CreateRecvQP()
	require.NoError(t, err)
	require.Equal(t, verbs.QPTypeXRCRecv, qp.Type())
	gid, err := dev.GID(0)
	require.NoError(t, err)
	return &xrcTarget{xrcd: x, pd: pd, cq: cq, srq: srq, qp: qp, gid: gid}
}

// newXRCInitiator makes an XRC send QP: a send CQ and no receive queue.
func newXRCInitiator(t *testing.T, dev *verbs.Device) *endpoint {
	t.Helper()
	pd := dev.AllocPD()
	scq, err := dev.CreateCQ(64, nil)
	require.NoError(t, err)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: scq, Type: verbs.QPTypeXRCSend,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxSendSGE: 2, MaxInlineData: 64}})
	require.NoError(t, err)
	gid, err := dev.GID(0)
	require.NoError(t, err)
	return &endpoint{dev: dev, pd: pd, scq: scq, qp: qp, gid: gid}
}

// connectXRC connects the initiator to the target's receive QP with the
// attributes rdma-core's tests give each type (pyverbs' masks).
func connectXRC(t *testing.T, s *endpoint, r *verbs.QP, rgid verbs.GID) {
	t.Helper()
	for _, q := range []*verbs.QP{s.qp, r} {
		require.NoError(t, q.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: allAccess},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags))
	}
	rtr := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	require.NoError(t, r.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: s.qp.QPN(),
		RQPSN: 0x100, MaxDestRdAtomic: 4, MinRNRTimer: 1, AV: verbs.AddressVector{DGID: s.gid, HopLimit: 64}},
		rtr|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
	require.NoError(t, r.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x200, Timeout: 14},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout))
	require.NoError(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: r.QPN(),
		RQPSN: 0x200, AV: verbs.AddressVector{DGID: rgid, HopLimit: 64}}, rtr))
	require.NoError(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x100, Timeout: 14, RetryCnt: 7,
		RNRRetry: 7, MaxRdAtomic: 4}, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|
		verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic))
}

// TestXRC sends, writes, reads and adds over an XRC send QP into the
// other device's XRC SRQ and SRQ PD's memory: SENDs of more than one MTU
// complete in the SRQ's CQ, naming the receive QP.
func TestXRC(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
		tg := newXRCTarget(t, p.b, nil)
		in := newXRCInitiator(t, p.a)
		connectXRC(t, in, tg.qp, tg.gid)
		srqn, err := tg.srq.Num()
		require.NoError(t, err)
		require.NotZero(t, srqn)

		rmr, rbuf := regMR(t, tg.pd, 8192, allAccess)
		smr, sbuf := regMR(t, in.pd, 8192, verbs.AccessLocalWrite)
		fill(sbuf[:3000], 5)
		require.NoError(t, tg.srq.PostRecv(&verbs.RecvWR{ID: 9, SGL: []verbs.SGE{rmr.SGE(0, 4096)}}))
		require.NoError(t, in.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled,
			Imm: 0xfeed, SGL: []verbs.SGE{smr.SGE(0, 3000)}, RemoteSRQN: srqn}))
		waitOK(t, in.scq, 1)
		wc := waitOK(t, tg.cq, 9)
		require.Equal(t, uint32(3000), wc.ByteLen)
		require.Equal(t, tg.qp.QPN(), wc.QPN, "the receive QP's number, as mlx5 reports it")
		require.Equal(t, uint32(0xfeed), wc.Imm)
		require.Equal(t, sbuf[:3000], rbuf[:3000])

		// RDMA WRITE and READ against the SRQ's PD.
		fill(sbuf[:2048], 9)
		require.NoError(t, in.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{smr.SGE(0, 2048)}, RemoteAddr: rmr.Addr() + 4096, RKey: rmr.RKey(), RemoteSRQN: srqn}))
		waitOK(t, in.scq, 2)
		require.Equal(t, sbuf[:2048], rbuf[4096:4096+2048])
		require.NoError(t, in.qp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{smr.SGE(4096, 3000)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey(), RemoteSRQN: srqn}))
		waitOK(t, in.scq, 3)
		require.Equal(t, rbuf[:3000], sbuf[4096:4096+3000])

		binary.NativeEndian.PutUint64(rbuf[8000:], 40)
		require.NoError(t, in.qp.PostSend(&verbs.SendWR{ID: 4, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{smr.SGE(8000, 8)}, RemoteAddr: rmr.Addr() + 8000, RKey: rmr.RKey(), CompareAdd: 2,
			RemoteSRQN: srqn}))
		waitOK(t, in.scq, 4)
		require.Equal(t, uint64(40), binary.NativeEndian.Uint64(sbuf[8000:]))
		require.Equal(t, uint64(42), binary.NativeEndian.Uint64(rbuf[8000:]))
		noWC(t, tg.cq) // RDMA and atomics take no receive

		// An SRQ of one receive takes a receive again once the last one's
		// completion came (through a daemon: its ring's slot is given back).
		one, err := tg.pd.NewXRCSRQ(tg.xrcd, tg.cq, 1, 1)
		require.NoError(t, err)
		oneN, err := one.Num()
		require.NoError(t, err)
		require.NotEqual(t, srqn, oneN)
		for i := range 3 {
			id := uint64(20 + i)
			require.NoError(t, one.PostRecv(&verbs.RecvWR{ID: id, SGL: []verbs.SGE{rmr.SGE(0, 64)}}), "receive %d", i)
			require.NoError(t, in.qp.PostSend(&verbs.SendWR{ID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{smr.SGE(0, 64)}, RemoteSRQN: oneN}))
			waitOK(t, in.scq, id)
			waitOK(t, tg.cq, id)
		}
		require.NoError(t, one.Destroy())

		// Neither XRC QP has a receive queue; the receive QP no send queue.
		require.ErrorIs(t, in.qp.PostRecv(&verbs.RecvWR{ID: 5}), verbs.ErrInvalidArgument)
		require.ErrorIs(t, tg.qp.PostRecv(&verbs.RecvWR{ID: 5}), verbs.ErrInvalidArgument)
		require.ErrorIs(t, tg.qp.PostSend(&verbs.SendWR{ID: 5, Opcode: verbs.WRSend}), verbs.ErrInvalidArgument)
		require.ErrorIs(t, tg.xrcd.Close(), verbs.ErrBusy, "its SRQ and QP remain")
		require.NoError(t, tg.qp.Destroy())
		require.NoError(t, tg.srq.Destroy())
		require.NoError(t, tg.xrcd.Close())
	})
}

// TestXRCOtherDomainRefused sends to an SRQ of another XRC domain than the
// receive QP's: the responder NAKs it (invalid request), the send
// completes with REM_INV_REQ_ERR, and the SRQ's receive stays posted.
func TestXRCOtherDomainRefused(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
		tg := newXRCTarget(t, p.b, nil)
		other := newXRCTarget(t, p.b, nil) // a second private domain
		in := newXRCInitiator(t, p.a)
		connectXRC(t, in, tg.qp, tg.gid)
		srqn, err := other.srq.Num()
		require.NoError(t, err)
		rmr, _ := regMR(t, other.pd, 64, allAccess)
		smr, _ := regMR(t, in.pd, 64, verbs.AccessLocalWrite)
		require.NoError(t, other.srq.PostRecv(&verbs.RecvWR{ID: 9, SGL: []verbs.SGE{rmr.SGE(0, 64)}}))
		require.NoError(t, in.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{smr.SGE(0, 64)}, RemoteSRQN: srqn}))
		wc := waitWC(t, in.scq)
		require.Equal(t, verbs.WCRemInvReqErr, wc.Status)
		noWC(t, other.cq)
		noWC(t, tg.cq)
		if m == inProcess {
			require.Equal(t, 1, other.srq.Len(), "the receive was not taken")
			require.Equal(t, uint64(1), p.engB.Counters().RxXRCDomainErr.Load())
		}
	})
}

// TestXRCDShared opens domains as ibv_open_xrcd does: on one file they are
// one domain, whose receive QPs any handle opens; a private domain, or
// another file's, does not know them; O_CREAT and O_EXCL rule creation.
func TestXRCDShared(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
		dir := t.TempDir()
		open := func(name string) *os.File {
			f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDONLY|os.O_CREATE, 0o400)
			require.NoError(t, err)
			t.Cleanup(func() { f.Close() })
			return f
		}
		f1, f2 := open("a"), open("b")
		_, err := p.b.OpenXRCD(f1, 0)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "no domain on the file yet, and no O_CREAT")
		tg := newXRCTarget(t, p.b, f1)
		_, err = p.b.OpenXRCD(f1, os.O_CREATE|os.O_EXCL)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "O_EXCL on a file with a domain")

		same, err := p.b.OpenXRCD(open("a"), 0) // another descriptor of the same file
		require.NoError(t, err)
		qp2, err := same.OpenQP(tg.qp.QPN())
		require.NoError(t, err)
		require.Equal(t, tg.qp.QPN(), qp2.QPN())
		private, err := p.b.OpenXRCD(nil, 0)
		require.NoError(t, err)
		_, err = private.OpenQP(tg.qp.QPN())
		require.ErrorIs(t, err, verbs.ErrInvalidArgument)
		otherFile, err := p.b.OpenXRCD(f2, os.O_CREATE)
		require.NoError(t, err)
		_, err = otherFile.OpenQP(tg.qp.QPN())
		require.ErrorIs(t, err, verbs.ErrInvalidArgument)

		// The QP lives while a handle does: traffic through the one
		// opened after the creator's handle went.
		in := newXRCInitiator(t, p.a)
		require.NoError(t, tg.qp.Destroy())
		connectXRC(t, in, qp2, tg.gid)
		srqn, err := tg.srq.Num()
		require.NoError(t, err)
		rmr, rbuf := regMR(t, tg.pd, 64, allAccess)
		smr, sbuf := regMR(t, in.pd, 64, verbs.AccessLocalWrite)
		fill(sbuf, 3)
		require.NoError(t, tg.srq.PostRecv(&verbs.RecvWR{ID: 9, SGL: []verbs.SGE{rmr.SGE(0, 64)}}))
		require.NoError(t, in.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{smr.SGE(0, 64)}, RemoteSRQN: srqn}))
		waitOK(t, in.scq, 1)
		waitOK(t, tg.cq, 9)
		require.Equal(t, sbuf, rbuf)
		require.NoError(t, qp2.Destroy())
		require.NoError(t, same.Close())
		require.NoError(t, private.Close())
		require.NoError(t, otherFile.Close())
	})
}

// TestXRCDestroyedSRQRefused sends to an XRC SRQ after its destruction:
// the number names nothing any more, and the send is refused as one to
// another domain's SRQ is.
func TestXRCDestroyedSRQRefused(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
		tg := newXRCTarget(t, p.b, nil)
		in := newXRCInitiator(t, p.a)
		connectXRC(t, in, tg.qp, tg.gid)
		srqn, err := tg.srq.Num()
		require.NoError(t, err)
		smr, _ := regMR(t, in.pd, 64, verbs.AccessLocalWrite)
		send := func(id uint64) {
			require.NoError(t, in.qp.PostSend(&verbs.SendWR{ID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{smr.SGE(0, 64)}, RemoteSRQN: srqn}))
		}
		rmr, _ := regMR(t, tg.pd, 64, allAccess)
		require.NoError(t, tg.srq.PostRecv(&verbs.RecvWR{ID: 9, SGL: []verbs.SGE{rmr.SGE(0, 64)}}))
		send(1)
		waitOK(t, in.scq, 1)
		waitOK(t, tg.cq, 9)
		require.NoError(t, tg.srq.Destroy())
		require.ErrorIs(t, tg.srq.Destroy(), verbs.ErrInvalidArgument, "destroyed already")
		send(2)
		wc := waitWC(t, in.scq)
		require.Equal(t, verbs.WCRemInvReqErr, wc.Status)
		noWC(t, tg.cq)
	})
}

// TestXRCEngines runs four XRC connections between devices of two
// engines each, into one SRQ per side: the targets and their SRQ keep to
// the first engine (one consumer of the SRQ's ring) wherever their
// packets arrive; the initiators are placed as RC QPs are.
func TestXRCEngines(t *testing.T) {
	la, lb := memlink.PairQueues(memlink.Config{}, 2)
	a, b := openPair(t, la, lb, verbs.Config{Engines: 2}, verbs.Config{Engines: 2})
	x, err := b.OpenXRCD(nil, 0)
	require.NoError(t, err)
	pd := b.AllocPD()
	cq, err := b.CreateCQ(256, nil)
	require.NoError(t, err)
	srq, err := pd.NewXRCSRQ(x, cq, 64, 1)
	require.NoError(t, err)
	srqn, err := srq.Num()
	require.NoError(t, err)
	gid, err := b.GID(0)
	require.NoError(t, err)
	rmr, _ := regMR(t, pd, 64*64, allAccess)
	var ins []*endpoint
	var tgts []*verbs.QP
	for range 4 {
		tq, err := x.CreateRecvQP()
		require.NoError(t, err)
		in := newXRCInitiator(t, a)
		connectXRC(t, in, tq, gid)
		ins, tgts = append(ins, in), append(tgts, tq)
	}
	const rounds = 8
	for i := range rounds * len(ins) {
		require.NoError(t, srq.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rmr.SGE(i*64, 64)}}))
	}
	for i := range rounds {
		for j, in := range ins {
			smr, _ := regMR(t, in.pd, 64, verbs.AccessLocalWrite)
			require.NoError(t, in.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{smr.SGE(0, 64)}, RemoteSRQN: srqn}), "QP %d round %d", j, i)
		}
	}
	for _, in := range ins {
		for i := range rounds {
			waitOK(t, in.scq, uint64(i))
		}
	}
	byQP := map[uint32]int{}
	for range rounds * len(ins) {
		wc := waitWC(t, cq)
		require.Equal(t, verbs.WCSuccess, wc.Status)
		byQP[wc.QPN]++
	}
	for _, tq := range tgts {
		require.Equal(t, rounds, byQP[tq.QPN()], "receives through QP %d", tq.QPN())
		require.Equal(t, 0, tq.EngineIndex(), "an XRC target lives on the first engine")
	}
}
