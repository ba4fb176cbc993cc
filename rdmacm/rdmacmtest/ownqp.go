package rdmacmtest

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/verbs"
)

// CallersQPs connects an ID of cliCM to a listener of srvCM at srvAddr,
// each side with a QP it made itself and moves with InitQPAttr, as
// rping -q does: the passive side takes its QP to RTS before Accept, the
// active side after EventConnectResponse, then calls Establish. A SEND
// each way and an RDMA READ must then work, and Disconnect end it.
func CallersQPs(t *testing.T, cliCM, srvCM *rdmacm.CM, srvAddr netip.AddrPort) {
	const timeout = 20 * time.Second
	lch := srvCM.NewEventChannel()
	lid, err := srvCM.CreateID(lch, rdmacm.PortSpaceTCP)
	require.NoError(t, err)
	require.NoError(t, lid.Bind(srvAddr))
	require.NoError(t, lid.Listen(8))
	cch := cliCM.NewEventChannel()
	id, err := cliCM.CreateID(cch, rdmacm.PortSpaceTCP)
	require.NoError(t, err)
	require.NoError(t, id.ResolveAddr(netip.Addr{}, srvAddr, time.Second))
	NextEvent(t, cch, rdmacm.EventAddrResolved, timeout)
	require.NoError(t, id.ResolveRoute(time.Second))
	NextEvent(t, cch, rdmacm.EventRouteResolved, timeout)

	cli := NewCallersQP(t, id.Device())
	_, _, err = id.InitQPAttr(verbs.QPSRTR)
	assert.Error(t, err, "RTR's attributes before the REP")
	moveQP(t, id, cli, verbs.QPSInit)
	assert.Error(t, id.Connect(&rdmacm.ConnParam{}), "an ID with no QP connects only with a QP number")
	require.NoError(t, id.Connect(&rdmacm.ConnParam{QPNum: cli.QP.QPN(), ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7}))

	req := NextEvent(t, lch, rdmacm.EventConnectRequest, timeout)
	srv := NewCallersQP(t, req.ID.Device())
	moveQP(t, req.ID, srv, verbs.QPSInit, verbs.QPSRTR, verbs.QPSRTS)
	require.NoError(t, req.ID.Accept(&rdmacm.ConnParam{QPNum: srv.QP.QPN(), ResponderResources: 1, InitiatorDepth: 1,
		RNRRetryCount: 7}))
	NextEvent(t, cch, rdmacm.EventConnectResponse, timeout)
	moveQP(t, id, cli, verbs.QPSInit, verbs.QPSRTR, verbs.QPSRTS)
	require.NoError(t, id.Establish())
	assert.Error(t, id.Establish(), "a second RTU")
	NextEvent(t, lch, rdmacm.EventEstablished, timeout)

	SendRecv(t, cli, srv, "ping", timeout)
	SendRecv(t, srv, cli, "pong", timeout)
	copy(cli.MR.Bytes()[100:], "read me")
	require.NoError(t, srv.QP.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{srv.MR.SGE(200, 7)}, RemoteAddr: cli.MR.Addr() + 100, RKey: cli.MR.RKey()}))
	assert.Equal(t, verbs.WCRDMARead, WaitWC(t, srv.CQ, timeout).Opcode)
	assert.Equal(t, "read me", string(srv.MR.Bytes()[200:207]))

	require.NoError(t, id.Disconnect())
	NextEvent(t, cch, rdmacm.EventDisconnected, timeout)
	NextEvent(t, lch, rdmacm.EventDisconnected, timeout)
	for _, x := range []*rdmacm.ID{id, req.ID, lid} {
		require.NoError(t, x.Destroy())
	}
	require.NoError(t, cli.QP.Destroy(), "the caller's QP stays the caller's")
	require.NoError(t, srv.QP.Destroy())
}

// moveQP takes q through states with the attributes id gives for each,
// posting its receive when it leaves RESET.
func moveQP(t *testing.T, id *rdmacm.ID, q *QP, states ...verbs.QPState) {
	t.Helper()
	for _, st := range states {
		attr, mask, err := id.InitQPAttr(st)
		require.NoError(t, err, "attributes for %v", st)
		fresh := q.QP.State() == verbs.QPSReset
		require.NoError(t, q.QP.Modify(&attr, mask), "to %v", st)
		if fresh {
			q.PostRecv(t)
		}
	}
}
