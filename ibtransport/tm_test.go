package ibtransport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// fakeTMSRQ is a TM SRQ whose list holds any number of tagged buffers of
// tags whose low byte is 0x5a, each the same buffer.
type fakeTMSRQ struct {
	rq         RecvQueue
	buf        ibv.SGE
	cq         CompletionQueue
	unexpected int
}

func (s *fakeTMSRQ) RecvQueue() *RecvQueue { return &s.rq }
func (s *fakeTMSRQ) Consumed()             {}
func (s *fakeTMSRQ) Unexpected()           { s.unexpected++ }
func (s *fakeTMSRQ) CQ() CompletionQueue   { return s.cq }
func (s *fakeTMSRQ) MatchTag(tag uint64) (uint64, []ibv.SGE, bool) {
	if tag&0xff != 0x5a {
		return 0, nil, false
	}
	return tag, []ibv.SGE{s.buf}, true
}

// newTMTarget makes an RC QP in RTS on e on a fake TM SRQ with four
// ordinary receives, its tagged buffer in mr.
func newTMTarget(t testing.TB, e *Engine, mem Memory, cq CompletionQueue, mr *testRegion) (*QP, *fakeTMSRQ) {
	srq := &fakeTMSRQ{buf: mr.SGE(3000, 1000), cq: cq}
	srq.rq.Init(8, 1)
	for i := range 4 {
		require.NoError(t, srq.rq.Post(&ibv.RecvWR{ID: uint64(30 + i), SGL: []ibv.SGE{mr.SGE(i*500, 500)}}))
	}
	q, err := e.CreateQP(&QPConfig{Memory: mem, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: ibv.QPCap{MaxSendWR: 0}})
	require.NoError(t, err)
	tmToRTS(t, q)
	return q, srq
}

// tmToRTS moves the TM target's QP from RESET to RTS.
func tmToRTS(t testing.TB, q *QP) {
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSInit, AccessFlags: ibv.AccessRemoteWrite}, ibv.QPAttrState|ibv.QPAttrAccessFlags))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTR, PathMTU: ibv.MTU256, DestQPN: peerQPN, RQPSN: 100, MaxDestRdAtomic: 2,
		AV: ibv.AddressVector{DGID: peerGID}}, ibv.QPAttrState|ibv.QPAttrAV|ibv.QPAttrPathMTU|ibv.QPAttrDestQPN|ibv.QPAttrRQPSN|
		ibv.QPAttrMaxDestRdAtomic|ibv.QPAttrMinRNRTimer))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTS, SQPSN: 500, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 2},
		ibv.QPAttrState|ibv.QPAttrSQPSN|ibv.QPAttrTimeout|ibv.QPAttrRetryCnt|ibv.QPAttrRNRRetry|ibv.QPAttrMaxQPRdAtomic))
}

// A QP of a TM SRQ moved to RESET and back still matches tags.
func TestTMAfterReset(t *testing.T) {
	ft := newFuzzTarget(t)
	require.NoError(t, ft.tm.Modify(&ibv.QPAttr{State: ibv.QPSReset}, ibv.QPAttrState))
	tmToRTS(t, ft.tm)
	ip4 := make([]byte, 20)
	ip4[0] = 0x45
	pkt := ft.tmSend(header.TMEager, 0x25a, 100)
	header.BTH(pkt).SetDestQPN(ft.tm.QPN())
	ft.cq.wcs = nil
	ft.e.Receive(pkt, &RecvInfo{SGID: peerGID, NetHeader: ip4})
	ft.e.Process()
	require.Len(t, ft.cq.wcs, 1)
	require.Equal(t, ibv.WCTMRecv, ft.cq.wcs[0].Opcode)
	require.Equal(t, ibv.WCTMMatch|ibv.WCTMDataValid, ft.cq.wcs[0].Flags)
	require.EqualValues(t, 84, ft.cq.wcs[0].ByteLen)
}

// tmSend is a SEND ONLY of n bytes to the fuzz target's TM QP, its payload
// starting with a TM header of op and tag (and an RVH for RNDV).
func (ft *fuzzTarget) tmSend(op header.TMOpcode, tag uint64, n int) []byte {
	pkt := ft.packet(header.OpRCSendOnly, 100, n, func(p *header.Packet) {
		if n >= header.TMHLen {
			h := header.TMH(p.Payload)
			h.SetOpcode(op)
			h.SetTag(tag)
		}
		if n >= header.TMHLen+header.RVHLen {
			r := header.RVHOf(p.Payload)
			r.SetVA(0x1000)
			r.SetRKey(7)
			r.SetLength(600)
		}
	})
	pkt[4] |= 0x10 // routes it to the TM QP (FuzzEngineReceive)
	return pkt
}

// A matched rendezvous request: the TM QP sends its READ, then (fenced)
// the FIN once the READ's response came, and completes MATCH then
// DATA_VALID.
func TestTMRndvPackets(t *testing.T) {
	ft := newFuzzTarget(t)
	ft.port.keep = true
	ip4 := make([]byte, 20)
	ip4[0] = 0x45
	info := &RecvInfo{SGID: peerGID, NetHeader: ip4}
	pkt := ft.tmSend(header.TMRndv, 0x105a, 64)
	header.BTH(pkt).SetDestQPN(ft.tm.QPN())
	ft.cq.wcs = nil
	ft.e.Receive(pkt, info)
	ft.e.Process()
	require.Len(t, ft.cq.wcs, 1)
	require.Equal(t, ibv.WCTMMatch, ft.cq.wcs[0].Flags)
	var read *header.Packet
	for _, b := range ft.port.sent {
		p := new(header.Packet)
		require.NoError(t, header.ParsePacket(b, p))
		require.NotEqual(t, header.OpRCSendOnly, p.BTH.Opcode(), "no FIN before the READ's response")
		if p.BTH.Opcode() == header.OpRCReadRequest {
			read = p
		}
	}
	require.NotNil(t, read, "the READ went out")
	require.EqualValues(t, 0x1000, read.RETH.VA())
	require.EqualValues(t, 7, read.RETH.RKey())
	require.EqualValues(t, 600, read.RETH.DMALength())
	// The sender's responses: READ RESPONSE FIRST, MIDDLE, LAST (256 MTU).
	psn := read.BTH.PSN()
	for i, op := range []header.Opcode{header.OpRCReadResponseFirst, header.OpRCReadResponseMiddle, header.OpRCReadResponseLast} {
		n := 256
		if i == 2 {
			n = 600 - 512
		}
		resp := ft.packet(op, psn.Add(uint32(i)), n, nil)
		header.BTH(resp).SetDestQPN(ft.tm.QPN())
		ft.e.Receive(resp, info)
		ft.e.Process()
	}
	require.Len(t, ft.cq.wcs, 2, "%+v", ft.cq.wcs)
	wc := ft.cq.wcs[1]
	require.Equal(t, ibv.WCSuccess, wc.Status)
	require.Equal(t, ibv.WCTMDataValid, wc.Flags)
	require.EqualValues(t, 600, wc.ByteLen)
	require.EqualValues(t, 0x105a, wc.WRID)
	fin := ft.port.sent[len(ft.port.sent)-1]
	p := new(header.Packet)
	require.NoError(t, header.ParsePacket(fin, p))
	require.Equal(t, header.OpRCSendOnly, p.BTH.Opcode())
	require.Len(t, p.Payload, 32)
	require.Equal(t, header.TMFin, header.TMH(p.Payload).Opcode())
	require.EqualValues(t, 0x105a, header.TMH(p.Payload).Tag())
}
