package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

func TestCompletionTimestamps(t *testing.T) { forEachMode(t, testCompletionTimestamps) }

// A CQ made with timestamps stamps each completion when the engine makes
// it, not when it is polled: y's receive completion is made before y ACKs
// the SEND, so before x's send completion, which x waits for; y polls it
// only after the clock was read after that, and its stamp is older.
func testCompletionTimestamps(t *testing.T, m mode) {
	p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
	for _, d := range []*verbs.Device{p.a, p.b} {
		a := d.Query()
		require.Equal(t, uint64(verbs.HCACoreClockKHz), a.HCACoreClockKHz)
		require.Equal(t, verbs.CompletionTimestampMask, a.CompletionTimestampMask)
	}
	o := defaultOpts()
	x := newEndpoint(t, p.a, nil, o, nil)
	y := newEndpoint(t, p.b, nil, o, nil)
	var err error
	x.scq, err = p.a.CreateCQEx(verbs.CQInitAttr{CQE: 8, Timestamps: true})
	require.NoError(t, err)
	y.rcq, err = p.b.CreateCQEx(verbs.CQInitAttr{CQE: 8, Timestamps: true})
	require.NoError(t, err)
	require.True(t, y.rcq.Timestamps())
	plain, err := p.b.CreateCQ(8, nil)
	require.NoError(t, err)
	require.False(t, plain.Timestamps())
	x.qp, err = x.pd.CreateQP(&verbs.QPInitAttr{SendCQ: x.scq, RecvCQ: x.rcq, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
	require.NoError(t, err)
	y.qp, err = y.pd.CreateQP(&verbs.QPInitAttr{SendCQ: plain, RecvCQ: y.rcq, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
	require.NoError(t, err)
	connect(t, x, y, o)
	smr, _ := regMR(t, x.pd, 64, allAccess)
	rmr, _ := regMR(t, y.pd, 64, allAccess)
	yr, _ := regMR(t, x.pd, 64, allAccess)
	ys, _ := regMR(t, y.pd, 64, allAccess)

	require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{rmr.SGE(0, 64)}}))
	before := p.a.Clock()
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{smr.SGE(0, 8)}}))
	sent := waitOK(t, x.scq, 2)
	mid := p.b.Clock()
	recv := waitOK(t, y.rcq, 1)
	require.LessOrEqual(t, before, recv.Timestamp, "made after the post")
	require.LessOrEqual(t, recv.Timestamp, sent.Timestamp, "the receive is made before the ACK")
	require.LessOrEqual(t, sent.Timestamp, mid, "stamped when made, not when polled")

	// A CQ made without timestamps has none.
	require.NoError(t, x.qp.PostRecv(&verbs.RecvWR{ID: 3, SGL: []verbs.SGE{yr.SGE(0, 64)}}))
	require.NoError(t, y.qp.PostSend(&verbs.SendWR{ID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{ys.SGE(0, 8)}}))
	require.Zero(t, waitOK(t, plain, 4).Timestamp)
	require.Zero(t, waitOK(t, x.rcq, 3).Timestamp)
}
