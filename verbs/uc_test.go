package verbs_test

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// ucEndpoint creates a UC QP on dev with the CQs of an endpoint.
func ucEndpoint(t *testing.T, dev *verbs.Device) *endpoint {
	t.Helper()
	pd := dev.AllocPD()
	scq, err := dev.CreateCQ(256, nil)
	require.NoError(t, err)
	rcq, err := dev.CreateCQ(256, nil)
	require.NoError(t, err)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: scq, RecvCQ: rcq, Type: verbs.QPTypeUC,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64}})
	require.NoError(t, err)
	gid, err := dev.GID(0)
	require.NoError(t, err)
	return &endpoint{dev: dev, pd: pd, scq: scq, rcq: rcq, qp: qp, gid: gid, access: verbs.AccessRemoteWrite}
}

// connectUC brings two UC QPs to RTS, aimed at each other, with UC's
// attribute masks.
func connectUC(t *testing.T, x, y *endpoint, mtu verbs.MTU) {
	t.Helper()
	x.sqPSN, y.sqPSN = 0x123456, 0xfffffe // y's PSNs wrap
	for _, me := range []*endpoint{x, y} {
		require.NoError(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: me.access, Port: 1},
			verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPort|verbs.QPAttrPKeyIndex))
	}
	for _, s := range [][2]*endpoint{{x, y}, {y, x}} {
		me, peer := s[0], s[1]
		require.NoError(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: mtu, DestQPN: peer.qp.QPN(),
			RQPSN: peer.sqPSN, AV: verbs.AddressVector{DGID: peer.gid, HopLimit: 64}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN))
	}
	for _, me := range []*endpoint{x, y} {
		require.NoError(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: me.sqPSN}, verbs.QPAttrState|verbs.QPAttrSQPSN))
	}
}

func ucPair(t *testing.T) (*testPair, *endpoint, *endpoint) {
	p := newPair(t, memlink.Config{})
	x, y := ucEndpoint(t, p.a), ucEndpoint(t, p.b)
	connectUC(t, x, y, verbs.MTU1024)
	return p, x, y
}

// TestUCPingPong exchanges SENDs, WRITEs and WRITEs with immediate of one
// and several packets both ways between two devices.
func TestUCPingPong(t *testing.T) {
	_, x, y := ucPair(t)
	const size = 5000
	mrs := map[*endpoint]*verbs.MR{}
	bufs := map[*endpoint][]byte{}
	for _, e := range []*endpoint{x, y} {
		mrs[e], bufs[e] = regMR(t, e.pd, 2*size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	}
	for round, n := range []int{1, 1024, 1025, size} {
		for _, s := range [][2]*endpoint{{x, y}, {y, x}} {
			from, to := s[0], s[1]
			fromMR, fromBuf, toMR, toBuf := mrs[from], bufs[from], mrs[to], bufs[to]
			seed := byte(round*2 + 1)
			fill(fromBuf[:n], seed)
			id := uint64(round)
			require.NoError(t, to.qp.PostRecv(&verbs.RecvWR{ID: id, SGL: []verbs.SGE{toMR.SGE(size, size)}}))
			send := func(op verbs.WROpcode, off uint64) {
				require.NoError(t, from.qp.PostSend(&verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled, Imm: 77,
					SGL: []verbs.SGE{fromMR.SGE(0, n)}, RemoteAddr: toMR.Addr() + off, RKey: toMR.RKey()}))
				waitOK(t, from.scq, id)
			}
			send(verbs.WRSend, 0)
			wc := waitOK(t, to.rcq, id)
			assert.Equal(t, uint32(n), wc.ByteLen)
			assert.Equal(t, verbs.WCRecv, wc.Opcode)
			assert.Equal(t, fromBuf[:n], toBuf[size:size+n])

			send(verbs.WRRDMAWrite, 0)
			// UC has no RNR: the receive must be there first.
			require.NoError(t, to.qp.PostRecv(&verbs.RecvWR{ID: id + 100}))
			send(verbs.WRRDMAWriteWithImm, 0)
			wc = waitOK(t, to.rcq, id+100)
			assert.Equal(t, verbs.WCRecvRDMAWithImm, wc.Opcode)
			assert.Equal(t, uint32(77), wc.Imm)
			assert.Equal(t, fromBuf[:n], toBuf[:n])
		}
	}
	for _, e := range []*endpoint{x, y} {
		// Per direction and round: SEND, WRITE and WRITE_WITH_IMM of
		// 1, 1, 2 and 5 packets; nothing else, no ACKs.
		assert.Equal(t, uint64(3*(1+1+2+5)), e.dev.Counters().TxPackets.Load())
		assert.Equal(t, uint64(3*(1+1+2+5)), e.dev.Counters().RxPackets.Load())
	}
}

