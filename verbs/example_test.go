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
	devA, err := verbs.Open(linkA, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer devA.Close()
	devB, err := verbs.Open(linkB, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.2")}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer devB.Close()

	a, err := openSide(devA)
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := openSide(devB)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Out of band, the sides would exchange QPN, PSN, GID, address and rkey.
	if err := a.connect(b, devB, 100, 200); err != nil {
		fmt.Println(err)
		return
	}
	if err := b.connect(a, devA, 200, 100); err != nil {
		fmt.Println(err)
		return
	}

	copy(a.buf, "hello, remote memory")
	err = a.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
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

// exampleSide is one end of Example: a QP with its CQ and a registered
// buffer.
type exampleSide struct {
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
	buf []byte
}

func openSide(dev *verbs.Device) (*exampleSide, error) {
	s := &exampleSide{pd: dev.AllocPD(), buf: make([]byte, 4096)}
	var err error
	if s.mr, err = s.pd.RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if s.cq, err = dev.CreateCQ(16, nil); err != nil {
		return nil, err
	}
	s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// connect takes s's QP through INIT and RTR to RTS, connected to peer's.
func (s *exampleSide) connect(peer *exampleSide, peerDev *verbs.Device, myPSN, peerPSN verbs.PSN) error {
	gid, err := peerDev.GID(0)
	if err != nil {
		return err
	}
	err = s.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: verbs.AccessRemoteWrite},
		verbs.QPAttrState|verbs.QPAttrAccessFlags)
	if err != nil {
		return err
	}
	err = s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN(),
		RQPSN: peerPSN, MaxDestRdAtomic: 1, MinRNRTimer: 12, AV: verbs.AddressVector{DGID: gid, HopLimit: 64}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	if err != nil {
		return err
	}
	return s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: myPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		MaxRdAtomic: 1}, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
		verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
}
