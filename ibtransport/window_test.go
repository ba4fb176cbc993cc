package ibtransport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// TestDeviceWindow checks the device-wide window over many QPs: no QP
// starts a message while the PSNs of started, unacknowledged messages reach
// maxDeviceUnacked, messages started go on, ACKs reopen the window, and the
// window's count returns to zero when everything is acknowledged or the QPs
// go away.
func TestDeviceWindow(t *testing.T) {
	port, e, mr, cq := newWindowTestEngine()
	const nQP, perQP, msgLen = 16, 64, 1024 // 4 packets of IB MTU 256 per message
	qps := make([]*QP, nQP)
	byPeer := map[uint32]*QP{}
	for i := range qps {
		q := windowTestQP(t, e, mr, cq, 0x1000+uint32(i), perQP, msgLen)
		qps[i] = q
		byPeer[0x1000+uint32(i)] = q
	}
	ack := func(q *QP, psn header.PSN) { receiveACK(t, e, q, psn) }
	total := 0
	for round := 0; total < nQP*perQP*msgLen/256; round++ {
		require.Less(t, round, 1000, "no progress")
		port.sent = nil
		for busy := true; busy; {
			busy, _ = e.Process()
		}
		require.NotEmpty(t, port.sent)
		// What is unacknowledged now: everything just sent.
		require.LessOrEqual(t, len(port.sent), maxDeviceUnacked+msgLen/256-1)
		require.Equal(t, len(port.sent), e.unacked)
		last := map[*QP]header.PSN{}
		var p header.Packet
		for _, raw := range port.sent {
			require.NoError(t, header.ParsePacket(raw, &p))
			last[byPeer[p.BTH.DestQPN()]] = p.BTH.PSN()
		}
		total += len(port.sent)
		for q, psn := range last {
			ack(q, psn)
		}
		require.Zero(t, e.unacked)
	}
	require.Positive(t, e.Ctr.TxWindowStalls.Load())
	require.Zero(t, e.Ctr.Retransmits.Load())
	var wcs [nQP * perQP]ibv.WC
	n, err := cq.Poll(wcs[:])
	require.NoError(t, err)
	require.Equal(t, nQP*perQP, n)
	for _, wc := range wcs[:n] {
		require.Equal(t, ibv.WCSuccess, wc.Status)
	}

	// Messages in flight on QPs that are reset or destroyed leave the window.
	for _, q := range qps {
		require.NoError(t, q.PostSend(&ibv.SendWR{Opcode: ibv.WRRDMAWrite, SGL: []ibv.SGE{mr.SGE(0, msgLen)}, RemoteAddr: 0x10000, RKey: 1}))
	}
	e.Process()
	require.Equal(t, nQP*msgLen/256, e.unacked)
	require.NoError(t, qps[0].Modify(&ibv.QPAttr{State: ibv.QPSErr}, ibv.QPAttrState))
	require.NoError(t, qps[1].Modify(&ibv.QPAttr{State: ibv.QPSReset}, ibv.QPAttrState))
	require.Equal(t, (nQP-2)*msgLen/256, e.unacked)
	for _, q := range qps {
		require.NoError(t, q.Destroy())
	}
	require.Zero(t, e.unacked)
}

// TestQPWindow checks one QP's window: it sends its window of packets and
// no more until an ACK, and each ACK lets out as many packets as it
// acknowledged (up to what is left). Where every hop is slow the window is
// what paces a single QP.
func TestQPWindow(t *testing.T) {
	port, e, mr, cq := newWindowTestEngine()
	const perQP, msgLen = 8, ackReqInterval * 256 // messages of ackReqInterval packets of IB MTU 256
	q := windowTestQP(t, e, mr, cq, 0x1800, perQP, msgLen)
	window := int(q.req.window)
	require.Equal(t, maxUnackedPSNs, window)
	require.Less(t, window, maxDeviceUnacked, "the device window, not the QP's, would decide")
	drain := func() int {
		port.sent = nil
		for busy := true; busy; {
			busy, _ = e.Process()
		}
		return len(port.sent)
	}
	require.Equal(t, window, drain())
	var p header.Packet
	require.NoError(t, header.ParsePacket(port.sent[ackReqInterval-1], &p))
	require.True(t, p.BTH.AckReq())
	first := p.BTH.PSN()
	require.Zero(t, drain(), "sent past the window without an ACK")
	receiveACK(t, e, q, first)
	require.Equal(t, ackReqInterval, drain())
	require.NoError(t, header.ParsePacket(port.sent[ackReqInterval-1], &p))
	receiveACK(t, e, q, p.BTH.PSN())
	require.Equal(t, perQP*ackReqInterval-window-ackReqInterval, drain())
	require.Zero(t, e.Ctr.Retransmits.Load())
}

