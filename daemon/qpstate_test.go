package daemon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport"
)

// A QP the engine moves to ERR shows ERR to its client at once, as
// ibv_query_qp would, not the state of its last modify_qp.
func TestClientSeesQPError(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	require.Equal(t, ibtransport.QPSRTS, q.qp.State())
	require.NoError(t, q.qp.PostSend(&ibtransport.SendWR{ID: 1, Opcode: ibtransport.WRRDMAWrite, Flags: ibtransport.SendSignaled,
		SGL: []ibtransport.SGE{q.mr.SGE(0, 100)}, RemoteAddr: r.pmr.Addr(), RKey: r.pmr.RKey() + 1}))
	require.Equal(t, ibtransport.WCRemAccessErr, q.poll(t).Status)
	require.Eventually(t, func() bool { return q.qp.State() == ibtransport.QPSErr }, 5*time.Second, time.Millisecond)
	// As on ConnectX and rxe, work posted in ERR completes flushed.
	require.NoError(t, q.qp.PostSend(&ibtransport.SendWR{ID: 2, Opcode: ibtransport.WRSend, Flags: ibtransport.SendSignaled,
		SGL: []ibtransport.SGE{q.mr.SGE(0, 1)}}))
	require.Equal(t, ibtransport.WCWRFlushErr, q.poll(t).Status)
}
