package mad_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/roce"
)

// rpingExchange is rxe's rping exchange in rxe-rping.pcap, parsed.
type rpingExchange struct {
	pkts                      []capturedPacket
	mads                      []capturedPacket
	req, rep, rtu, dreq, drep mad.MAD
}

func loadRping(t *testing.T) *rpingExchange {
	x := &rpingExchange{pkts: loadCapture(t, rpingCapture)}
	var attrs []mad.AttrID
	for _, c := range x.pkts {
		if !c.isMAD() {
			continue
		}
		m, err := mad.Parse(c.pkt.Payload)
		require.NoError(t, err)
		x.mads = append(x.mads, c)
		attrs = append(attrs, m.Header().AttrID())
	}
	require.Equal(t, []mad.AttrID{mad.AttrREQ, mad.AttrREP, mad.AttrRTU, mad.AttrDREQ, mad.AttrDREP}, attrs)
	for i, m := range []*mad.MAD{&x.req, &x.rep, &x.rtu, &x.dreq, &x.drep} {
		*m = mad.MAD(x.mads[i].pkt.Payload)
	}
	return x
}

// firstRequest returns the first RC request (no DETH, no AETH) sent to the
// side MAD frame m went to.
func (x *rpingExchange) firstRequest(t *testing.T, m *roce.Frame) *capturedPacket {
	for i := range x.pkts {
		c := &x.pkts[i]
		if c.pkt.DETH == nil && c.pkt.AETH == nil && c.frame.Dst == m.Dst {
			return c
		}
	}
	t.Fatalf("no RC request to %v", m.Dst)
	return nil
}

// guidOf returns the node GUID rxe derives from a MAC: the EUI-64 that also
// ends the MAC's link-local GID.
func guidOf(mac [6]byte) uint64 {
	g := roce.DefaultGID(mac).As16()
	return binary.BigEndian.Uint64(g[8:])
}

func TestRpingMADTransport(t *testing.T) {
	x := loadRping(t)
	for _, c := range x.mads {
		assert.Equal(t, header.OpUDSendOnly, c.pkt.Opcode())
		assert.Equal(t, uint16(mad.GSIPKey), c.pkt.BTH.PKey())
		assert.Equal(t, uint32(mad.GSIQKey), c.pkt.DETH.QKey())
		assert.Equal(t, uint32(mad.GSIQPN), c.pkt.DETH.SrcQP())
		assert.Len(t, c.pkt.Payload, mad.Len)
		h := mad.MAD(c.pkt.Payload).Header()
		assert.Equal(t, uint8(mad.BaseVersion), h.BaseVersion())
		assert.Equal(t, uint8(mad.ClassCM), h.MgmtClass())
		assert.Equal(t, uint8(mad.CMClassVersion), h.ClassVersion())
		assert.Equal(t, uint8(mad.MethodSend), h.Method())
		assert.Zero(t, h.Status())
		assert.Zero(t, h.AttrModifier())
	}
	// A reply carries the transaction ID of what it answers.
	assert.Equal(t, x.req.Header().TID(), x.rep.Header().TID())
	assert.Equal(t, x.dreq.Header().TID(), x.drep.Header().TID())
}

// TestRpingCommIDs checks that each side's communication ID is its local ID
// in what it sends and the remote ID in what it receives.
func TestRpingCommIDs(t *testing.T) {
	x := loadRping(t)
	client, server := mad.REQ(x.req).LocalCommID(), mad.REP(x.rep).LocalCommID()
	assert.NotZero(t, client)
	assert.NotZero(t, server)
	assert.NotEqual(t, client, server)
	clientAddr := x.mads[0].frame.Src
	type ids struct{ local, remote uint32 }
	got := []ids{
		{mad.REP(x.rep).LocalCommID(), mad.REP(x.rep).RemoteCommID()},
		{mad.RTU(x.rtu).LocalCommID(), mad.RTU(x.rtu).RemoteCommID()},
		{mad.DREQ(x.dreq).LocalCommID(), mad.DREQ(x.dreq).RemoteCommID()},
		{mad.DREP(x.drep).LocalCommID(), mad.DREP(x.drep).RemoteCommID()},
	}
	for i, g := range got {
		want := ids{server, client}
		if x.mads[i+1].frame.Src == clientAddr {
			want = ids{client, server}
		}
		assert.Equal(t, want, g, "message %d", i+1)
	}
}

