package ibtransport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// TestSegmentedRead checks that a READ of more than the QP's window of
// response packets goes out as several READ requests, each up to the next
// multiple of the window, paced by the window, and that the responses
// of each (FIRST..LAST) complete the work request.
func TestSegmentedRead(t *testing.T) {
	port := &fakePort{keep: true}
	e := NewEngine(port, func() {})
	e.Exit()
	const mtu = 256
	readSegmentPSNs := int(windowFor(mtu))
	pkts := 2*readSegmentPSNs + 44
	mr := newTestRegion(make([]byte, pkts*mtu), 0x77, ibv.AccessAll)
	cq := &testCQ{}
	q, err := e.CreateQP(&QPConfig{Memory: &testMemory{mr}, SendCQ: cq, RecvCQ: cq, Cap: ibv.QPCap{MaxSendWR: 4, MaxRecvWR: 1}})
	require.NoError(t, err)
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSInit}, ibv.QPAttrState))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTR, PathMTU: ibv.MTU256, DestQPN: peerQPN, AV: ibv.AddressVector{DGID: peerGID}},
		ibv.QPAttrState|ibv.QPAttrAV|ibv.QPAttrPathMTU|ibv.QPAttrDestQPN|ibv.QPAttrRQPSN|ibv.QPAttrMaxDestRdAtomic|ibv.QPAttrMinRNRTimer))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTS, SQPSN: 100, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		ibv.QPAttrState|ibv.QPAttrSQPSN|ibv.QPAttrTimeout|ibv.QPAttrRetryCnt|ibv.QPAttrRNRRetry|ibv.QPAttrMaxQPRdAtomic))
	require.NoError(t, q.PostSend(&ibv.SendWR{ID: 7, Opcode: ibv.WRRDMARead, Flags: ibv.SendSignaled, SGL: []ibv.SGE{mr.SGE(0, pkts*mtu)},
		RemoteAddr: 0x100000, RKey: 1}))
	var p header.Packet
	request := func() (header.PSN, uint64, uint32) {
		t.Helper()
		require.Len(t, port.sent, 1)
		require.NoError(t, header.ParsePacket(port.sent[0], &p))
		require.Equal(t, header.OpRCReadRequest, p.BTH.Opcode())
		port.sent = nil
		return p.BTH.PSN(), p.RETH.VA(), p.RETH.DMALength()
	}
	respond := func(psn header.PSN, pos int, n int) {
		ops := [...]header.Opcode{header.OpRCReadResponseFirst, header.OpRCReadResponseMiddle, header.OpRCReadResponseLast, header.OpRCReadResponseOnly}
		b := make([]byte, 512)
		var r header.Packet
		l, err := header.LayoutPacket(b, ops[pos], mtu, &r)
		require.NoError(t, err)
		r.BTH.SetDestQPN(q.QPN())
		r.BTH.SetPSN(psn)
		if r.AETH != nil {
			r.AETH.SetSyndrome(header.ACKSyndrome(header.UnlimitedCredits))
		}
		for i := range r.Payload {
			r.Payload[i] = byte(n)
		}
		e.Receive(b[:l], &RecvInfo{SGID: peerGID})
	}
	e.Process()
	next := header.PSN(100)
	for seg := 0; seg < 3; seg++ {
		psn, va, dmaLen := request()
		segPkts := min(readSegmentPSNs, pkts-seg*readSegmentPSNs)
		require.Equal(t, next, psn)
		require.Equal(t, uint64(0x100000+seg*readSegmentPSNs*mtu), va)
		require.Equal(t, uint32(segPkts*mtu), dmaLen)
		for i := range segPkts {
			pos := 1
			switch {
			case i == 0:
				pos = 0
			case i == segPkts-1:
				pos = 2
			}
			respond(psn.Add(uint32(i)), pos, seg*readSegmentPSNs+i)
			if i == 0 && seg < 2 {
				// One response in, the window lets the next segment go.
				e.Process()
				require.Len(t, port.sent, 1)
			}
		}
		next = psn.Add(uint32(segPkts))
	}
	require.Empty(t, port.sent)
	require.Zero(t, e.Ctr.RxBadResponse.Load())
	require.Len(t, cq.wcs, 1)
	require.Equal(t, ibv.WC{WRID: 7, Status: ibv.WCSuccess, Opcode: ibv.WCRDMARead, ByteLen: uint32(pkts * mtu), QPN: q.QPN(), SrcQP: peerQPN}, cq.wcs[0])
	for i := range pkts {
		require.Equal(t, byte(i), mr.buf[i*mtu], "packet %d", i)
	}
}
