package session

import (
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
)

// OpenXRCD opens an XRC domain (ibv_open_xrcd) on the file fd, which goes
// to the daemon with the command, or a private one for fd -1. oflags are
// open(2)'s O_CREAT and O_EXCL. It returns the domain's handle.
func (c *Conn) OpenXRCD(fd int, oflags uint32) (uint32, error) {
	req := hostif.OpenXRCDRequest{Oflags: oflags}
	var fds []int
	if fd >= 0 {
		req.HasFd = 1
		fds = []int{fd}
	}
	var r hostif.HandleReply
	got, err := c.callFD(hostif.OpOpenXRCD, req, &r, fds...)
	closeAll(got)
	return r.Handle, err
}

// CloseXRCD closes a domain handle (ibv_close_xrcd); EBUSY while SRQs or
// QPs of the session use it.
func (c *Conn) CloseXRCD(h uint32) error {
	_, err := c.call(hostif.OpCloseXRCD, hostif.HandleRequest{Handle: h}, &hostif.Empty{})
	return err
}

// CreateXRCSRQ creates an SRQ of domain xrcd whose receives complete in
// cq (ibv_create_srq_ex with IBV_SRQT_XRC); it returns the SRQ and its
// number.
func (c *Conn) CreateXRCSRQ(pd, xrcd, cq uint32, maxWR, maxSGE, limit int, userHandle uint64) (*SRQ, uint32, error) {
	var r hostif.CreateXRCSRQReply
	fds, err := c.call(hostif.OpCreateXRCSRQ, hostif.CreateXRCSRQRequest{SRQ: hostif.CreateSRQRequest{PD: pd,
		MaxWR: uint32(maxWR), MaxSGE: uint32(maxSGE), Limit: uint32(limit), UserHandle: userHandle}, Xrcd: xrcd, CQ: cq}, &r)
	if err != nil {
		return nil, 0, err
	}
	mem, err := mapRing(fds, hostif.RingSize(int(r.Depth), int(r.Stride)))
	if err != nil {
		return nil, 0, err
	}
	wq, err := hostif.NewWorkQueue(mem, int(r.Depth), int(r.Stride))
	if err != nil {
		unix.Munmap(mem)
		return nil, 0, err
	}
	return &SRQ{Handle: r.Handle, c: c, mem: mem, wq: wq}, r.SRQNum, nil
}

// CreateXRCQP creates an XRC receive QP of domain xrcd; OpenQP opens the
// domain's QP qpn (ibv_open_qp). Neither takes posts.
func (c *Conn) CreateXRCQP(xrcd uint32, userHandle uint64) (*QP, error) {
	return c.createQP(hostif.OpCreateXRCQP, hostif.XRCQPRequest{Xrcd: xrcd, UserHandle: userHandle})
}

func (c *Conn) OpenQP(xrcd, qpn uint32, userHandle uint64) (*QP, error) {
	return c.createQP(hostif.OpOpenQP, hostif.XRCQPRequest{Xrcd: xrcd, QPN: qpn, UserHandle: userHandle})
}
