package isolation

import (
	"bytes"
	"fmt"
	"net/netip"
	"runtime"
	"time"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce"
)

// endpoint is one side of a transfer through a daemon: a session with a PD,
// an MR over buf, a CQ and RC QPs, and the GID index of the end's IPv4
// address.
type endpoint struct {
	c    *session.Conn
	pd   uint32
	buf  []byte
	mr   session.MR
	cq   *session.CQ
	gid  ibv.GID
	gidx uint8
}

// newEndpoint opens a session on sock with an MR of size bytes every
// access may use.
func newEndpoint(sock string, addr netip.Addr, size int) (*endpoint, error) {
	c, err := dialWithin(sock, 20*time.Second)
	if err != nil {
		return nil, err
	}
	e := &endpoint{c: c, buf: make([]byte, size), gid: roce.GIDFromAddr(addr)}
	if err := e.setUp(); err != nil {
		c.Close()
		return nil, err
	}
	return e, nil
}

func (e *endpoint) setUp() error {
	idx, err := gidIndex(e.c, e.gid)
	if err != nil {
		return err
	}
	e.gidx = uint8(idx)
	if e.pd, err = e.c.AllocPD(); err != nil {
		return fmt.Errorf("alloc_pd: %w", err)
	}
	access := ibv.AccessLocalWrite | ibv.AccessRemoteWrite | ibv.AccessRemoteRead
	if e.mr, err = e.c.RegMR(e.pd, e.buf, access); err != nil {
		return fmt.Errorf("reg_mr: %w", err)
	}
	if e.cq, err = e.c.CreateCQ(64, nil, 0); err != nil {
		return fmt.Errorf("create_cq: %w", err)
	}
	return nil
}

// close ends the session; buf stays alive until then, as the daemon may
// reach it.
func (e *endpoint) close() {
	e.c.Close()
	runtime.KeepAlive(e.buf)
}

// newQP makes an RC QP on the endpoint's CQ.
func (e *endpoint) newQP() (*session.QP, error) {
	qp, err := e.c.CreateQP(hostif.CreateQPRequest{PD: e.pd, SendCQ: e.cq.Handle, RecvCQ: e.cq.Handle, MaxSendWR: 16,
		MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1})
	if err != nil {
		return nil, fmt.Errorf("create_qp: %w", err)
	}
	return qp, nil
}

