package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// TestMcastEngines has a group's QPs on both engines of the receiving
// device: one on engine 0, where the datagrams arrive, and two on
// engine 1 (on an SRQ, which keeps its QPs on one engine). Each QP gets
// every datagram once, and engine 0 hands each datagram to engine 1 once,
// not once per QP there.
func TestMcastEngines(t *testing.T) {
	p := newMultiPair(t, memlink.Config{}, 2, 2)
	o := defaultOpts()
	pd, srq := srqOnEngine1(t, p, o)
	cq, err := p.b.CreateCQ(64, nil)
	require.NoError(t, err)
	var far []*verbs.QP
	for range 2 {
		qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq, Type: verbs.QPTypeUD, Cap: verbs.QPCap{MaxSendWR: 4}})
		require.NoError(t, err)
		require.Equal(t, 1, qp.EngineIndex())
		require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, QKey: udQKey},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey))
		require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState))
		require.NoError(t, qp.AttachMcast(mcastGroup, 0))
		far = append(far, qp)
	}
	mr, _ := regMR(t, pd, 16*128, allAccess)
	for i := range 16 {
		require.NoError(t, srq.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{mr.SGE(i*128, 128)}}))
	}
	near := newUDEndpoint(t, p.b, 8, 128, udQKey)
	require.Equal(t, 0, near.qp.EngineIndex())
	require.NoError(t, near.qp.AttachMcast(mcastGroup, 0))
	near.postRecvs(t, 0, 8)

	a := newUDEndpoint(t, p.a, 1, 64, udQKey)
	require.Equal(t, 0, a.qp.EngineIndex())
	ah, err := a.pd.CreateAH(&verbs.AddressVector{DGID: mcastGroup, HopLimit: 1})
	require.NoError(t, err)
	forwarded := p.b.Counters().Forwarded.Load()
	const n = 4
	for i := range n {
		a.send(t, ah, ibv.MulticastQPN, udQKey, uint64(i), 32, verbs.WRSend, 0)
		waitOK(t, a.scq, uint64(i))
	}
	for i := range n {
		wc := waitOK(t, near.rcq, uint64(i))
		assert.Equal(t, a.qp.QPN(), wc.SrcQP)
	}
	got := map[uint32]int{}
	for range 2 * n {
		wc := waitWC(t, cq)
		require.Equal(t, verbs.WCSuccess, wc.Status)
		got[wc.QPN]++
	}
	assert.Equal(t, map[uint32]int{far[0].QPN(): n, far[1].QPN(): n}, got, "each QP on engine 1 got each datagram once")
	noWC(t, cq)
	assert.Equal(t, uint64(n), p.b.Counters().Forwarded.Load()-forwarded, "one copy a datagram to engine 1")
}
