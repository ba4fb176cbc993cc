package cm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// padded returns p followed by zeros up to n bytes: a private data field.
func padded(p []byte, n int) []byte {
	return append(append([]byte(nil), p...), make([]byte, n-len(p))...)
}

// TestFullExchange runs REQ, REP, RTU, DREQ, DREP and checks every field of
// every message and event.
func TestFullExchange(t *testing.T) {
	p := newPair(t)
	rp := p.reqParams()
	active := p.connect(t)
	assert.Equal(t, StateREQSent, active.State())

	ev := expect(t, p.bEv, EventREQReceived)
	passive := ev.Conn
	req := mad.REQ(p.w.sentBy(0, mad.AttrREQ)[0])
	checkREQ(t, req, active.LocalID(), &rp)
	assert.Equal(t, p.l, ev.Listener)
	assert.Equal(t, StateREQRcvd, passive.State())
	assert.Equal(t, active.LocalID(), passive.RemoteID())
	assert.Equal(t, uint64(testSvcID), ev.ServiceID)
	assert.Equal(t, uint32(0x11), ev.RemoteQPN)
	assert.Equal(t, uint32(0xabcdef), ev.StartingPSN)
	assert.Equal(t, uint8(1), ev.ResponderResources)
	assert.Equal(t, uint8(2), ev.InitiatorDepth)
	assert.Equal(t, ibv.MTU1024, ev.PathMTU)
	assert.Equal(t, uint8(7), ev.RetryCount)
	assert.Equal(t, uint8(6), ev.RNRRetryCount)
	assert.Equal(t, uint8(mad.TransportRC), ev.Transport)
	assert.Equal(t, uint64(guidA), ev.RemoteCAGUID)
	assert.Equal(t, p.w.gids[0], ev.PeerGID)
	assert.Equal(t, p.w.gids[1], ev.LocalGID)
	assert.Equal(t, p.w.gids[0], ev.Peer.DGID)
	assert.Equal(t, uint32(0xc675e), ev.FlowLabel)
	assert.Equal(t, uint8(0x20), ev.TrafficClass)
	assert.Equal(t, uint8(64), ev.HopLimit)
	assert.Equal(t, uint8(19), ev.LocalACKTimeout)
	assert.Equal(t, uint8(20), ev.LocalCMResponseTimeout)
	assert.Equal(t, uint8(20), ev.RemoteCMResponseTimeout)
	assert.Equal(t, uint8(15), ev.MaxCMRetries)
	assert.Equal(t, uint16(0xffff), ev.PKey)
	assert.Equal(t, padded(rp.PrivateData, mad.REQPrivateDataLen), ev.PrivateData)

	require.NoError(t, passive.Accept(repParams()))
	assert.Equal(t, StateREPSent, passive.State())
	ev = expect(t, p.aEv, EventREPReceived)
	rep := mad.REP(p.w.sentBy(1, mad.AttrREP)[0])
	checkREP(t, rep, req, passive.LocalID())
	assert.Equal(t, StateREPRcvd, active.State())
	assert.Equal(t, passive.LocalID(), active.RemoteID())
	assert.Equal(t, uint32(0x12), ev.RemoteQPN)
	assert.Equal(t, uint32(0x123456), ev.StartingPSN)
	assert.Equal(t, uint8(2), ev.ResponderResources)
	assert.Equal(t, uint8(1), ev.InitiatorDepth)
	assert.Equal(t, uint8(5), ev.RNRRetryCount)
	assert.Equal(t, uint8(DefaultACKDelay), ev.TargetACKDelay)
	assert.Equal(t, uint64(guidB), ev.RemoteCAGUID)
	assert.Equal(t, padded([]byte("accepted"), mad.REPPrivateDataLen), ev.PrivateData)

	require.NoError(t, active.ReadyToUse([]byte("rtu")))
	assert.Equal(t, StateEstablished, active.State())
	ev = expect(t, p.bEv, EventRTUReceived)
	assert.Equal(t, passive, ev.Conn)
	assert.Equal(t, StateEstablished, passive.State())
	rtu := mad.RTU(p.w.sentBy(0, mad.AttrRTU)[0])
	assert.Equal(t, req.LocalCommID(), rtu.LocalCommID())
	assert.Equal(t, rep.LocalCommID(), rtu.RemoteCommID())
	assert.Equal(t, mad.MAD(req).Header().TID(), mad.MAD(rtu).Header().TID())
	assert.Equal(t, padded([]byte("rtu"), mad.RTUPrivateDataLen), rtu.PrivateData())

	require.NoError(t, active.Disconnect([]byte("bye")))
	assert.Contains(t, []State{StateDREQSent, StateTimewait}, active.State(), "TIMEWAIT if the DREP was quick")
	ev = expect(t, p.bEv, EventDREQReceived)
	assert.Equal(t, padded([]byte("bye"), mad.DREQPrivateDataLen), ev.PrivateData)
	dreq := mad.DREQ(p.w.sentBy(0, mad.AttrDREQ)[0])
	assert.Equal(t, active.LocalID(), dreq.LocalCommID())
	assert.Equal(t, passive.LocalID(), dreq.RemoteCommID())
	assert.Equal(t, uint32(0x12), dreq.RemoteQPN())
	ev = expect(t, p.aEv, EventDisconnected)
	assert.False(t, ev.TimedOut)
	drep := mad.DREP(p.w.sentBy(1, mad.AttrDREP)[0])
	assert.Equal(t, passive.LocalID(), drep.LocalCommID())
	assert.Equal(t, active.LocalID(), drep.RemoteCommID())
	assert.Equal(t, mad.MAD(dreq).Header().TID(), mad.MAD(drep).Header().TID())
	assert.Equal(t, StateTimewait, active.State())
	assert.Equal(t, StateTimewait, passive.State())

	expect(t, p.aEv, EventTimewaitExit)
	expect(t, p.bEv, EventTimewaitExit)
	assert.Equal(t, StateIdle, active.State())
	waitEmpty(t, p.a)
	waitEmpty(t, p.b)
	assert.Equal(t, uint64(1), p.a.Counters().Out.REQ.Load())
	assert.Equal(t, uint64(1), p.b.Counters().In.REQ.Load())
	assert.Equal(t, uint64(1), p.b.Counters().Out.REP.Load())
	assert.Equal(t, uint64(1), p.b.Counters().Out.DREP.Load())
	assert.Zero(t, p.a.Counters().Retransmissions.Load())
	assert.Zero(t, p.b.Counters().Retransmissions.Load())
}

