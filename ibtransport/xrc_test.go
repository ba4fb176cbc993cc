package ibtransport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// testSRQ is a shared receive queue for the engine's tests.
type testSRQ struct {
	rq       RecvQueue
	consumed int
}

func (s *testSRQ) RecvQueue() *RecvQueue { return &s.rq }
func (s *testSRQ) Consumed()             { s.consumed++ }

// fuzzXRCDomain is the fuzz target's XRC target's domain.
const fuzzXRCDomain = 7

// newXRCTarget makes an XRC target QP in RTS on e, in domain
// fuzzXRCDomain, and two XRC SRQs with four receives of 500 bytes each in
// mr: one of its domain, one of another.
func newXRCTarget(t testing.TB, e *Engine, mem Memory, cq CompletionQueue, mr *testRegion) (q *QP, mine, other *XRCSRQ) {
	q, err := e.CreateQP(&QPConfig{Type: ibv.QPTypeXRCRecv, XRCDomain: fuzzXRCDomain})
	require.NoError(t, err)
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSInit, Port: 1, AccessFlags: ibv.AccessRemoteWrite | ibv.AccessRemoteRead |
		ibv.AccessRemoteAtomic}, ibv.QPAttrState|ibv.QPAttrPKeyIndex|ibv.QPAttrPort|ibv.QPAttrAccessFlags))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTR, PathMTU: ibv.MTU256, DestQPN: peerQPN, RQPSN: 100, MaxDestRdAtomic: 2,
		AV: ibv.AddressVector{DGID: peerGID}}, ibv.QPAttrState|ibv.QPAttrAV|ibv.QPAttrPathMTU|ibv.QPAttrDestQPN|ibv.QPAttrRQPSN|
		ibv.QPAttrMaxDestRdAtomic|ibv.QPAttrMinRNRTimer))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTS, SQPSN: 500, Timeout: 14}, ibv.QPAttrState|ibv.QPAttrSQPSN|ibv.QPAttrTimeout))
	srq := func(domain uint32, first uint64) *XRCSRQ {
		s := &testSRQ{}
		s.rq.Init(4, 1)
		for i := range 4 {
			require.NoError(t, s.rq.Post(&ibv.RecvWR{ID: first + uint64(i), SGL: []ibv.SGE{mr.SGE(i*500, 500)}}))
		}
		x := &XRCSRQ{Domain: domain, SRQ: s, CQ: cq, Memory: mem}
		require.NoError(t, e.g.AddXRCSRQ(x))
		return x
	}
	return q, srq(fuzzXRCDomain, 30), srq(fuzzXRCDomain+1, 40)
}

// TestXRCTarget delivers an XRC SEND into the SRQ its XRCETH names, with
// the SRQ's CQ, and NAKs one naming another domain's SRQ (invalid
// request), which takes the target to ERR; an RC SEND to the target and
// an XRC ACK to it are of the wrong service.
func TestXRCTarget(t *testing.T) {
	ft := newFuzzTarget(t)
	ft.port.keep = true
	info := &RecvInfo{SGID: peerGID}
	send := func(psn header.PSN, srqn uint32) {
		ft.e.Receive(ft.packetTo(ft.xrc, header.XRCOpcodeBase|header.OpRCSendOnly, psn, 100, func(p *header.Packet) {
			p.XRCETH.SetSRQN(srqn)
		}), info)
		ft.e.Process()
	}
	n := len(ft.cq.wcs)
	send(100, ft.xrcMine.Num())
	require.Len(t, ft.cq.wcs, n+1)
	wc := ft.cq.wcs[n]
	require.Equal(t, ibv.WCSuccess, wc.Status)
	require.Equal(t, uint64(30), wc.WRID, "the first receive of the SRQ named")
	require.Equal(t, ft.xrc.QPN(), wc.QPN)
	require.Equal(t, uint32(100), wc.ByteLen)
	ack := ft.port.sent[len(ft.port.sent)-1]
	require.Equal(t, header.XRCOpcodeBase|header.OpRCAcknowledge, header.Opcode(ack[0]), "an XRC ACK")

	ft.e.Receive(ft.packetTo(ft.xrc, header.OpRCSendOnly, 101, 10, nil), info)
	ft.e.Receive(ft.packetTo(ft.xrc, header.XRCOpcodeBase|header.OpRCAcknowledge, 101, 0, nil), info)
	require.Equal(t, uint64(2), ft.e.Ctr.RxWrongService.Load())

	send(101, ft.xrcOther.Num())
	require.Equal(t, uint64(1), ft.e.Ctr.RxXRCDomainErr.Load())
	require.Len(t, ft.cq.wcs, n+1, "no receive taken")
	nak := ft.port.sent[len(ft.port.sent)-1]
	var p header.Packet
	require.NoError(t, header.ParsePacket(nak, &p))
	require.Equal(t, header.NAKSyndrome(header.NAKInvalidRequest), p.AETH.Syndrome())
	require.Equal(t, ibv.QPSErr, ft.xrc.State())
	require.Equal(t, 4, ft.xrcOther.SRQ.RecvQueue().Len())
}
