package system

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/internal/systest"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// TestSleepingDaemonEngineWakes checks the interrupt-driven half of the
// daemon's engine over a real link: with its thread raised
// (--engine-priority rt), the engine, once asleep (as the session page
// tells the client), is woken by the client's doorbell, which the
// engine's own poll(2) takes (doorbell_wakeups counts it), and by a frame
// from the peer, with no doorbell.
func TestSleepingDaemonEngineWakes(t *testing.T) {
	bin, p, ga, gb := vethSoftnic(t)
	runDir := systest.RootDir(t)
	d := systest.StartDaemon(t, bin, &p.A, runDir, "--engine-priority", "rt")
	d.AwaitLog(t, "priority=rt", 10*time.Second)
	sock := filepath.Join(runDir, "softnic_"+p.A.Ifname+".sock")

	peer := openPeer(t, &p.B)
	linkA, err := p.A.Link()
	require.NoError(t, err)
	var macA [6]byte
	copy(macA[:], linkA.Attrs().HardwareAddr)
	peer.RoCE().SetNeighbor(p.A.Addr4(), macA)

	c, err := session.Dial(sock)
	require.NoError(t, err)
	defer c.Close()
	mon, err := session.DialMonitor(sock)
	require.NoError(t, err)
	defer mon.Close()
	counter := func(name string) uint64 {
		cs, err := mon.DeviceCounters()
		require.NoError(t, err)
		for _, c := range cs {
			if c.Name == name {
				return c.Value
			}
		}
		t.Fatalf("no counter %s", name)
		return 0
	}

	pd, err := c.AllocPD()
	require.NoError(t, err)
	buf := make([]byte, 4096)
	mr, err := c.RegMR(pd, buf, ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
	require.NoError(t, err)
	cq, err := c.CreateCQ(64, nil, 0)
	require.NoError(t, err)
	qp, err := c.CreateQP(hostif.CreateQPRequest{PD: pd, SendCQ: cq.Handle, RecvCQ: cq.Handle, MaxSendWR: 16, MaxRecvWR: 16,
		MaxSendSGE: 1, MaxRecvSGE: 1})
	require.NoError(t, err)
	ppd := peer.AllocPD()
	pbuf := make([]byte, 4096)
	pmr, err := ppd.RegMR(pbuf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	pcq, err := peer.CreateCQ(64, nil)
	require.NoError(t, err)
	pqp, err := ppd.CreateQP(&verbs.QPInitAttr{SendCQ: pcq, RecvCQ: pcq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	gidA, gidB := roce.GIDFromAddr(p.A.Addr4()), roce.GIDFromAddr(p.B.Addr4())
	toRTSOn(t, qp.Modify, pqp.QPN(), gidB, gidIndex(t, ga, p.A.Addr4()))
	toRTSOn(t, pqp.Modify, qp.QPN, gidA, gidIndex(t, gb, p.B.Addr4()))

	asleep := func() {
		require.Eventually(t, c.EngineSleeping, 10*time.Second, 100*time.Microsecond, "the engine never slept:\n%s", d.Log.String())
	}
	wcs := make([]ibv.WC, 1)
	pwcs := make([]verbs.WC, 1)
	for i := range 3 {
		// The client's doorbell.
		// (The counters first: a query may wake the engine.)
		rang := counter("doorbell_wakeups")
		asleep()
		require.NoError(t, qp.PostSend(&ibv.SendWR{ID: uint64(i), Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
			SGL: []ibv.SGE{mr.SGE(0, 64)}, RemoteAddr: pmr.Addr(), RKey: pmr.RKey()}))
		require.Eventually(t, func() bool { n, _ := cq.Poll(wcs); return n == 1 }, 10*time.Second, 100*time.Microsecond,
			"no completion of the client's WRITE:\n%s", d.Log.String())
		require.Equal(t, ibv.WCSuccess, wcs[0].Status)
		require.Greater(t, counter("doorbell_wakeups"), rang, "the post did not ring the sleeping engine awake")

		// A frame from the peer: the engine must wake to answer it.
		sleeps := counter("sleeps")
		rang = counter("doorbell_wakeups")
		asleep()
		require.NoError(t, pqp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{pmr.SGE(0, 64)}, RemoteAddr: mr.Addr, RKey: mr.RKey}))
		require.Eventually(t, func() bool { n, _ := pcq.Poll(pwcs); return n == 1 }, 10*time.Second, 100*time.Microsecond,
			"no ACK of the peer's WRITE from the sleeping daemon:\n%s", d.Log.String())
		require.Equal(t, verbs.WCSuccess, pwcs[0].Status)
		require.Equal(t, rang, counter("doorbell_wakeups"), "no client posted: no doorbell")
		asleep()
		require.Greater(t, counter("sleeps"), sleeps, "the engine did not wake for the frame")
	}
}