// TestUCLoss drops packets on the link: the messages they belonged to are
// missing, the others arrive whole and in order, and nothing hangs or
// fails.
func TestUCLoss(t *testing.T) {
	p, x, y := ucPair(t)
	const size, msgs = 3000, 40 // three packets a message
	xmr, xbuf := regMR(t, x.pd, size, 0)
	ymr, ybuf := regMR(t, y.pd, msgs*size, verbs.AccessLocalWrite)
	var n atomic.Int32
	p.la.SetTap(func([]byte) bool {
		k := n.Add(1)
		return k%7 != 3 // one packet in seven lost
	})
	for i := range msgs {
		require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{ymr.SGE(i*size, size)}}))
	}
	lost := map[int]bool{}
	for i := range msgs {
		for j := range 3 {
			if (3*i+j+1)%7 == 3 {
				lost[i] = true
			}
		}
		fill(xbuf, byte(i))
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{xmr.SGE(0, size)}}))
		waitOK(t, x.scq, uint64(i))
	}
	require.NotEmpty(t, lost)
	// The receives fill in order: one for each message that arrived.
	next := 0
	for i := range msgs {
		if lost[i] {
			continue
		}
		wc := waitOK(t, y.rcq, uint64(next))
		require.Equal(t, uint32(size), wc.ByteLen)
		want := make([]byte, size)
		fill(want, byte(i))
		require.Equal(t, want, ybuf[next*size:(next+1)*size], "message %d in receive %d", i, next)
		next++
	}
	noWC(t, y.rcq)
	assert.Equal(t, uint64(len(lost)), y.dev.Counters().RxUCPSNGap.Load(), "each lost message counted once")
	assert.Zero(t, x.dev.Counters().RxPackets.Load(), "UC sends no ACKs")
	assert.Equal(t, verbs.QPSRTS, x.qp.State())
	assert.Equal(t, verbs.QPSRTS, y.qp.State())
}

// TestUCEnginesSpread: UC QPs connect like RC ones, each placed on the
// engine of its connection on both ends, so that nothing is forwarded.
func TestUCEnginesSpread(t *testing.T) {
	p := newMultiPair(t, memlink.Config{}, 2, 2)
	perEngine := [2]int{}
	for i := range 16 {
		x, y := ucEndpoint(t, p.a), ucEndpoint(t, p.b)
		connectUC(t, x, y, verbs.MTU1024)
		perEngine[x.qp.EngineIndex()]++
		xmr, xbuf := regMR(t, x.pd, 3000, 0)
		ymr, ybuf := regMR(t, y.pd, 3000, verbs.AccessLocalWrite)
		fill(xbuf, byte(i))
		require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{ymr.SGE(0, 3000)}}))
		require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{xmr.SGE(0, 3000)}}))
		waitOK(t, x.scq, 2)
		waitOK(t, y.rcq, 1)
		require.Equal(t, xbuf, ybuf)
	}
	require.NotZero(t, perEngine[0])
	require.NotZero(t, perEngine[1])
	for _, d := range []*verbs.Device{p.a, p.b} {
		require.Zero(t, d.Counters().Forwarded.Load(), "a packet arrived at another engine than its QP's")
	}
}
