package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// TestRemoteWriteSeq checks that a region's remote-write sequence counts
// the peer's WRITE messages (once each, however many packets) and atomics,
// and nothing else, and that it has moved by the time the writer sees its
// completion.
func TestRemoteWriteSeq(t *testing.T) {
	o := defaultOpts()
	_, x, y := connectedPair(t, memlink.Config{}, o)
	lmr, lbuf := regMR(t, x.pd, 8192, allAccess)
	rmr, rbuf := regMR(t, y.pd, 8192, allAccess)
	for i := range lbuf {
		lbuf[i] = byte(i * 7)
	}
	require.Zero(t, rmr.RemoteWriteSeq())
	post := func(wr verbs.SendWR) {
		wr.Flags |= verbs.SendSignaled
		require.NoError(t, x.qp.PostSend(&wr))
		waitOK(t, x.scq, wr.ID)
	}
	// Five packets at IB MTU 1024: one message.
	post(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{lmr.SGE(0, 5000)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
	require.Equal(t, uint64(1), rmr.RemoteWriteSeq())
	require.Equal(t, lbuf[:5000], rbuf[:5000])
	post(verbs.SendWR{ID: 2, Opcode: verbs.WRAtomicFetchAndAdd, SGL: []verbs.SGE{lmr.SGE(6000, 8)}, RemoteAddr: rmr.Addr() + 6000,
		RKey: rmr.RKey(), CompareAdd: 1})
	require.Equal(t, uint64(2), rmr.RemoteWriteSeq())
	// Reads and sends do not count, nor does a WRITE of nothing.
	post(verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{lmr.SGE(0, 100)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
	post(verbs.SendWR{ID: 4, Opcode: verbs.WRRDMAWrite, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
	require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: 5, SGL: []verbs.SGE{rmr.SGE(7000, 100)}}))
	post(verbs.SendWR{ID: 6, Opcode: verbs.WRSend, SGL: []verbs.SGE{lmr.SGE(0, 100)}})
	waitOK(t, y.rcq, 5)
	require.Equal(t, uint64(2), rmr.RemoteWriteSeq())
	require.Zero(t, lmr.RemoteWriteSeq())
}