// TestWindowFor checks the window at each path MTU: 512 KiB of payload,
// between 128 and 256 packets.
func TestWindowFor(t *testing.T) {
	for mtu, want := range map[uint32]int32{256: 256, 512: 256, 1024: 256, 2048: 256, 4096: 128, 0: 128} {
		require.Equal(t, want, windowFor(mtu), "IB MTU %d", mtu)
	}
}

// TestPassBudget checks that one engine pass sends at most passBudget
// packets over all QPs, and that the QPs left waiting when the budget runs
// out go first in the next pass: without that, the QPs first in the list
// would take every pass until their own windows closed.
func TestPassBudget(t *testing.T) {
	port, e, mr, cq := newWindowTestEngine()
	// 8 QPs with 256 packets each to send (16 messages of 16 packets at
	// IB MTU 256); a QP sends at most packetBudget (64) per pass, so a
	// pass serves two QPs.
	const nQP, perQP, msgLen = 8, 16, 4096
	byPeer := map[uint32]int{}
	for i := range nQP {
		windowTestQP(t, e, mr, cq, 0x2000+uint32(i), perQP, msgLen)
		byPeer[0x2000+uint32(i)] = i
	}
	served := make([]int, nQP) // passes in which each QP sent something
	for pass := range nQP / 2 {
		port.sent = nil
		busy, _ := e.Process()
		require.Len(t, port.sent, passBudget, "pass %d", pass)
		require.True(t, busy, "pass %d stopped for the budget with packets left", pass)
		sent := map[int]bool{}
		var p header.Packet
		for _, raw := range port.sent {
			require.NoError(t, header.ParsePacket(raw, &p))
			sent[byPeer[p.BTH.DestQPN()]] = true
		}
		for i := range sent {
			served[i]++
		}
	}
	for i, n := range served {
		require.Equal(t, 1, n, "QP %d: passes with packets sent, of %d", i, nQP/2)
	}
}

// windowTestQP creates an RTS QP towards destQPN with perQP signaled WRITEs
// of msgLen bytes posted.
func windowTestQP(t *testing.T, e *Engine, mr *testRegion, cq *testCQ, destQPN uint32, perQP, msgLen int) *QP {
	t.Helper()
	q, err := e.CreateQP(&QPConfig{Memory: &testMemory{mr}, SendCQ: cq, RecvCQ: cq, Cap: ibv.QPCap{MaxSendWR: perQP, MaxRecvWR: 1}})
	require.NoError(t, err)
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSInit, AccessFlags: ibv.AccessRemoteWrite}, ibv.QPAttrState|ibv.QPAttrAccessFlags))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTR, PathMTU: ibv.MTU256, DestQPN: destQPN, AV: ibv.AddressVector{DGID: peerGID}},
		ibv.QPAttrState|ibv.QPAttrAV|ibv.QPAttrPathMTU|ibv.QPAttrDestQPN|ibv.QPAttrRQPSN|ibv.QPAttrMaxDestRdAtomic|ibv.QPAttrMinRNRTimer))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7},
		ibv.QPAttrState|ibv.QPAttrSQPSN|ibv.QPAttrTimeout|ibv.QPAttrRetryCnt|ibv.QPAttrRNRRetry|ibv.QPAttrMaxQPRdAtomic))
	for j := range perQP {
		require.NoError(t, q.PostSend(&ibv.SendWR{ID: uint64(j), Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
			SGL: []ibv.SGE{mr.SGE(0, msgLen)}, RemoteAddr: 0x10000, RKey: 1}))
	}
	return q
}

