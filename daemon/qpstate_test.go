package daemon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// A QP the engine moves to ERR shows ERR to its client at once, as
// ibv_query_qp would, not the state of its last modify_qp.
func TestClientSeesQPError(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	require.Equal(t, ibv.QPSRTS, q.qp.State())
	require.NoError(t, q.qp.PostSend(&ibv.SendWR{ID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{q.mr.SGE(0, 100)}, RemoteAddr: r.pmr.Addr(), RKey: r.pmr.RKey() + 1}))
	require.Equal(t, ibv.WCRemAccessErr, q.poll(t).Status)
	require.Eventually(t, func() bool { return q.qp.State() == ibv.QPSErr }, 5*time.Second, time.Millisecond)
	// As on ConnectX and rxe, work posted in ERR completes flushed.
	require.NoError(t, q.qp.PostSend(&ibv.SendWR{ID: 2, Opcode: ibv.WRSend, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{q.mr.SGE(0, 1)}}))
	require.Equal(t, ibv.WCWRFlushErr, q.poll(t).Status)
}
