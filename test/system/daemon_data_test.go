package system

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/systest"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/xdplink"
	"github.com/softnic/softnic/verbs"
)

// TestDaemonDataOnVeth moves data through the daemon over a real link: the
// softnic binary serves veth end A as a daemon, this test's process is its
// client, and a softnic device opened in-process on end B is the peer.
// 64 KiB WRITEs and a SEND go both ways, at IB MTU 1024 (a 1500-byte link).
func TestDaemonDataOnVeth(t *testing.T) {
	bin, p, ga, gb := vethSoftnic(t)
	runDir := systest.RootDir(t)
	dout := systest.StartDaemon(t, bin, &p.A, runDir).Log

	// The peer: a device on B opened in B's namespace; it knows A's MAC
	// beforehand (its neighbour lookups would run outside the namespace).
	peer := openPeer(t, &p.B)
	linkA, err := p.A.Link()
	require.NoError(t, err)
	var macA [6]byte
	copy(macA[:], linkA.Attrs().HardwareAddr)
	peer.RoCE().SetNeighbor(p.A.Addr4(), macA)

	c, err := session.Dial(filepath.Join(runDir, "softnic_"+p.A.Ifname+".sock"))
	require.NoError(t, err)
	defer c.Close()
	pd, err := c.AllocPD()
	require.NoError(t, err)
	buf := make([]byte, 1<<17)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	mr, err := c.RegMR(pd, buf, ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
	require.NoError(t, err)
	cq, err := c.CreateCQ(64, nil, 0)
	require.NoError(t, err)
	qp, err := c.CreateQP(hostif.CreateQPRequest{PD: pd, SendCQ: cq.Handle, RecvCQ: cq.Handle, MaxSendWR: 16, MaxRecvWR: 16,
		MaxSendSGE: 1, MaxRecvSGE: 1})
	require.NoError(t, err)

	ppd := peer.AllocPD()
	pbuf := make([]byte, 1<<17)
	pmr, err := ppd.RegMR(pbuf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	pcq, err := peer.CreateCQ(64, nil)
	require.NoError(t, err)
	pqp, err := ppd.CreateQP(&verbs.QPInitAttr{SendCQ: pcq, RecvCQ: pcq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)

	gidA, gidB := roce.GIDFromAddr(p.A.Addr4()), roce.GIDFromAddr(p.B.Addr4())
	toRTSOn(t, qp.Modify, pqp.QPN(), gidB, gidIndex(t, ga, p.A.Addr4()))
	toRTSOn(t, pqp.Modify, qp.QPN, gidA, gidIndex(t, gb, p.B.Addr4()))

	// The client's WRITE leaves from its memory through the daemon.
	require.NoError(t, qp.PostSend(&ibv.SendWR{ID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{mr.SGE(0, 65536)}, RemoteAddr: pmr.Addr(), RKey: pmr.RKey()}))
	wcs := make([]ibv.WC, 1)
	require.Eventually(t, func() bool { n, _ := cq.Poll(wcs); return n == 1 }, 10*time.Second, 100*time.Microsecond,
		"no completion of the client's WRITE:\n%s", dout.String())
	require.Equal(t, ibv.WCSuccess, wcs[0].Status)
	require.Eventually(t, func() bool { return pmr.RemoteWriteSeq() == 1 }, 10*time.Second, time.Millisecond)
	require.Equal(t, buf[:65536], pbuf[:65536])

	// The peer's WRITE with immediate lands in the client's memory, and
	// its completion in the client's CQ.
	for i := range pbuf {
		pbuf[i] = byte(i * 3)
	}
	require.NoError(t, qp.PostRecv(&ibv.RecvWR{ID: 2}))
	require.NoError(t, pqp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWriteWithImm, Imm: 7, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{pmr.SGE(0, 65536)}, RemoteAddr: mr.Addr + 65536, RKey: mr.RKey}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pwcs := make([]verbs.WC, 1)
	_, err = pcq.Wait(ctx, pwcs)
	require.NoError(t, err)
	require.Equal(t, verbs.WCSuccess, pwcs[0].Status)
	require.Eventually(t, func() bool { n, _ := cq.Poll(wcs); return n == 1 }, 10*time.Second, 100*time.Microsecond)
	require.Equal(t, ibv.WCRecvRDMAWithImm, wcs[0].Opcode)
	require.EqualValues(t, 65536, wcs[0].ByteLen)
	require.Equal(t, pbuf[:65536], buf[65536:])
}

// openPeer opens a softnic device on end's interface in end's namespace,
// as softnic's tools open one (an AF_XDP link with the interface's
// addresses as GIDs, one engine), until the test ends.
func openPeer(t *testing.T, end *netnstest.End) *verbs.Device {
	t.Helper()
	var dev *verbs.Device
	require.NoError(t, end.Do(func() error {
		nd, err := xdplink.LookupNetdev(end.Ifname)
		if err != nil {
			return err
		}
		link, err := xdplink.Open(end.Ifname, xdplink.Config{Addrs: nd.GIDs})
		if err != nil {
			return err
		}
		dev, err = verbs.Open(link, verbs.Config{Addrs: nd.GIDs, Engines: 1})
		if err != nil {
			link.Close()
			return err
		}
		t.Cleanup(func() { dev.Close(); link.Close() })
		return nil
	}))
	return dev
}

func gidIndex(t *testing.T, gids []netip.Addr, a netip.Addr) uint8 {
	for i, g := range gids {
		if g == a {
			return uint8(i)
		}
	}
	t.Fatalf("%v not in the GID table %v", a, gids)
	return 0
}

// toRTSOn moves a QP to RTS aimed at dest on gid, from GID index sgid.
func toRTSOn(t *testing.T, modify func(*ibv.QPAttr, ibv.QPAttrMask) error, dest uint32, gid ibv.GID, sgid uint8) {
	require.NoError(t, modify(&ibv.QPAttr{State: ibv.QPSInit, AccessFlags: ibv.AccessRemoteWrite, Port: 1},
		ibv.QPAttrState|ibv.QPAttrAccessFlags|ibv.QPAttrPort|ibv.QPAttrPKeyIndex))
	require.NoError(t, modify(&ibv.QPAttr{State: ibv.QPSRTR, PathMTU: ibv.MTU1024, DestQPN: dest,
		RQPSN: 100, MaxDestRdAtomic: 1, MinRNRTimer: 1, AV: ibv.AddressVector{DGID: gid, SGIDIndex: sgid, HopLimit: 64}},
		ibv.QPAttrState|ibv.QPAttrAV|ibv.QPAttrPathMTU|ibv.QPAttrDestQPN|
			ibv.QPAttrRQPSN|ibv.QPAttrMaxDestRdAtomic|ibv.QPAttrMinRNRTimer))
	require.NoError(t, modify(&ibv.QPAttr{State: ibv.QPSRTS, SQPSN: 100, Timeout: 14, RetryCnt: 7,
		RNRRetry: 7, MaxRdAtomic: 1},
		ibv.QPAttrState|ibv.QPAttrSQPSN|ibv.QPAttrTimeout|ibv.QPAttrRetryCnt|
			ibv.QPAttrRNRRetry|ibv.QPAttrMaxQPRdAtomic))
}
