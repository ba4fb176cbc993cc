package ibtransport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// PostSendError completes with the status given, signaled or not, and takes
// the QP to the error state; a QP in RESET refuses it like any post.
func TestPostSendError(t *testing.T) {
	ft := newFuzzTarget(t)
	for _, q := range []*QP{ft.ud, ft.uc} {
		ft.cq.wcs = nil
		require.NoError(t, q.PostSendError(77, ibv.WCLocQPOpErr))
		ft.e.Process()
		require.NotEmpty(t, ft.cq.wcs, "%v", q)
		wc := ft.cq.wcs[0]
		require.Equal(t, [3]uint64{77, uint64(ibv.WCLocQPOpErr), uint64(q.QPN())}, [3]uint64{wc.WRID, uint64(wc.Status), uint64(wc.QPN)})
		for _, wc := range ft.cq.wcs[1:] {
			require.Equal(t, ibv.WCWRFlushErr, wc.Status, "the receives are flushed")
		}
		require.Equal(t, ibv.QPSErr, q.State())
	}
	q, err := ft.e.CreateQP(&QPConfig{Memory: &testMemory{ft.mr}, SendCQ: ft.cq, RecvCQ: ft.cq, Cap: ibv.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	require.NoError(t, err)
	require.ErrorIs(t, q.PostSendError(1, ibv.WCLocQPOpErr), ibv.ErrInvalidState)
}
