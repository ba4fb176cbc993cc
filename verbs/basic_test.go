package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

func TestSendRecvSmoke(t *testing.T) {
	_, x, y := connectedPair(t, memlink.Config{}, defaultOpts())
	smr, sbuf := regMR(t, x.pd, 5000, allAccess)
	rmr, rbuf := regMR(t, y.pd, 5000, allAccess)
	fill(sbuf, 1)
	require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: 7, SGL: []verbs.SGE{rmr.SGE(0, 5000)}}))
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{smr.SGE(0, 5000)}}))
	waitOK(t, x.scq, 9)
	wc := waitOK(t, y.rcq, 7)
	require.Equal(t, uint32(5000), wc.ByteLen)
	require.Equal(t, verbs.WCRecv, wc.Opcode)
	require.Equal(t, sbuf, rbuf)
}