// TestWindowWaitParksQPs checks that QPs with a message to start and
// nothing in flight leave the active list while the device window is full,
// and come back first come first as ACKs free it: every QP's messages go
// out within a bounded number of rounds, and a pass visits few QPs.
func TestWindowWaitParksQPs(t *testing.T) {
	port, e, mr, cq := newWindowTestEngine()
	// 64 QPs with 4 messages of 16 packets each: 4096 packets, eight
	// times the device window.
	const nQP, perQP, msgLen = 64, 4, 4096
	byPeer := map[uint32]*QP{}
	index := map[*QP]int{}
	for i := range nQP {
		q := windowTestQP(t, e, mr, cq, 0x3000+uint32(i), perQP, msgLen)
		byPeer[0x3000+uint32(i)] = q
		index[q] = i
	}
	ack := func(q *QP, psn header.PSN) { receiveACK(t, e, q, psn) }
	firstRound := make([]int, nQP) // round in which each QP first sent
	for i := range firstRound {
		firstRound[i] = -1
	}
	total, parked := 0, false
	for round := 0; total < nQP*perQP*msgLen/256; round++ {
		require.Less(t, round, 100, "no progress")
		port.sent = nil
		for busy := true; busy; {
			busy, _ = e.Process()
		}
		if len(e.windowWait) > 0 {
			parked = true
			require.Less(t, len(e.active), nQP, "round %d: QPs waiting for the window stay active", round)
		}
		last := map[*QP]header.PSN{}
		var p header.Packet
		for _, raw := range port.sent {
			require.NoError(t, header.ParsePacket(raw, &p))
			q := byPeer[p.BTH.DestQPN()]
			last[q] = p.BTH.PSN()
			if firstRound[index[q]] < 0 {
				firstRound[index[q]] = round
			}
		}
		total += len(port.sent)
		for q, psn := range last {
			ack(q, psn)
		}
	}
	require.True(t, parked, "no QP ever waited for the window")
	for i, r := range firstRound {
		// 512 packets a round serve 8 QPs' 64 packets: QP i's turn comes
		// by round i/8 (one round of slack).
		require.LessOrEqual(t, r, i/8+1, "QP %d first sent in round %d", i, r)
	}
	var wcs [nQP * perQP]ibv.WC
	n, err := cq.Poll(wcs[:])
	require.NoError(t, err)
	require.Equal(t, nQP*perQP, n)
	require.Empty(t, e.windowWait)
}

// receiveACK hands the engine an ACK for q up to psn from the peer.
func receiveACK(t *testing.T, e *Engine, q *QP, psn header.PSN) {
	t.Helper()
	receiveResponse(t, e, q, header.OpRCAcknowledge, psn, 0)
}

// receiveResponse hands the engine a response packet for q from the peer:
// opcode op, PSN psn, payload bytes of payload, and an ACK syndrome if the
// opcode has an AETH.
func receiveResponse(t *testing.T, e *Engine, q *QP, op header.Opcode, psn header.PSN, payload int) {
	t.Helper()
	receiveFromPeer(t, e, q, op, psn, payload, func(p *header.Packet) {
		if p.AETH != nil {
			p.AETH.SetSyndrome(header.ACKSyndrome(header.UnlimitedCredits))
		}
	})
}

// receiveFromPeer hands the engine a packet for q from the peer: opcode
// op, PSN psn, payload bytes of payload, the rest of its headers set by
// fill.
func receiveFromPeer(t *testing.T, e *Engine, q *QP, op header.Opcode, psn header.PSN, payload int, fill func(p *header.Packet)) {
	t.Helper()
	b := make([]byte, 64+payload)
	var p header.Packet
	n, err := header.LayoutPacket(b, op, payload, &p)
	require.NoError(t, err)
	p.BTH.SetDestQPN(q.QPN())
	p.BTH.SetPSN(psn)
	fill(&p)
	e.Receive(b[:n], &RecvInfo{SGID: peerGID})
}

// newWindowTestEngine returns a stopped engine (driven by the test's own
// Process calls) sending into a port that keeps what it sends, with a
// 64 KiB memory region and a CQ for the window tests' QPs.
func newWindowTestEngine() (*fakePort, *Engine, *testRegion, *testCQ) {
	port := &fakePort{keep: true}
	e := NewEngine(port, func() {})
	e.Exit()
	return port, e, newTestRegion(make([]byte, 1<<16), 0x77, ibv.AccessAll), &testCQ{}
}
