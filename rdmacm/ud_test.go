package rdmacm_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/rdmacm/rdmacmtest"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// udEnd is a UD ID with its QP, CQ and a buffer with a receive posted.
type udEnd struct {
	id *rdmacm.ID
	pd *verbs.PD
	qp *verbs.QP
	cq *verbs.CQ
	mr *verbs.MR
}

func newUDEnd(t *testing.T, id *rdmacm.ID) *udEnd {
	t.Helper()
	dev := id.Device()
	require.NotNil(t, dev)
	cq, err := dev.CreateCQ(16, nil)
	require.NoError(t, err)
	pd := dev.AllocPD()
	_, err = id.CreateQP(pd, &verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	assert.ErrorIs(t, err, rdmacm.ErrInvalidArgument, "the UDP port space's QPs are UD")
	qp, err := id.CreateQP(pd, &verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	assert.Equal(t, verbs.QPSRTS, qp.State(), "a UD ID's QP is ready at once")
	mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	require.NoError(t, err)
	require.NoError(t, qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{mr.SGE(2048, 2048)}}))
	return &udEnd{id: id, pd: pd, qp: qp, cq: cq, mr: mr}
}

// TestUDResolveAndSend is udaddy's exchange: the client resolves the
// server's service (SIDR) and learns its QPN and Q_Key, sends it a
// datagram, and the server answers to the address it came from.
func TestUDResolveAndSend(t *testing.T) {
	a, b := newSides(t, memlink.Config{}, 0)
	srvAddr := netip.AddrPortFrom(addrB, 7174)
	lch := b.cm.NewEventChannel()
	lid, err := b.cm.CreateID(lch, rdmacm.PortSpaceUDP)
	require.NoError(t, err)
	require.NoError(t, lid.Bind(srvAddr))
	require.NoError(t, lid.Listen(4))

	ch := a.cm.NewEventChannel()
	id, err := a.cm.CreateID(ch, rdmacm.PortSpaceUDP)
	require.NoError(t, err)
	require.NoError(t, id.ResolveAddr(netip.Addr{}, srvAddr, time.Second))
	nextEvent(t, ch, rdmacm.EventAddrResolved)
	require.NoError(t, id.ResolveRoute(time.Second))
	nextEvent(t, ch, rdmacm.EventRouteResolved)
	cli := newUDEnd(t, id)
	require.NoError(t, id.Connect(&rdmacm.ConnParam{PrivateData: []byte("udaddy")}))

	req := nextEvent(t, lch, rdmacm.EventConnectRequest)
	assert.Same(t, lid, req.Listen)
	assert.True(t, bytes.HasPrefix(req.Param.PrivateData, []byte("udaddy")))
	assert.Equal(t, id.LocalAddr(), req.ID.PeerAddr())
	srv := newUDEnd(t, req.ID)
	require.NoError(t, req.ID.Accept(&rdmacm.ConnParam{PrivateData: []byte("ok")}))
	assert.ErrorIs(t, req.ID.Accept(&rdmacm.ConnParam{}), rdmacm.ErrState, "accepted once")

	est := nextEvent(t, ch, rdmacm.EventEstablished)
	require.NotNil(t, est.UD)
	assert.Equal(t, srv.qp.QPN(), est.UD.QPN)
	assert.Equal(t, uint32(rdmacm.UDPQKey), est.UD.QKey)
	assert.True(t, bytes.HasPrefix(est.Param.PrivateData, []byte("ok")))
	assert.ErrorIs(t, id.Disconnect(), rdmacm.ErrInvalidArgument, "a UD ID has no connection")

	ah, err := cli.pd.CreateAH(&est.UD.AV)
	require.NoError(t, err)
	copy(cli.mr.Bytes(), "datagram")
	require.NoError(t, cli.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{cli.mr.SGE(0, 8)}, AH: ah, RemoteQPN: est.UD.QPN, RemoteQKey: est.UD.QKey}))
	assert.Equal(t, verbs.WCSend, rdmacmWait(t, cli.cq).Opcode)
	wc := rdmacmWait(t, srv.cq)
	assert.Equal(t, cli.qp.QPN(), wc.SrcQP)
	assert.Equal(t, "datagram", string(srv.mr.Bytes()[2048+verbs.GRHLen:2048+wc.ByteLen]))

	for _, i := range []*rdmacm.ID{id, req.ID, lid} {
		require.NoError(t, i.Destroy())
	}
	assert.Zero(t, a.cm.IDs())
	assert.Zero(t, b.cm.IDs())
}

