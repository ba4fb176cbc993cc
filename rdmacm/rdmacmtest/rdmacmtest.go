// Package rdmacmtest holds the steps tests of rdma_cm connections share,
// in-process (package rdmacm's) and through the daemon (package daemon's):
// waiting for an event, giving an ID a QP, waiting for a completion.
package rdmacmtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/verbs"
)

// NextEvent returns ch's next event, which must be of type want, within
// timeout. It passes over TIMEWAIT_EXIT events, which come when an earlier
// connection's TIMEWAIT ends, whenever that is.
func NextEvent(t testing.TB, ch *rdmacm.EventChannel, want rdmacm.EventType, timeout time.Duration) rdmacm.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		ev, err := ch.Get(ctx)
		require.NoError(t, err, "waiting for %v", want)
		if ev.Type == rdmacm.EventTimewaitExit && want != ev.Type {
			continue
		}
		require.Equal(t, want, ev.Type, "event (error %v)", ev.Err)
		return ev
	}
}

// QP is an ID's QP with its CQ (send and receive) and a 4 KiB region whose
// second half has a receive posted.
type QP struct {
	Dev *verbs.Device
	QP  *verbs.QP
	CQ  *verbs.CQ
	MR  *verbs.MR
}

// NewQP gives id an RC QP on a CQ and a PD of its own, registers a 4 KiB
// buffer with local write, remote read and remote write, and posts a
// receive into its second half.
func NewQP(t testing.TB, id *rdmacm.ID) *QP {
	t.Helper()
	dev := id.Device()
	require.NotNil(t, dev)
	q := newQP(t, dev, id.CreateQP)
	q.PostRecv(t)
	return q
}

// NewCallersQP is NewQP's QP made on dev by the caller itself, not by an
// ID (rdma_conn_param.qp_num's QPs): it stays in RESET, with no receive
// posted.
func NewCallersQP(t testing.TB, dev *verbs.Device) *QP {
	t.Helper()
	return newQP(t, dev, func(pd *verbs.PD, init *verbs.QPInitAttr) (*verbs.QP, error) { return pd.CreateQP(init) })
}

func newQP(t testing.TB, dev *verbs.Device, create func(*verbs.PD, *verbs.QPInitAttr) (*verbs.QP, error)) *QP {
	cq, err := dev.CreateCQ(64, nil)
	require.NoError(t, err)
	pd := dev.AllocPD()
	qp, err := create(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	return &QP{Dev: dev, QP: qp, CQ: cq, MR: mr}
}

// SendRecv SENDs msg from the start of from's buffer into to's posted
// receive and checks both completions and the bytes that arrived.
func SendRecv(t testing.TB, from, to *QP, msg string, timeout time.Duration) {
	t.Helper()
	copy(from.MR.Bytes(), msg)
	require.NoError(t, from.QP.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{from.MR.SGE(0, len(msg))}}))
	require.Equal(t, verbs.WCSend, WaitWC(t, from.CQ, timeout).Opcode)
	wc := WaitWC(t, to.CQ, timeout)
	require.Equal(t, verbs.WCRecv, wc.Opcode)
	require.Equal(t, msg, string(to.MR.Bytes()[2048:2048+wc.ByteLen]))
}

// PostRecv posts a receive into the second half of q's buffer.
func (q *QP) PostRecv(t testing.TB) {
	require.NoError(t, q.QP.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{q.MR.SGE(2048, 2048)}}))
}

// WaitWC waits up to timeout for the next completion of cq, which must
// succeed.
func WaitWC(t testing.TB, cq *verbs.CQ, timeout time.Duration) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	wcs := make([]verbs.WC, 1)
	n, err := cq.Wait(ctx, wcs)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, verbs.WCSuccess, wcs[0].Status, "completion %+v", wcs[0])
	return wcs[0]
}
