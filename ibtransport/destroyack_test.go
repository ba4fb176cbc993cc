package ibtransport

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// A QP destroyed just after a SEND to it completed still ACKs that SEND:
// the destroy, queued between the pass's receive and its Process (a
// daemon's client that saw the completion and exited), runs after the QP's
// responses went out. Before, it ran first and the peer retried the SEND
// for ever.
func TestDestroyAfterReceiveStillAcks(t *testing.T) {
	port := &fakePort{}
	e := NewEngine(port, func() {})
	// Until the test drives the passes itself, a goroutine runs them, as
	// the engine goroutine would: the setup's commands wait for a pass.
	stop := make(chan struct{})
	var loop sync.WaitGroup
	loop.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				e.Process()
				time.Sleep(10 * time.Microsecond)
			}
		}
	})
	mr := newTestRegion(make([]byte, 4096), 0x1234, ibv.AccessAll)
	cq := &testCQ{}
	q, err := e.CreateQP(&QPConfig{Memory: &testMemory{mr}, SendCQ: cq, RecvCQ: cq, Cap: ibv.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSInit}, ibv.QPAttrState))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTR, PathMTU: ibv.MTU1024, DestQPN: peerQPN, RQPSN: 100, MaxDestRdAtomic: 1,
		AV: ibv.AddressVector{DGID: peerGID}}, ibv.QPAttrState|ibv.QPAttrAV|ibv.QPAttrPathMTU|ibv.QPAttrDestQPN|ibv.QPAttrRQPSN|
		ibv.QPAttrMaxDestRdAtomic|ibv.QPAttrMinRNRTimer))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTS, SQPSN: 500, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		ibv.QPAttrState|ibv.QPAttrSQPSN|ibv.QPAttrTimeout|ibv.QPAttrRetryCnt|ibv.QPAttrRNRRetry|ibv.QPAttrMaxQPRdAtomic))
	require.NoError(t, q.PostRecv(&ibv.RecvWR{ID: 1, SGL: []ibv.SGE{mr.SGE(0, 100)}}))
	close(stop)
	loop.Wait()
	e.Process() // the receive posted above is taken

	ft := &fuzzTarget{qp: q}
	port.keep = true
	e.Receive(ft.packet(header.OpRCSendOnly, 100, 50, nil), &RecvInfo{SGID: peerGID})
	var wcs [1]ibv.WC
	n, err := cq.Poll(wcs[:])
	require.NoError(t, err)
	require.Equal(t, 1, n, "the receive completed")
	destroyed := make(chan error, 1)
	go func() { destroyed <- q.Destroy() }()
	require.Eventually(t, e.hasCmds.Load, 5*time.Second, time.Microsecond)
	e.Process()
	require.NoError(t, <-destroyed)
	require.Len(t, port.sent, 1, "the SEND's ACK went out before the QP went")
	var p header.Packet
	require.NoError(t, header.ParsePacket(port.sent[0], &p))
	require.Equal(t, header.OpRCAcknowledge, p.BTH.Opcode())
	require.Equal(t, header.PSN(100), p.BTH.PSN())
}
