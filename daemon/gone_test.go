package daemon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/daemon/client"
	hostsession "github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/verbs"
)

// When the daemon goes, its client learns it: posts, calls and polls of
// an empty CQ return ErrDaemonGone, and Done is closed.
func TestClientSeesDaemonGone(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	require.NoError(t, q.c.Err())
	require.NoError(t, r.srv.Close())
	select {
	case <-q.c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not notice the daemon's end")
	}
	require.ErrorIs(t, q.c.Err(), hostsession.ErrDaemonGone)
	wcs := make([]ibv.WC, 4)
	_, err := q.cq.Poll(wcs)
	require.ErrorIs(t, err, hostsession.ErrDaemonGone)
	err = q.qp.PostSend(&ibv.SendWR{ID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{q.mr.SGE(0, 64)}, RemoteAddr: r.pmr.Addr(), RKey: r.pmr.RKey()})
	require.ErrorIs(t, err, hostsession.ErrDaemonGone)
	require.ErrorIs(t, q.qp.PostRecv(&ibv.RecvWR{ID: 2, SGL: []ibv.SGE{q.mr.SGE(0, 64)}}), hostsession.ErrDaemonGone)
	_, err = q.c.AllocPD()
	require.ErrorIs(t, err, hostsession.ErrDaemonGone)
}

// A verbs device reached through the daemon gets the same: its empty CQ
// polls and its posts fail with hostsession.ErrDaemonGone once the daemon went.
func TestVerbsSeesDaemonGone(t *testing.T) {
	r := newRig(t)
	dev, err := client.DialDevice(r.socket)
	require.NoError(t, err)
	defer dev.Close()
	pd := dev.AllocPD()
	buf := make([]byte, 4096)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	require.NoError(t, err)
	cq, err := dev.CreateCQ(16, nil)
	require.NoError(t, err)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	wcs := make([]verbs.WC, 4)
	n, err := cq.Poll(wcs)
	require.NoError(t, err)
	require.Zero(t, n)

	require.NoError(t, r.srv.Close())
	require.Eventually(t, func() bool {
		_, err = cq.Poll(wcs)
		return err != nil
	}, 10*time.Second, time.Millisecond, "polls go on as if the daemon ran")
	require.ErrorIs(t, err, hostsession.ErrDaemonGone)
	require.ErrorIs(t, qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{mr.SGE(0, 64)}}), hostsession.ErrDaemonGone)
}
