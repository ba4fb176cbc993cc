package system

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/systest"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// TestMemoryWindowAcrossDaemons binds a type 2 memory window on one
// daemon's QP and has a second daemon's QP, over a veth pair, WRITE
// through it, then invalidate it with SEND_WITH_INV: the WRITE after that
// fails with a remote access error, the NAK a responder sends for a dead
// rkey.
func TestMemoryWindowAcrossDaemons(t *testing.T) {
	w := systest.NewWorld(t, systest.Config{AwaitGID: true, Net: netnstest.Config{
		AddrsA: []netip.Prefix{netip.MustParsePrefix("10.83.0.1/24")},
		AddrsB: []netip.Prefix{netip.MustParsePrefix("10.83.0.2/24")}}})
	a, b := mwSide(t, w.A.Sock, 0), mwSide(t, w.B.Sock, 0x5a)
	addrA, addrB := w.Pair.A.Addr4(), w.Pair.B.Addr4()
	toRTSOn(t, a.qp.Modify, b.qp.QPN(), roce.GIDFromAddr(addrB), gidIndex(t, w.GIDs[0], addrA))
	toRTSOn(t, b.qp.Modify, a.qp.QPN(), roce.GIDFromAddr(addrA), gidIndex(t, w.GIDs[1], addrB))

	mw, err := a.pd.AllocMW(verbs.MWType2)
	require.NoError(t, err)
	defer mw.Dealloc()
	rkey := verbs.IncRKey(mw.RKey())
	require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled,
		Bind: verbs.MWBind{RKey: rkey, LKey: a.mr.LKey(), Addr: a.mr.Addr() + 4096, Length: 4096, Access: verbs.AccessRemoteWrite}}))
	wc := mwWait(t, a.cq)
	require.Equal(t, verbs.WCSuccess, wc.Status)
	require.Equal(t, verbs.WCBindMW, wc.Opcode)

	write := func(id uint64) verbs.WC {
		require.NoError(t, b.qp.PostSend(&verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{b.mr.SGE(0, 2048)}, RemoteAddr: a.mr.Addr() + 6144, RKey: rkey}))
		return mwWait(t, b.cq)
	}
	require.Equal(t, verbs.WCSuccess, write(2).Status)
	require.Equal(t, b.buf[:2048], a.buf[6144:8192])

	require.NoError(t, a.qp.PostRecv(&verbs.RecvWR{ID: 3, SGL: []verbs.SGE{a.mr.SGE(0, 64)}}))
	require.NoError(t, b.qp.PostSend(&verbs.SendWR{ID: 4, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{b.mr.SGE(0, 8)}, InvalidateRKey: rkey}))
	require.Equal(t, verbs.WCSuccess, mwWait(t, b.cq).Status)
	wc = mwWait(t, a.cq)
	require.Equal(t, verbs.WCSuccess, wc.Status)
	require.Equal(t, verbs.WCWithInv, wc.Flags&verbs.WCWithInv)
	require.Equal(t, rkey, wc.InvalidatedRKey)

	require.Equal(t, verbs.WCRemAccessErr, write(5).Status)
}

// mwEnd is one daemon's client objects.
type mwEnd struct {
	pd  *verbs.PD
	mr  *verbs.MR
	buf []byte
	cq  *verbs.CQ
	qp  *verbs.QP
}

func mwSide(t *testing.T, sock string, seed byte) *mwEnd {
	dev, err := client.DialDevice(sock)
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	e := &mwEnd{pd: dev.AllocPD(), buf: make([]byte, 16384)}
	for i := range e.buf {
		e.buf[i] = byte(i) ^ seed
	}
	e.mr, err = e.pd.RegMR(e.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessMWBind)
	require.NoError(t, err)
	e.cq, err = dev.CreateCQ(16, nil)
	require.NoError(t, err)
	e.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	return e
}

func mwWait(t *testing.T, cq *verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 1)
	n, err := cq.Wait(ctx, wcs)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return wcs[0]
}
