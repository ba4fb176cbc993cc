package client

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/verbs"
)

// dialedXRCD is a handle of one of the daemon's XRC domains.
type dialedXRCD struct {
	r      *dialed
	handle uint32
}

func (r *dialed) OpenXRCD(x *verbs.XRCD, f *os.File, oflags int) (verbs.XRCDOps, error) {
	fd := -1
	if f != nil {
		fd = int(f.Fd())
	}
	var flags uint32
	if oflags&os.O_CREATE != 0 {
		flags |= unix.O_CREAT
	}
	if oflags&os.O_EXCL != 0 {
		flags |= unix.O_EXCL
	}
	var h uint32
	err := r.call(func(c *session.Conn) (err error) { h, err = c.OpenXRCD(fd, flags); return err })
	if err != nil {
		return nil, fmt.Errorf("open XRCD: %w", daemonErr(err))
	}
	return &dialedXRCD{r: r, handle: h}, nil
}

func (x *dialedXRCD) Close() error {
	if err := x.r.call(func(c *session.Conn) error { return c.CloseXRCD(x.handle) }); err != nil {
		return fmt.Errorf("close XRCD: %w", daemonErr(err))
	}
	return nil
}

func (x *dialedXRCD) CreateRecvQP(front *verbs.QP) (verbs.QPOps, error) {
	return x.recvQP(front, func(c *session.Conn, h uint64) (*session.QP, error) { return c.CreateXRCQP(x.handle, h) })
}

func (x *dialedXRCD) OpenQP(front *verbs.QP, qpn uint32) (verbs.QPOps, error) {
	return x.recvQP(front, func(c *session.Conn, h uint64) (*session.QP, error) { return c.OpenQP(x.handle, qpn, h) })
}

// recvQP makes a handle of an XRC receive QP with open: a QP as the
// others, whose posts ibv.CheckSendWR and PostRecv refuse.
func (x *dialedXRCD) recvQP(front *verbs.QP, open func(*session.Conn, uint64) (*session.QP, error)) (verbs.QPOps, error) {
	r := x.r
	h := r.objects.handle()
	var q *session.QP
	if err := r.call(func(c *session.Conn) (err error) { q, err = open(c, h); return err }); err != nil {
		return nil, fmt.Errorf("XRC receive QP: %w", daemonErr(err))
	}
	rq := &dialedQP{qp: front, q: q, r: r, handle: h, typ: verbs.QPTypeXRCRecv}
	r.objects.add(h, rq)
	return rq, nil
}

// dialedXRCSRQ is an XRC SRQ in the daemon.
type dialedXRCSRQ struct {
	*dialedSRQ
	num uint32
}

func (p *dialedPD) CreateXRCSRQ(front *verbs.SRQ, x *verbs.XRCD, cq *verbs.CQ, maxWR, maxSGE int) (verbs.XRCSRQOps, error) {
	dx, ok := x.Backend().(*dialedXRCD)
	dc, ok2 := cq.Backend().(*dialedCQ)
	if !ok || !ok2 || dx.r != p.r {
		return nil, fmt.Errorf("create XRC SRQ: XRCD or CQ of another device: %w", verbs.ErrInvalidArgument)
	}
	r := p.r
	h := r.objects.handle()
	var s *session.SRQ
	var num uint32
	err := r.call(func(c *session.Conn) (err error) {
		s, num, err = c.CreateXRCSRQ(p.handle, dx.handle, dc.handle, maxWR, maxSGE, 0, h)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create XRC SRQ: %w", daemonErr(err))
	}
	srq := &dialedSRQ{srq: front, s: s, r: r, handle: h, maxSGE: maxSGE}
	r.objects.add(h, srq)
	return &dialedXRCSRQ{dialedSRQ: srq, num: num}, nil
}

func (s *dialedXRCSRQ) Num() uint32 { return s.num }

func (s *dialedXRCSRQ) Destroy() error {
	if err := s.r.call(func(*session.Conn) error { return s.s.Destroy() }); err != nil {
		return fmt.Errorf("destroy SRQ: %w", daemonErr(err))
	}
	s.r.objects.remove(s.handle)
	return nil
}
