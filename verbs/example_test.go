package verbs_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// Example connects two devices over an in-memory link and moves a message
// with an RDMA WRITE, the way an ibverbs program would over a RoCE NIC.
func Example() {
	linkA, linkB := memlink.Pair(memlink.Config{})
	defer linkA.Close()
	defer linkB.Close()
	devA, _ := verbs.Open(linkA, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}})
	defer devA.Close()
	devB, _ := verbs.Open(linkB, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.2")}})
	defer devB.Close()

	type side struct {
		pd  *verbs.PD
		cq  *verbs.CQ
		qp  *verbs.QP
		mr  *verbs.MR
		buf []byte
	}
	open := func(dev *verbs.Device) *side {
		s := &side{pd: dev.AllocPD(), buf: make([]byte, 4096)}
		s.mr, _ = s.pd.RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		s.cq, _ = dev.CreateCQ(16, nil)
		s.qp, _ = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		return s
	}
	a, b := open(devA), open(devB)

	// Out of band, the sides would exchange QPN, PSN, GID, address and rkey.
	connect := func(me, peer *side, peerDev *verbs.Device, myPSN, peerPSN verbs.PSN) {
		gid, _ := peerDev.GID(0)
		me.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: verbs.AccessRemoteWrite},
			verbs.QPAttrState|verbs.QPAttrAccessFlags)
		me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN(),
			RQPSN: peerPSN, MaxDestRdAtomic: 1, MinRNRTimer: 12, AV: verbs.AddressVector{DGID: gid, HopLimit: 64}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
		me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: myPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
			MaxRdAtomic: 1}, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
			verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
	}
	connect(a, b, devB, 100, 200)
	connect(b, a, devA, 200, 100)

	copy(a.buf, "hello, remote memory")
	err := a.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 20)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 1)
	if _, err := a.cq.Wait(ctx, wcs); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(wcs[0].Status, wcs[0].Opcode, wcs[0].ByteLen)
	fmt.Println(string(b.buf[:20]))
	// Output:
	// SUCCESS RDMA_WRITE 20
	// hello, remote memory
}
