package rdmacm_test

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/rdmacm/rdmacmtest"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// TestConnectSendReadDisconnect connects a client to a listener with
// private data both ways, moves data over the connected QPs (a SEND each
// way and an RDMA READ, which needs the responder resources the exchange
// granted), and disconnects from the client side.
func TestConnectSendReadDisconnect(t *testing.T) {
	a, b := newSides(t, memlink.Config{}, 0)
	srvAddr := netip.AddrPortFrom(addrB, 7174)
	lid, lch := listen(t, b, srvAddr)

	cli := dial(t, a, srvAddr, &rdmacm.ConnParam{PrivateData: []byte("hello from the client"),
		ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7})
	srv, req := accept(t, lch, &rdmacm.ConnParam{PrivateData: []byte("welcome"), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7})
	assert.Same(t, lid, req.Listen)
	assert.True(t, bytes.HasPrefix(req.Param.PrivateData, []byte("hello from the client")))
	assert.Len(t, req.Param.PrivateData, mad.CMAUserDataLen, "a REQ's private data field is fixed-size")
	assert.Equal(t, uint8(1), req.Param.ResponderResources)
	assert.Equal(t, srvAddr, req.ID.LocalAddr())
	assert.Equal(t, cli.id.LocalAddr(), req.ID.PeerAddr(), "the rdma_cm header carries the client's address and port")

	est := nextEvent(t, cli.ch, rdmacm.EventEstablished)
	assert.True(t, bytes.HasPrefix(est.Param.PrivateData, []byte("welcome")))
	nextEvent(t, lch, rdmacm.EventEstablished)
	assert.Equal(t, verbs.QPSRTS, cli.qp.State())
	assert.Equal(t, verbs.QPSRTS, srv.qp.State())

	rdmacmtest.SendRecv(t, cli.q, srv.q, "ping", 10*time.Second)
	rdmacmtest.SendRecv(t, srv.q, cli.q, "pong", 10*time.Second)

	copy(cli.mr.Bytes()[100:], "read me")
	require.NoError(t, srv.qp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{srv.mr.SGE(200, 7)}, RemoteAddr: cli.mr.Addr() + 100, RKey: cli.mr.RKey()}))
	assert.Equal(t, verbs.WCRDMARead, srv.waitWC(t).Opcode)
	assert.Equal(t, "read me", string(srv.mr.Bytes()[200:207]))

	require.NoError(t, cli.id.Disconnect())
	nextEvent(t, cli.ch, rdmacm.EventDisconnected)
	nextEvent(t, lch, rdmacm.EventDisconnected)
	require.NoError(t, srv.id.Disconnect(), "disconnecting after the peer did is not an error")
	assert.Equal(t, verbs.QPSErr, cli.qp.State())
	assert.Equal(t, verbs.QPSErr, srv.qp.State())

	require.NoError(t, cli.id.Destroy())
	require.NoError(t, srv.id.Destroy())
	require.NoError(t, lid.Destroy())
	assert.Zero(t, a.cm.IDs())
	assert.Zero(t, b.cm.IDs())
}

// TestConnectRefused: a REQ to a port nobody listens on is rejected with
// reason 8 (invalid service ID) by the peer's IB CM, which every device
// runs, and the client hears it at once, not after the CM's retries.
func TestConnectRefused(t *testing.T) {
	a, _ := newSides(t, memlink.Config{}, 0)
	start := time.Now()
	cli := dial(t, a, netip.AddrPortFrom(addrB, 7175), &rdmacm.ConnParam{})
	ev := nextEvent(t, cli.ch, rdmacm.EventRejected)
	assert.Less(t, time.Since(start), time.Second)
	assert.Equal(t, mad.RejectInvalidServiceID, ev.Reason)
	assert.ErrorIs(t, ev.Err, rdmacm.ErrRefused)
	assert.Equal(t, verbs.QPSErr, cli.qp.State())
	require.NoError(t, cli.id.Destroy())
}

// TestReject: the listener's program rejects with private data; the
// client sees a consumer reject carrying it.
func TestReject(t *testing.T) {
	a, b := newSides(t, memlink.Config{}, 0)
	srvAddr := netip.AddrPortFrom(addrB, 7174)
	_, lch := listen(t, b, srvAddr)
	cli := dial(t, a, srvAddr, &rdmacm.ConnParam{})
	req := nextEvent(t, lch, rdmacm.EventConnectRequest)
	require.NoError(t, req.ID.Reject([]byte("go away")))
	ev := nextEvent(t, cli.ch, rdmacm.EventRejected)
	assert.Equal(t, mad.RejectConsumer, ev.Reason)
	assert.True(t, bytes.HasPrefix(ev.Param.PrivateData, []byte("go away")))
	require.NoError(t, req.ID.Destroy())
}

// TestBindConflicts: a port is bound once per address, and an
// unspecified address takes it on every address.
func TestBindConflicts(t *testing.T) {
	_, b := newSides(t, memlink.Config{}, 0)
	listen(t, b, netip.AddrPortFrom(addrB, 7174))
	ch := b.cm.NewEventChannel()
	for _, ap := range []netip.AddrPort{netip.AddrPortFrom(addrB, 7174), netip.AddrPortFrom(netip.IPv4Unspecified(), 7174)} {
		id, err := b.cm.CreateID(ch, rdmacm.PortSpaceTCP)
		require.NoError(t, err)
		assert.ErrorIs(t, id.Bind(ap), rdmacm.ErrAddrInUse, "%v", ap)
		require.NoError(t, id.Destroy())
	}
	id, err := b.cm.CreateID(ch, rdmacm.PortSpaceTCP)
	require.NoError(t, err)
	assert.ErrorIs(t, id.Bind(netip.AddrPortFrom(addrA, 1)), rdmacm.ErrNoDevice, "not an address of the device")
}

// TestLostRTU drops the client's RTU: the server's QP, in RTS since
// Accept, receives the client's first SEND, and that packet establishes
// the connection (COMM_EST) at once, long before the REP's retry (4 s)
// would bring another RTU.
func TestLostRTU(t *testing.T) {
	a, b := newSides(t, memlink.Config{}, 0)
	var dropped atomic.Int32
	a.link.SetTap(func(frame []byte) bool {
		var fr roce.Frame
		var p header.Packet
		if roce.ParseFrame(append([]byte(nil), frame...), &fr) != nil || header.ParsePacket(fr.IB, &p) != nil ||
			!mad.ToGSI(&p) || mad.MAD(p.Payload).Header().AttrID() != mad.AttrRTU {
			return true
		}
		dropped.Add(1)
		return false
	})
	srvAddr := netip.AddrPortFrom(addrB, 7174)
	_, lch := listen(t, b, srvAddr)
	cli := dial(t, a, srvAddr, &rdmacm.ConnParam{})
	srv, _ := accept(t, lch, &rdmacm.ConnParam{})
	nextEvent(t, cli.ch, rdmacm.EventEstablished)
	start := time.Now()
	copy(cli.mr.Bytes(), "first")
	require.NoError(t, cli.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{cli.mr.SGE(0, 5)}}))
	nextEvent(t, lch, rdmacm.EventEstablished)
	assert.Less(t, time.Since(start), time.Second, "the first packet, not the REP's retry, established the connection")
	assert.Equal(t, int32(1), dropped.Load(), "RTUs dropped")
	srv.waitWC(t)
	cli.waitWC(t)
}
