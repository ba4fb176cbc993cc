package ibtransport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
)

// TestGroupPlacesConnections checks that connecting a QP moves it to the
// engine EngineFor picks for its pair of QP numbers, that it then sends through
// that engine's port and counts in that engine's device window from its
// first message (a moved QP left out of the window overran the peer's
// receive ring), and that a response arriving at the other engine is
// forwarded to it.
func TestGroupPlacesConnections(t *testing.T) {
	ports := []*fakePort{{keep: true}, {keep: true}}
	g := NewGroup([]Port{ports[0], ports[1]}, []func(){func() {}, func() {}})
	for _, e := range g.Engines() {
		e.Exit() // the test drives Process itself
	}
	_, _, mr, cq := newWindowTestEngine()
	const nQP, perQP, msgLen = 64, 16, 4096 // 16 packets of IB MTU 256 per message
	byPeer := map[uint32]*QP{}
	perEngine := [2]int{}
	for i := range nQP {
		dest := 0x5000 + uint32(i)
		q := windowTestQP(t, g.Engines()[0], mr, cq, dest, perQP, msgLen)
		require.Equal(t, EngineFor(q.QPN(), dest, 2), q.EngineIndex())
		require.Equal(t, EngineFor(dest, q.QPN(), 2), q.EngineIndex(), "EngineFor depends on the order of the QPNs")
		byPeer[dest] = q
		perEngine[q.EngineIndex()]++
	}
	require.NotZero(t, perEngine[0])
	require.NotZero(t, perEngine[1])

	var p header.Packet
	last := map[*QP]header.PSN{}
	for k, e := range g.Engines() {
		for busy := true; busy; {
			busy, _ = e.Process()
		}
		require.NotEmpty(t, ports[k].sent, "engine %d sent nothing", k)
		require.Equal(t, len(ports[k].sent), e.unacked, "engine %d: what it sent is what its window counts", k)
		require.LessOrEqual(t, e.unacked, maxDeviceUnacked+msgLen/256-1)
		for _, raw := range ports[k].sent {
			require.NoError(t, header.ParsePacket(raw, &p))
			q := byPeer[p.BTH.DestQPN()]
			require.Equal(t, k, q.EngineIndex(), "engine %d sent a packet of another engine's QP", k)
			last[q] = p.BTH.PSN()
		}
	}
	// Every ACK arrives at engine 0, as from a peer that sends on one
	// queue: engine 1's are forwarded and reopen engine 1's window.
	acked := [2]int{}
	for q, psn := range last {
		receiveACK(t, g.Engines()[0], q, psn)
		acked[q.EngineIndex()]++
	}
	require.NotZero(t, acked[1])
	require.Equal(t, uint64(acked[1]), g.Engines()[0].Ctr.Forwarded.Load())
	require.Zero(t, g.Engines()[0].unacked)
	require.NotZero(t, g.Engines()[1].unacked, "forwarded, not yet received")
	ports[1].sent = nil
	g.Engines()[1].Process()
	// The ACKs emptied engine 1's window, and the pass sent new messages
	// in it.
	require.Equal(t, len(ports[1].sent), g.Engines()[1].unacked)
	require.Equal(t, uint64(acked[1]), g.Counters().Forwarded.Load())
}

// TestEngineForSpreads checks that EngineFor spreads consecutive QP numbers, as
// perftest's QPs on both sides have, evenly over the engines.
func TestEngineForSpreads(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		count := make([]int, n)
		for i := range uint32(1024) {
			count[EngineFor(0x1234+i, 0x8800+i, n)]++
		}
		for k, c := range count {
			require.InDelta(t, 1024/n, c, float64(1024/n)/4, "engine %d of %d: %v", k, n, count)
		}
	}
	require.Zero(t, EngineFor(5, 7, 1))
}

// TestFollowKeepsOrder checks that a QP moving to the engine its packets
// arrive at first receives what that engine already handed over to it:
// a request forwarded before the move is not overtaken by the next one,
// which the new engine receives itself.
func TestFollowKeepsOrder(t *testing.T) {
	ports := []*fakePort{{keep: true}, {keep: true}}
	g := NewGroup([]Port{ports[0], ports[1]}, []func(){func() {}, func() {}})
	for _, e := range g.Engines() {
		e.Exit() // the test drives the engines itself
	}
	_, _, mr, cq := newWindowTestEngine()
	var q *QP
	for dest := uint32(0x5000); q == nil || q.EngineIndex() != 1; dest++ {
		q = windowTestQP(t, g.Engines()[0], mr, cq, dest, 1, 8)
	}
	e0, e1 := g.Engines()[0], g.Engines()[1]
	write := func(psn header.PSN) {
		receiveFromPeer(t, e0, q, header.OpRCWriteOnly, psn, 8, func(p *header.Packet) {
			p.RETH.SetVA(mr.Addr() + 8*uint64(psn))
			p.RETH.SetRKey(mr.RKey())
			p.RETH.SetDMALength(8)
		})
	}
	write(0) // arrives at engine 0: handed over to engine 1
	require.Equal(t, uint64(1), e0.Ctr.Forwarded.Load())
	g.follow(q, e0)
	require.Equal(t, 0, q.EngineIndex())
	write(1) // now engine 0's own
	e0.Process()
	e1.Process()
	require.Zero(t, e0.Ctr.RxOutOfSeq.Load()+e1.Ctr.RxOutOfSeq.Load(), "the request after the move overtook the one before")
	require.Equal(t, header.PSN(2), q.resp.ePSN)
	require.Equal(t, uint64(1), e0.Ctr.Followed.Load())
	require.Equal(t, uint64(1), e0.Ctr.Forwarded.Load(), "handed over after the move")
}