// gidIndex finds gid in the daemon's GID table.
func gidIndex(c *session.Conn, gid ibv.GID) (int, error) {
	port, err := c.QueryPort()
	if err != nil {
		return 0, fmt.Errorf("query_port: %w", err)
	}
	for i := 0; i < int(port.GIDTableLen); i++ {
		if g, err := c.QueryGID(i); err == nil && g == gid {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%v not in the GID table", gid)
}

// connectRC moves qp through INIT and RTR to RTS, aimed at QP dest on
// dgid, from the endpoint's GID. retry is the transport retry count: 7
// (rxe's infinite) for transfers that must finish, less where the peer may
// be gone and the request must end in an error.
func (e *endpoint) connectRC(qp *session.QP, dest uint32, dgid ibv.GID, retry uint8) error {
	access := ibv.AccessLocalWrite | ibv.AccessRemoteWrite | ibv.AccessRemoteRead
	if err := qp.Modify(&ibv.QPAttr{State: ibv.QPSInit, AccessFlags: access, Port: 1},
		ibv.QPAttrState|ibv.QPAttrAccessFlags|ibv.QPAttrPort|ibv.QPAttrPKeyIndex); err != nil {
		return fmt.Errorf("modify_qp INIT: %w", err)
	}
	if err := qp.Modify(&ibv.QPAttr{State: ibv.QPSRTR, PathMTU: ibv.MTU1024, DestQPN: dest,
		RQPSN: 100, MaxDestRdAtomic: 1, MinRNRTimer: 1, AV: ibv.AddressVector{DGID: dgid, SGIDIndex: e.gidx, HopLimit: 64}},
		ibv.QPAttrState|ibv.QPAttrAV|ibv.QPAttrPathMTU|ibv.QPAttrDestQPN|
			ibv.QPAttrRQPSN|ibv.QPAttrMaxDestRdAtomic|ibv.QPAttrMinRNRTimer); err != nil {
		return fmt.Errorf("modify_qp RTR: %w", err)
	}
	if err := qp.Modify(&ibv.QPAttr{State: ibv.QPSRTS, SQPSN: 100, Timeout: 12, RetryCnt: retry,
		RNRRetry: 7, MaxRdAtomic: 1},
		ibv.QPAttrState|ibv.QPAttrSQPSN|ibv.QPAttrTimeout|ibv.QPAttrRetryCnt|
			ibv.QPAttrRNRRetry|ibv.QPAttrMaxQPRdAtomic); err != nil {
		return fmt.Errorf("modify_qp RTS: %w", err)
	}
	return nil
}

// poll waits for n completions on the endpoint's CQ, up to d.
func (e *endpoint) poll(n int, d time.Duration) ([]ibv.WC, error) {
	wcs := make([]ibv.WC, n)
	got := 0
	for end := time.Now().Add(d); got < n; {
		k, err := e.cq.Poll(wcs[got:])
		if err != nil {
			return wcs[:got], err
		}
		got += k
		if k == 0 {
			if time.Now().After(end) {
				return wcs[:got], fmt.Errorf("%d of %d completions: %w within %v", got, n, errNoReply, d)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return wcs, nil
}

// transfer moves 64 KiB by RDMA WRITE and 4 KiB by SEND from a session
// on sockX to one on sockY, RC, and checks every byte that arrived.
func transfer(sockX, sockY string, addrX, addrY netip.Addr, seed byte) error {
	const writeLen, sendLen = 64 << 10, 4 << 10
	x, err := newEndpoint(sockX, addrX, writeLen+sendLen)
	if err != nil {
		return fmt.Errorf("sender: %w", err)
	}
	defer x.close()
	y, err := newEndpoint(sockY, addrY, writeLen+sendLen)
	if err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	defer y.close()
	qx, err := x.newQP()
	if err != nil {
		return fmt.Errorf("sender: %w", err)
	}
	qy, err := y.newQP()
	if err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	if err := x.connectRC(qx, qy.QPN, y.gid, 7); err != nil {
		return fmt.Errorf("sender: %w", err)
	}
	if err := y.connectRC(qy, qx.QPN, x.gid, 7); err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	for i := range x.buf {
		x.buf[i] = byte(i*131) ^ seed
	}
	if err := qy.PostRecv(&ibv.RecvWR{ID: 1, SGL: []ibv.SGE{y.mr.SGE(writeLen, sendLen)}}); err != nil {
		return fmt.Errorf("receiver: post_recv: %w", err)
	}
	if err := qx.PostSend(&ibv.SendWR{ID: 2, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{x.mr.SGE(0, writeLen)}, RemoteAddr: y.mr.Addr, RKey: y.mr.RKey}); err != nil {
		return fmt.Errorf("sender: post WRITE: %w", err)
	}
	if err := qx.PostSend(&ibv.SendWR{ID: 3, Opcode: ibv.WRSend, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{x.mr.SGE(writeLen, sendLen)}}); err != nil {
		return fmt.Errorf("sender: post SEND: %w", err)
	}
	wcs, err := x.poll(2, 20*time.Second)
	if err != nil {
		return fmt.Errorf("sender: %w", err)
	}
	for _, wc := range wcs {
		if wc.Status != ibv.WCSuccess {
			return fmt.Errorf("sender: WR %d: %v", wc.WRID, wc.Status)
		}
	}
	wcs, err = y.poll(1, 20*time.Second)
	if err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	if wcs[0].Status != ibv.WCSuccess || wcs[0].ByteLen != sendLen {
		return fmt.Errorf("receiver: receive %v, %d bytes", wcs[0].Status, wcs[0].ByteLen)
	}
	if !bytes.Equal(x.buf, y.buf) {
		return fmt.Errorf("the receiver's bytes differ from the sender's")
	}
	return nil
}
