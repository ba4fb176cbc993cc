package ibtransport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// TestReadReplayReplacesResponse: a READ asked again from inside its
// response (the requester lost a packet) cancels what was left of the
// first response; the responder goes on from the PSN asked for, once.
// Before, the rest of the first response went out in full and then the
// replay, and a slow requester that asked again got every stream.
func TestReadReplayReplacesResponse(t *testing.T) {
	const pkts = 1 << 16 / 256
	r := newReadResponder(t, pkts)
	e, read, sentPSNs := r.e, r.read, r.sentPSNs

	read(100, 0)
	e.Process() // one pass: the first packetBudget responses
	first := sentPSNs()
	require.Len(t, first, packetBudget)
	require.Equal(t, header.PSN(100), first[0])
	// Asked again from PSN 110, twice (a requester's timer may fire again
	// before the replay arrives).
	read(110, 10)
	read(110, 10)
	for busy := true; busy; {
		busy, _ = e.Process()
	}
	rest := sentPSNs()
	require.Len(t, rest, pkts-10, "responses after the repeated request")
	for i, psn := range rest {
		require.Equal(t, header.PSN(110+i), psn, "response %d", i)
	}
	require.Equal(t, uint64(2), e.Ctr.RxDuplicate.Load())
}

// TestReadReplayCancelsLaterResponses: a requester that asks again for a
// READ from inside it repeats every later request too, and takes
// responses in PSN order only, so the responses queued for the later
// READs are dropped with the rest of the first: after the repeated
// request, nothing but that READ's rest goes out until the later READ is
// asked again, which its resource answers in full.
func TestReadReplayCancelsLaterResponses(t *testing.T) {
	const pkts = 1 << 15 / 256 // each READ's responses
	r := newReadResponder(t, pkts)
	e, read, sentPSNs := r.e, r.read, r.sentPSNs
	drain := func() {
		for busy := true; busy; {
			busy, _ = e.Process()
		}
	}
	second := header.PSN(100 + pkts)
	read(100, 0)
	read(second, 0)
	e.Process() // one pass: the first packetBudget responses of the first
	require.Len(t, sentPSNs(), packetBudget)

	read(105, 5) // the requester lost PSN 105: it asks again from there
	drain()
	rest := sentPSNs()
	require.Len(t, rest, pkts-5, "responses after the repeated request: the first READ's rest only")
	for i, psn := range rest {
		require.Equal(t, header.PSN(105+i), psn, "response %d", i)
	}
	read(second, 0) // and then repeats the second READ's request
	drain()
	again := sentPSNs()
	require.Len(t, again, pkts, "the second READ, answered again")
	for i, psn := range again {
		require.Equal(t, second.Add(uint32(i)), psn, "response %d", i)
	}
}

// readResponder is an RC QP in RTR at PSN 100 that answers READs of pkts
// 256-byte responses from the test engine's region.
type readResponder struct {
	e    *Engine
	q    *QP
	port *fakePort
	mr   *testRegion
	pkts int
	t    *testing.T
}

func newReadResponder(t *testing.T, pkts int) *readResponder {
	port, e, mr, cq := newWindowTestEngine()
	q, err := e.CreateQP(&QPConfig{Memory: &testMemory{mr}, SendCQ: cq, RecvCQ: cq, Cap: ibv.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	require.NoError(t, err)
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSInit, AccessFlags: ibv.AccessRemoteRead}, ibv.QPAttrState|ibv.QPAttrAccessFlags))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTR, PathMTU: ibv.MTU256, DestQPN: peerQPN, AV: ibv.AddressVector{DGID: peerGID},
		RQPSN: 100, MaxDestRdAtomic: 4}, ibv.QPAttrState|ibv.QPAttrAV|ibv.QPAttrPathMTU|ibv.QPAttrDestQPN|ibv.QPAttrRQPSN|ibv.QPAttrMaxDestRdAtomic|ibv.QPAttrMinRNRTimer))
	return &readResponder{e: e, q: q, port: port, mr: mr, pkts: pkts, t: t}
}

// read delivers a READ request at psn for the responses from the skip'th on.
func (r *readResponder) read(psn header.PSN, skip int) {
	receiveFromPeer(r.t, r.e, r.q, header.OpRCReadRequest, psn, 0, func(p *header.Packet) {
		p.RETH.SetVA(r.mr.Addr() + uint64(skip*256))
		p.RETH.SetRKey(r.mr.RKey())
		p.RETH.SetDMALength(uint32((r.pkts - skip) * 256))
	})
}

// sentPSNs returns the PSNs of the packets sent since the last call.
func (r *readResponder) sentPSNs() []header.PSN {
	var psns []header.PSN
	var p header.Packet
	for _, raw := range r.port.sent {
		require.NoError(r.t, header.ParsePacket(raw, &p))
		psns = append(psns, p.BTH.PSN())
	}
	r.port.sent = nil
	return psns
}
