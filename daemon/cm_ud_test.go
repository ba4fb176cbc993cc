package daemon_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/verbs"
)

// cmUDEnd gives a UD ID its QP (cm_create_qp of type UD), a CQ and a
// region with a receive posted.
func cmUDEnd(t *testing.T, id *rdmacm.ID) (*verbs.PD, *cmConn) {
	t.Helper()
	dev := id.Device()
	require.NotNil(t, dev)
	cq, err := dev.CreateCQ(16, nil)
	require.NoError(t, err)
	pd := dev.AllocPD()
	qp, err := id.CreateQP(pd, &verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	assert.Equal(t, verbs.QPSRTS, qp.State(), "the daemon took the UD QP to RTS and published it")
	mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	require.NoError(t, err)
	require.NoError(t, qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{mr.SGE(2048, 2048)}}))
	return pd, &cmConn{id: id, qp: qp, cq: cq, mr: mr}
}

// TestCMUDThroughDaemons is udaddy's exchange between two daemons'
// clients: the UDP port space's IDs resolve each other with SIDR, the
// client learns the server's QPN and Q_Key from ESTABLISHED and sends it a
// datagram; a connect to a port nobody serves is UNREACHABLE at once.
func TestCMUDThroughDaemons(t *testing.T) {
	a, b := newCMSides(t, true, true)
	_, cliCM := a.program(t)
	_, srvCM := b.program(t)
	srvAddr := netip.AddrPortFrom(addrB, 7174)
	lch := srvCM.NewEventChannel()
	lid, err := srvCM.CreateID(lch, rdmacm.PortSpaceUDP)
	require.NoError(t, err)
	require.NoError(t, lid.Bind(srvAddr))
	require.NoError(t, lid.Listen(4))

	dial := func(dst netip.AddrPort) (*rdmacm.ID, *rdmacm.EventChannel) {
		ch := cliCM.NewEventChannel()
		id, err := cliCM.CreateID(ch, rdmacm.PortSpaceUDP)
		require.NoError(t, err)
		require.NoError(t, id.ResolveAddr(netip.Addr{}, dst, time.Second))
		cmEvent(t, ch, rdmacm.EventAddrResolved)
		require.NoError(t, id.ResolveRoute(time.Second))
		cmEvent(t, ch, rdmacm.EventRouteResolved)
		return id, ch
	}
	refused, rch := dial(netip.AddrPortFrom(addrB, 7175))
	require.NoError(t, refused.Connect(&rdmacm.ConnParam{}))
	ev := cmEvent(t, rch, rdmacm.EventUnreachable)
	assert.ErrorIs(t, ev.Err, rdmacm.ErrRefused)
	require.NoError(t, refused.Destroy())

	id, ch := dial(srvAddr)
	cliPD, cli := cmUDEnd(t, id)
	require.NoError(t, id.Connect(&rdmacm.ConnParam{PrivateData: []byte("udaddy through the daemon")}))
	req := cmEvent(t, lch, rdmacm.EventConnectRequest)
	assert.True(t, bytes.HasPrefix(req.Param.PrivateData, []byte("udaddy through the daemon")))
	_, srv := cmUDEnd(t, req.ID)
	require.NoError(t, req.ID.Accept(&rdmacm.ConnParam{}))
	est := cmEvent(t, ch, rdmacm.EventEstablished)
	require.NotNil(t, est.UD)
	assert.Equal(t, srv.qp.QPN(), est.UD.QPN)
	assert.Equal(t, uint32(rdmacm.UDPQKey), est.UD.QKey)

	ah, err := cliPD.CreateAH(&est.UD.AV)
	require.NoError(t, err)
	copy(cli.mr.Bytes(), "datagram")
	require.NoError(t, cli.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{cli.mr.SGE(0, 8)}, AH: ah, RemoteQPN: est.UD.QPN, RemoteQKey: est.UD.QKey}))
	assert.Equal(t, verbs.WCSend, cli.waitWC(t).Opcode)
	wc := srv.waitWC(t)
	assert.Equal(t, cli.qp.QPN(), wc.SrcQP)
	assert.Equal(t, "datagram", string(srv.mr.Bytes()[2048+verbs.GRHLen:2048+wc.ByteLen]))
	for _, i := range []*rdmacm.ID{id, req.ID, lid} {
		require.NoError(t, i.Destroy())
	}
}

// TestCMMigrateThroughDaemons: a daemon client's listener moves to a new
// channel (cm_migrate_id); the connect request that follows comes on the
// new channel, and its new ID's ESTABLISHED too. (rdmacm's TestMigrate
// moves a request already queued.)
func TestCMMigrateThroughDaemons(t *testing.T) {
	a, b := newCMSides(t, true, true)
	_, cliCM := a.program(t)
	_, srvCM := b.program(t)
	srvAddr := netip.AddrPortFrom(addrB, 7178)
	lid, lch := cmListen(t, srvCM, srvAddr)
	nch := srvCM.NewEventChannel()
	require.NoError(t, lid.Migrate(nch))
	cli, cch := cmDial(t, cliCM, srvAddr)
	req := cmEvent(t, nch, rdmacm.EventConnectRequest)
	cmQP(t, req.ID)
	require.NoError(t, req.ID.Accept(&rdmacm.ConnParam{RNRRetryCount: 7}))
	cmEvent(t, cch, rdmacm.EventEstablished)
	cmEvent(t, nch, rdmacm.EventEstablished)
	assert.Zero(t, lch.Pending(), "nothing came on the first channel")
	require.NoError(t, cli.id.Destroy())
	require.NoError(t, lid.Destroy())
}