// checkREQ checks every field of a REQ built from rp.
func checkREQ(t *testing.T, r mad.REQ, localID uint32, rp *REQParams) {
	t.Helper()
	h := mad.MAD(r).Header()
	assert.Equal(t, uint8(mad.BaseVersion), h.BaseVersion())
	assert.Equal(t, uint8(mad.ClassCM), h.MgmtClass())
	assert.Equal(t, uint8(mad.CMClassVersion), h.ClassVersion())
	assert.Equal(t, uint8(mad.MethodSend), h.Method())
	assert.Equal(t, localID, uint32(h.TID()), "cm.c puts the local ID in the TID's low half")
	assert.Equal(t, localID, r.LocalCommID())
	assert.Equal(t, rp.ServiceID, r.ServiceID())
	assert.Equal(t, uint64(guidA), r.LocalCAGUID())
	assert.Zero(t, r.LocalQKey())
	assert.Equal(t, rp.LocalQPN, r.LocalQPN())
	assert.Equal(t, rp.ResponderResources, r.ResponderResources())
	assert.Equal(t, rp.InitiatorDepth, r.InitiatorDepth())
	assert.Equal(t, uint8(20), r.RemoteCMResponseTimeout())
	assert.Equal(t, uint8(20), r.LocalCMResponseTimeout())
	assert.Equal(t, rp.Transport, r.TransportServiceType())
	assert.False(t, r.EndToEndFlowControl())
	assert.Equal(t, rp.StartingPSN, r.StartingPSN())
	assert.Equal(t, rp.RetryCount, r.RetryCount())
	assert.Equal(t, uint16(0xffff), r.PKey())
	assert.Equal(t, rp.PathMTU, r.PathMTU())
	assert.False(t, r.RDCExists())
	assert.Equal(t, rp.RNRRetryCount, r.RNRRetryCount())
	assert.Equal(t, uint8(15), r.MaxCMRetries())
	assert.Equal(t, rp.SRQ, r.SRQ())
	assert.Zero(t, r.ExtendedTransportType())
	path := r.PrimaryPath()
	assert.Equal(t, uint16(0xffff), path.LocalLID())
	assert.Equal(t, uint16(0xffff), path.RemoteLID())
	assert.Equal(t, rp.LocalGID, path.LocalGID())
	assert.Equal(t, rp.PeerGID, path.RemoteGID())
	assert.Equal(t, rp.FlowLabel, path.FlowLabel())
	assert.Equal(t, rp.TrafficClass, path.TrafficClass())
	assert.Equal(t, rp.HopLimit, path.HopLimit())
	assert.Zero(t, path.SL())
	assert.False(t, path.SubnetLocal())
	assert.Equal(t, uint8(19), path.LocalACKTimeout())
	assert.Equal(t, make([]byte, mad.PathLen), []byte(r.AlternatePath()))
	assert.Equal(t, padded(rp.PrivateData, mad.REQPrivateDataLen), r.PrivateData())
}