func TestRpingREQ(t *testing.T) {
	x := loadRping(t)
	r, f := mad.REQ(x.req), &x.mads[0].frame
	assert.Equal(t, mad.ServiceID(mad.PortSpaceTCP, 7174), r.ServiceID())
	assert.Equal(t, uint64(0x0106<<16|7174), r.ServiceID())
	ps, port, ok := mad.SplitServiceID(r.ServiceID())
	assert.True(t, ok)
	assert.Equal(t, mad.PortSpaceTCP, ps)
	assert.Equal(t, uint16(7174), port)
	assert.Equal(t, guidOf(f.SrcMAC), r.LocalCAGUID())
	assert.Zero(t, r.LocalQKey())
	assert.Equal(t, uint8(mad.TransportRC), r.TransportServiceType())
	assert.False(t, r.EndToEndFlowControl())
	assert.Equal(t, uint16(0xffff), r.PKey())
	assert.Equal(t, ibv.MTU1024, r.PathMTU(), "path MTU 1024")
	assert.False(t, r.RDCExists())
	assert.False(t, r.SRQ())
	assert.Zero(t, r.ExtendedTransportType())
	// rping asks for retry and RNR retry 7 and 1 READ each way; cma.c's CM
	// response timeout is 20 and it allows 15 CM retries.
	assert.Equal(t, uint8(7), r.RetryCount())
	assert.Equal(t, uint8(7), r.RNRRetryCount())
	assert.Equal(t, uint8(1), r.ResponderResources())
	assert.Equal(t, uint8(1), r.InitiatorDepth())
	assert.Equal(t, uint8(20), r.RemoteCMResponseTimeout())
	assert.Equal(t, uint8(20), r.LocalCMResponseTimeout())
	assert.Equal(t, uint8(15), r.MaxCMRetries())

	p := r.PrimaryPath()
	assert.Equal(t, uint16(0xffff), p.LocalLID())
	assert.Equal(t, uint16(0xffff), p.RemoteLID())
	assert.Equal(t, f.SrcGID(), p.LocalGID())
	assert.Equal(t, f.DstGID(), p.RemoteGID())
	assert.Equal(t, f.HopLimit, p.HopLimit())
	assert.Equal(t, f.TrafficClass, p.TrafficClass())
	assert.Zero(t, p.SL())
	assert.Equal(t, uint8(19), p.LocalACKTimeout())
	assert.Equal(t, make([]byte, mad.PathLen), []byte(r.AlternatePath()), "RoCE has no alternate path")

	h := r.CMAHeader()
	require.NoError(t, h.Check())
	assert.Equal(t, uint8(4), h.IPVersion())
	assert.Equal(t, f.Src, h.SrcAddr())
	assert.Equal(t, f.Dst, h.DstAddr())
	assert.NotZero(t, h.SrcPort())
	assert.Equal(t, make([]byte, mad.REQPrivateDataLen-mad.CMAHeaderLen),
		r.PrivateData()[mad.CMAHeaderLen:], "rping sends no private data of its own")
}

// TestRpingQPAttributes checks the QPNs, PSNs and flow label the REQ and REP
// negotiate against the RC traffic that follows them in the capture.
func TestRpingQPAttributes(t *testing.T) {
	x := loadRping(t)
	req, rep := mad.REQ(x.req), mad.REP(x.rep)
	toClient := x.firstRequest(t, &x.mads[1].frame) // the REP goes to the client
	toServer := x.firstRequest(t, &x.mads[0].frame)
	assert.Equal(t, req.LocalQPN(), toClient.pkt.BTH.DestQPN())
	assert.Equal(t, rep.LocalQPN(), toServer.pkt.BTH.DestQPN())
	// Each side's starting PSN is the one its receive queue expects.
	assert.Equal(t, req.StartingPSN(), uint32(toClient.pkt.BTH.PSN()))
	assert.Equal(t, rep.StartingPSN(), uint32(toServer.pkt.BTH.PSN()))
	assert.Equal(t, rep.LocalQPN(), mad.DREQ(x.dreq).RemoteQPN(), "the client's DREQ names the server's QP")
	// Both sides derive the RC frames' UDP source port from the REQ's flow label.
	fl := req.PrimaryPath().FlowLabel()
	assert.Equal(t, uint32(0xc675e), fl)
	assert.Equal(t, roce.UDPSourcePort(fl, 0, 0), toServer.frame.SrcPort)
	assert.Equal(t, roce.UDPSourcePort(fl, 0, 0), toClient.frame.SrcPort)
}

func TestRpingREP(t *testing.T) {
	x := loadRping(t)
	r, f := mad.REP(x.rep), &x.mads[1].frame
	assert.Zero(t, r.LocalQKey())
	assert.Equal(t, guidOf(f.SrcMAC), r.LocalCAGUID())
	assert.Equal(t, uint8(1), r.ResponderResources())
	assert.Equal(t, uint8(1), r.InitiatorDepth())
	assert.Equal(t, uint8(15), r.TargetACKDelay())
	assert.Zero(t, r.FailoverAccepted())
	assert.False(t, r.EndToEndFlowControl())
	assert.Equal(t, uint8(7), r.RNRRetryCount())
	assert.False(t, r.SRQ())
	assert.Equal(t, make([]byte, mad.REPPrivateDataLen), r.PrivateData())
}
