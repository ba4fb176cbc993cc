package ibtransport

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// TestResponsesHoldOffRetransmitTimer checks that every response to a sent
// PSN pushes the retransmit timeout out, also a stale one the completer
// discards (a responder still streaming an earlier READ response), as
// rxe's completer does; and that a timeout still comes when nothing does.
func TestResponsesHoldOffRetransmitTimer(t *testing.T) {
	port := &fakePort{}
	e := NewEngine(port, func() {})
	e.Exit()
	mr := newTestRegion(make([]byte, 4096), 0x77, ibv.AccessAll)
	q, err := e.CreateQP(&QPConfig{Memory: &testMemory{mr}, SendCQ: &testCQ{}, RecvCQ: &testCQ{}, Cap: ibv.QPCap{MaxSendWR: 4, MaxRecvWR: 1}})
	require.NoError(t, err)
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSInit}, ibv.QPAttrState))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTR, PathMTU: ibv.MTU256, DestQPN: peerQPN, AV: ibv.AddressVector{DGID: peerGID}},
		ibv.QPAttrState|ibv.QPAttrAV|ibv.QPAttrPathMTU|ibv.QPAttrDestQPN|ibv.QPAttrRQPSN|ibv.QPAttrMaxDestRdAtomic|ibv.QPAttrMinRNRTimer))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTS, SQPSN: 100, Timeout: 10, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}, // 4 ms
		ibv.QPAttrState|ibv.QPAttrSQPSN|ibv.QPAttrTimeout|ibv.QPAttrRetryCnt|ibv.QPAttrRNRRetry|ibv.QPAttrMaxQPRdAtomic))
	// A READ of 4 PSNs (100..103).
	require.NoError(t, q.PostSend(&ibv.SendWR{ID: 1, Opcode: ibv.WRRDMARead, SGL: []ibv.SGE{mr.SGE(0, 1024)}, RemoteAddr: 0x1000, RKey: 1}))
	e.Process()
	require.NotZero(t, q.comp.retransAt)
	response := func(op header.Opcode, psn header.PSN) { receiveResponse(t, e, q, op, psn, 256) }
	response(header.OpRCReadResponseFirst, 100)
	require.Equal(t, header.PSN(101), q.comp.compPSN)
	// The same response again, discarded, still pushes the timeout out.
	e.Process() // end of the first batch
	before := q.comp.retransAt
	time.Sleep(time.Millisecond)
	response(header.OpRCReadResponseFirst, 100)
	require.Equal(t, header.PSN(101), q.comp.compPSN)
	require.Greater(t, q.comp.retransAt, before)
	// Nothing more: the timeout restarts the READ from PSN 101. (A pass
	// may check timers against a reading a few passes old, but not after
	// the engine slept.)
	time.Sleep(5 * time.Millisecond)
	e.Awake()
	e.Process()
	require.Equal(t, uint64(1), e.Ctr.Timeouts.Load())
}