// checkREP checks every field of the REP repParams makes, answering req.
func checkREP(t *testing.T, r mad.REP, req mad.REQ, localID uint32) {
	t.Helper()
	assert.Equal(t, mad.MAD(req).Header().TID(), mad.MAD(r).Header().TID())
	assert.Equal(t, localID, r.LocalCommID())
	assert.Equal(t, req.LocalCommID(), r.RemoteCommID())
	assert.Zero(t, r.LocalQKey())
	assert.Equal(t, uint32(0x12), r.LocalQPN())
	assert.Equal(t, uint32(0x123456), r.StartingPSN())
	assert.Equal(t, uint8(2), r.ResponderResources())
	assert.Equal(t, uint8(1), r.InitiatorDepth())
	assert.Equal(t, uint8(15), r.TargetACKDelay())
	assert.Zero(t, r.FailoverAccepted())
	assert.False(t, r.EndToEndFlowControl())
	assert.Equal(t, uint8(5), r.RNRRetryCount())
	assert.False(t, r.SRQ())
	assert.Equal(t, uint64(guidB), r.LocalCAGUID())
	assert.Equal(t, padded([]byte("accepted"), mad.REPPrivateDataLen), r.PrivateData())
}

// TestTimeoutDefaults checks the waits against cm.c's arithmetic with
// Linux's values: REQ 2×2^(18-8) + 2^(20-8) ms, REP 2^(20-8) ms,
// TIMEWAIT 2^(19-8) ms.
func TestTimeoutDefaults(t *testing.T) {
	m := New(Config{Send: func(ibv.AddressVector, mad.MAD) error { return nil }})
	defer m.Close()
	c, err := m.Connect(REQParams{Transport: mad.TransportRC, PathMTU: ibv.MTU1024}, nil)
	require.NoError(t, err)
	m.mu.Lock()
	assert.Equal(t, 6144*time.Millisecond, c.timeout)
	assert.Equal(t, uint8(15), c.maxRetries)
	assert.Equal(t, 2048*time.Millisecond, m.convert(c.pathTime))
	m.mu.Unlock()
	assert.Equal(t, uint8(19), ackTimeout(15, 18))
	assert.Equal(t, uint8(16), ackTimeout(15, 14), "no shorter than the ACK delay, plus one when close")
	assert.Equal(t, uint8(15), ackTimeout(15, 10))
	assert.Equal(t, uint8(31), ackTimeout(15, 31))
}
