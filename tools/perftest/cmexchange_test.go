package perftest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/tools/oob"
	"github.com/softnic/softnic/verbs"
)

// connectByHand moves a and b to RTS aimed at each other, standing in for
// what rdma_cm does to the exchange QPs.
func connectByHand(t *testing.T, a, b *verbs.QP, ga, gb verbs.GID) {
	t.Helper()
	for _, side := range []struct {
		qp   *verbs.QP
		peer *verbs.QP
		dgid verbs.GID
	}{{a, b, gb}, {b, a, ga}} {
		require.NoError(t, side.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: verbs.AccessLocalWrite},
			verbs.QPAttrState|verbs.QPAttrPort|verbs.QPAttrAccessFlags|verbs.QPAttrPKeyIndex))
		require.NoError(t, side.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU(3), DestQPN: side.peer.QPN(),
			RQPSN: 100, MinRNRTimer: 12, MaxDestRdAtomic: 1, AV: verbs.AddressVector{DGID: side.dgid, HopLimit: 64}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
		require.NoError(t, side.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic))
	}
}

// exchangePair makes the exchange QPs of both sides on a memory link.
func exchangePair(t *testing.T, ctx context.Context) (server, client *exchangeQP) {
	t.Helper()
	a, b := memPair(t)
	var qps [2]*verbs.QP
	var xs [2]*exchangeQP
	for i, d := range []Device{a, b} {
		x, err := newExchangeQP(ctx, d.Verbs)
		require.NoError(t, err)
		t.Cleanup(x.close)
		qps[i], err = x.pd.CreateQP(x.initAttr())
		require.NoError(t, err)
		xs[i] = x
	}
	ga, _ := a.Verbs.GID(0)
	gb, _ := b.Verbs.GID(0)
	connectByHand(t, qps[0], qps[1], ga, gb)
	for i, x := range xs {
		require.NoError(t, x.attach(qps[i]))
	}
	return xs[0], xs[1]
}

// TestExchangeQPSession runs the -R exchange's setup and a keys handshake
// over SENDs between two exchange QPs: each side gets the other's values.
func TestExchangeQPSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sx, cx := exchangePair(t, ctx)
	keys := func(qpn uint32) oob.PerftestDest {
		return oob.PerftestDest{OutReads: 16, QPN: qpn, PSN: 0x123456, RKey: 0xabcd, VAddr: 0x7f0000001000}
	}
	var wg sync.WaitGroup
	var sneg oob.Negotiated
	var sgot oob.PerftestDest
	var serr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := oob.NewRDMACMSession(sx, oob.Server, 5*time.Second, 0)
		if sneg, serr = s.Setup(oob.PerftestVersion, oob.SysData{CycleBuffer: 4096, CacheLineSize: 64}, 5); serr == nil {
			sgot, serr = s.Keys(keys(0x22))
		}
	}()
	c := oob.NewRDMACMSession(cx, oob.Client, 5*time.Second, 0)
	cneg, err := c.Setup(oob.PerftestVersion, oob.SysData{CycleBuffer: 65536, CacheLineSize: 128}, 3)
	require.NoError(t, err)
	cgot, err := c.Keys(keys(0x11))
	wg.Wait()
	require.NoError(t, err, "client")
	require.NoError(t, serr, "server")
	want := oob.Negotiated{RemoteVersion: oob.PerftestVersion, SysData: oob.SysData{CycleBuffer: 65536, CacheLineSize: 128}, MTU: 3}
	assert.Equal(t, want, cneg)
	assert.Equal(t, want, sneg)
	assert.Equal(t, keys(0x22), cgot)
	assert.Equal(t, keys(0x11), sgot)
}

// TestExchangeQPWrongLength fails a receive whose message is not the size
// the exchange expects, and a message too long for the peer's receive.
func TestExchangeQPWrongLength(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sx, cx := exchangePair(t, ctx)
	require.ErrorIs(t, cx.Send("big", make([]byte, oob.KeysBinLen+1), time.Second), oob.ErrMessageLength)
	require.NoError(t, cx.Send("versions", make([]byte, 16), 5*time.Second))
	require.ErrorIs(t, sx.Recv("sysdata", make([]byte, 4), 5*time.Second), oob.ErrMessageLength)
	require.ErrorIs(t, sx.Recv("nothing", make([]byte, 4), 50*time.Millisecond), errExchangeTimeout)
}