// TestUDRefused: nobody serves the port, so the SIDR_REP says
// "unsupported" and the client gets UNREACHABLE at once, as from Linux's
// CM; a listener that rejects gives UNREACHABLE with status 2.
func TestUDRefused(t *testing.T) {
	a, b := newSides(t, memlink.Config{}, 0)
	srvAddr := netip.AddrPortFrom(addrB, 7175)
	resolved := func() (*rdmacm.ID, *rdmacm.EventChannel) {
		ch := a.cm.NewEventChannel()
		id, err := a.cm.CreateID(ch, rdmacm.PortSpaceUDP)
		require.NoError(t, err)
		require.NoError(t, id.ResolveAddr(netip.Addr{}, srvAddr, time.Second))
		nextEvent(t, ch, rdmacm.EventAddrResolved)
		require.NoError(t, id.ResolveRoute(time.Second))
		nextEvent(t, ch, rdmacm.EventRouteResolved)
		return id, ch
	}
	id, ch := resolved()
	require.NoError(t, id.Connect(&rdmacm.ConnParam{}))
	ev := nextEvent(t, ch, rdmacm.EventUnreachable)
	assert.Equal(t, mad.RejectReason(mad.SIDRUnsupported), ev.Reason)
	assert.ErrorIs(t, ev.Err, rdmacm.ErrRefused)

	lch := b.cm.NewEventChannel()
	lid, err := b.cm.CreateID(lch, rdmacm.PortSpaceUDP)
	require.NoError(t, err)
	require.NoError(t, lid.Bind(srvAddr))
	require.NoError(t, lid.Listen(4))
	require.NoError(t, id.Connect(&rdmacm.ConnParam{}), "a refused ID may try again")
	req := nextEvent(t, lch, rdmacm.EventConnectRequest)
	require.NoError(t, req.ID.Reject([]byte("no")))
	ev = nextEvent(t, ch, rdmacm.EventUnreachable)
	assert.Equal(t, mad.RejectReason(mad.SIDRRejected), ev.Reason)
	assert.True(t, bytes.HasPrefix(ev.Param.PrivateData, []byte("no")))
}

func rdmacmWait(t *testing.T, cq *verbs.CQ) verbs.WC {
	t.Helper()
	return rdmacmtest.WaitWC(t, cq, 10*time.Second)
}

// TestSetOption: the client's ACK timeout reaches its QP at RTS, its
// traffic class its QP's address vector; the server's child takes the
// listener's ACK timeout; other options are not supported.
func TestSetOption(t *testing.T) {
	a, b := newSides(t, memlink.Config{}, 0)
	srvAddr := netip.AddrPortFrom(addrB, 7176)
	lid, lch := listen(t, b, srvAddr)
	require.NoError(t, lid.SetOption(rdmacm.OptionACKTimeout, 16))
	assert.ErrorIs(t, lid.SetOption(rdmacm.OptionACKTimeout, 32), rdmacm.ErrInvalidArgument)
	assert.ErrorIs(t, lid.SetOption(1, 1), rdmacm.ErrNotSupported, "REUSEADDR")

	ch := a.cm.NewEventChannel()
	id, err := a.cm.CreateID(ch, rdmacm.PortSpaceTCP)
	require.NoError(t, err)
	require.NoError(t, id.ResolveAddr(netip.Addr{}, srvAddr, time.Second))
	nextEvent(t, ch, rdmacm.EventAddrResolved)
	require.NoError(t, id.SetOption(rdmacm.OptionACKTimeout, 18))
	require.NoError(t, id.SetOption(rdmacm.OptionTOS, 0x20))
	require.NoError(t, id.ResolveRoute(time.Second))
	nextEvent(t, ch, rdmacm.EventRouteResolved)
	cli := makeQP(t, id, ch)
	require.NoError(t, id.Connect(&rdmacm.ConnParam{RNRRetryCount: 7}))
	srv, _ := accept(t, lch, &rdmacm.ConnParam{RNRRetryCount: 7})
	nextEvent(t, ch, rdmacm.EventEstablished)
	nextEvent(t, lch, rdmacm.EventEstablished)
	c, s := cli.qp.Query(), srv.qp.Query()
	assert.Equal(t, uint8(18), c.Timeout)
	assert.Equal(t, uint8(0x20), c.AV.TrafficClass)
	assert.Equal(t, uint8(16), s.Timeout, "the listener's option")
	assert.Equal(t, uint8(0x20), s.AV.TrafficClass, "the REQ's traffic class")
}
