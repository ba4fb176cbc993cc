package daemon

import (
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// XRC through the daemon: a session's XRCDs are handles of the daemon's
// device's domains, which the device shares by file (device and inode)
// among all sessions, as the kernel does among processes. The passed
// descriptor is only looked at: the device keeps its own reference to
// the file while the domain lives.

// openXRCD opens a domain on the passed file, or a private one.
func (ss *session) openXRCD(req hostif.OpenXRCDRequest) (any, []int, error) {
	var f *os.File
	if req.HasFd != 0 {
		fd, err := ss.takeFD()
		if err != nil {
			return nil, nil, err
		}
		f = os.NewFile(uintptr(fd), "xrcd")
		defer f.Close()
	}
	if req.Oflags&^uint32(unix.O_CREAT|unix.O_EXCL) != 0 {
		return nil, nil, fmt.Errorf("XRCD flags %#x: %w", req.Oflags, unix.EINVAL)
	}
	var oflags int
	if req.Oflags&unix.O_CREAT != 0 {
		oflags |= os.O_CREATE
	}
	if req.Oflags&unix.O_EXCL != 0 {
		oflags |= os.O_EXCL
	}
	// Each handle counts one of the user's descriptors too: a domain on a
	// file keeps the file open in the daemon while it lives.
	if err := ss.take(resXRCD, 1); err != nil {
		return nil, nil, err
	}
	if err := ss.take(resDescriptor, 1); err != nil {
		ss.give(resXRCD, 1)
		return nil, nil, err
	}
	x, err := ss.s.dev.OpenXRCD(f, oflags)
	if err != nil {
		ss.give(resXRCD, 1)
		ss.give(resDescriptor, 1)
		return nil, nil, err
	}
	h := ss.handle()
	ss.xrcds[h] = x
	return hostif.HandleReply{Handle: h}, nil, nil
}

// closeXRCD closes a domain handle no SRQ or QP of the session uses.
func (ss *session) closeXRCD(req hostif.HandleRequest) error {
	x := ss.xrcds[req.Handle]
	if x == nil {
		return fmt.Errorf("XRCD %d: %w", req.Handle, errNoObject)
	}
	if ss.xrcdInUse(req.Handle) {
		return errBusy
	}
	if err := x.Close(); err != nil {
		return err
	}
	delete(ss.xrcds, req.Handle)
	ss.give(resXRCD, 1)
	ss.give(resDescriptor, 1)
	return nil
}

// createXRCSRQ makes an SRQ of a domain: an SRQ as create_srq makes it,
// with its number in the reply.
func (ss *session) createXRCSRQ(req hostif.CreateXRCSRQRequest) (any, []int, error) {
	x, cq := ss.xrcds[req.Xrcd], ss.cqs[req.CQ]
	if x == nil || cq == nil {
		return nil, nil, fmt.Errorf("XRCD %d, CQ %d: %w", req.Xrcd, req.CQ, errNoObject)
	}
	reply, fds, err := ss.makeSRQ(req.SRQ, func(pd *verbs.PD, depth, maxSGE int) (*verbs.SRQ, error) {
		return pd.NewXRCSRQ(x, cq.cq, depth, maxSGE)
	}, 0, req.CQ)
	if err != nil {
		return nil, nil, err
	}
	s := ss.srqs[reply.Handle]
	s.xrcd = req.Xrcd
	num, err := s.srq.Num()
	if err != nil {
		return nil, nil, err
	}
	return hostif.CreateXRCSRQReply{Handle: reply.Handle, Depth: reply.Depth, Stride: reply.Stride, SRQNum: num}, fds, nil
}

// createXRCQP makes an XRC receive QP of a domain; openQP opens one that
// any session made.
func (ss *session) createXRCQP(req hostif.XRCQPRequest) (any, []int, error) {
	if req.QPN != 0 {
		return nil, nil, fmt.Errorf("create XRC QP with QPN %d: %w", req.QPN, unix.EINVAL)
	}
	return ss.xrcQP(req, (*verbs.XRCD).CreateRecvQP)
}

func (ss *session) openQP(req hostif.XRCQPRequest) (any, []int, error) {
	return ss.xrcQP(req, func(x *verbs.XRCD) (*verbs.QP, error) { return x.OpenQP(req.QPN) })
}

// xrcQP makes a handle of an XRC receive QP with make. Its ring is a send
// queue of one entry the engine never fetches: the provider reads the
// state there.
func (ss *session) xrcQP(req hostif.XRCQPRequest, make func(*verbs.XRCD) (*verbs.QP, error)) (any, []int, error) {
	x := ss.xrcds[req.Xrcd]
	if x == nil {
		return nil, nil, fmt.Errorf("XRCD %d: %w", req.Xrcd, errNoObject)
	}
	if err := ss.take(resQP, 1); err != nil {
		return nil, nil, err
	}
	qp, err := make(x)
	if err != nil {
		ss.give(resQP, 1)
		return nil, nil, err
	}
	stride := hostif.SendStride(1, 0)
	r, err := ss.newRing("qp", hostif.RingSize(1, stride))
	var sq *hostif.WorkQueue
	if err == nil {
		if sq, err = hostif.NewWorkQueue(r.mem, 1, stride); err != nil {
			ss.freeRing(r)
		}
	}
	if err != nil {
		qp.Destroy()
		ss.give(resQP, 1)
		return nil, nil, err
	}
	q := &hostQP{qp: qp, ring: r, sq: sq, handle: ss.handle(), xrcd: req.Xrcd}
	publishState(q)
	ss.qps[q.handle] = q
	ss.s.own(qp, ss, req.UserHandle)
	reply := hostif.CreateQPReply{Handle: q.handle, QPN: qp.QPN(), SQDepth: 1, SQStride: uint32(stride),
		RQOffset: uint32(hostif.RingSize(1, stride))}
	return reply, []int{ss.pass(r)}, nil
}

// publishState writes an XRC receive QP's state into its handle's ring,
// which no engine mirror keeps: several handles share the QP.
func publishState(q *hostQP) {
	atomic.StoreUint32(q.sq.StateWord(), uint32(q.qp.State()))
}

// xrcdInUse reports whether an SRQ or QP of the session uses domain h.
func (ss *session) xrcdInUse(h uint32) bool {
	for _, s := range ss.srqs {
		if s.xrcd == h {
			return true
		}
	}
	for _, q := range ss.qps {
		if q.xrcd == h {
			return true
		}
	}
	return false
}
