package verbs

import (
	"fmt"
	"os"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// XRC QP types (ibv_qp_type's IBV_QPT_XRC_SEND and IBV_QPT_XRC_RECV).
const (
	QPTypeXRCSend = ibv.QPTypeXRCSend
	QPTypeXRCRecv = ibv.QPTypeXRCRecv
)

// XRCD is an XRC domain (ibv_xrcd): the XRC SRQs and XRC receive QPs that
// may serve one another. Domains opened on the same file are one domain,
// as the kernel's are (ibv_open_xrcd with a file descriptor): processes
// share XRC receive QPs and SRQs through it.
type XRCD struct {
	dev *Device
	ops XRCDOps
}

// XRCDOps is an XRC domain's backend.
type XRCDOps interface {
	// Close gives the domain up; ErrBusy while this handle's SRQs or
	// receive QPs remain.
	Close() error
	// CreateRecvQP makes the backend of q, an XRC receive QP of the
	// domain; OpenQP opens the domain's receive QP qpn (ibv_open_qp).
	CreateRecvQP(q *QP) (QPOps, error)
	OpenQP(q *QP, qpn uint32) (QPOps, error)
}

// XRCSRQOps is an XRC SRQ's backend: an SRQ's, with its number and its
// destruction (the SRQ leaves its domain).
type XRCSRQOps interface {
	SRQOps
	Num() uint32
	Destroy() error
}

// OpenXRCD opens an XRC domain (ibv_open_xrcd). f names the domain by its
// file (device and inode); oflags are open(2)'s: without os.O_CREATE the
// domain must exist already, and with os.O_CREATE|os.O_EXCL it must not.
// A nil f opens a private domain.
func (d *Device) OpenXRCD(f *os.File, oflags int) (*XRCD, error) {
	if oflags&^(os.O_CREATE|os.O_EXCL) != 0 {
		return nil, fmt.Errorf("open XRCD: flags %#x: %w", oflags, ErrInvalidArgument)
	}
	x := &XRCD{dev: d}
	ops, err := d.ops.OpenXRCD(x, f, oflags)
	if err != nil {
		return nil, err
	}
	x.ops = ops
	return x, nil
}

// Close closes the domain (ibv_close_xrcd). The domain lives on while
// other handles of it are open.
func (x *XRCD) Close() error { return x.ops.Close() }

// Backend returns the domain's backend.
func (x *XRCD) Backend() XRCDOps { return x.ops }

// CreateRecvQP creates an XRC receive QP in the domain (ibv_create_qp_ex
// with IBV_QPT_XRC_RECV and an xrcd): it has no queues; the requests it
// takes land in the SRQ of the domain each names. It starts in RESET.
func (x *XRCD) CreateRecvQP() (*QP, error) {
	q := &QP{}
	ops, err := x.ops.CreateRecvQP(q)
	if err != nil {
		return nil, err
	}
	q.ops = ops
	return q, nil
}

// OpenQP opens the domain's XRC receive QP qpn, which another handle of
// the domain created (ibv_open_qp): both handles modify, query and use one
// QP, which lives until the last of them is destroyed.
func (x *XRCD) OpenQP(qpn uint32) (*QP, error) {
	q := &QP{}
	ops, err := x.ops.OpenQP(q, qpn)
	if err != nil {
		return nil, err
	}
	q.ops = ops
	return q, nil
}

// NewXRCSRQ creates an XRC SRQ of domain x in pd (ibv_create_srq_ex with
// IBV_SRQT_XRC): the receives that requests naming its number (Num) take,
// completing in cq; RDMA and atomics on the receive QP check their keys
// against pd.
func (pd *PD) NewXRCSRQ(x *XRCD, cq *CQ, maxWR, maxSGE int) (*SRQ, error) {
	switch {
	case maxWR <= 0 || maxSGE <= 0 || maxWR > 1<<16 || maxSGE > 256:
		return nil, fmt.Errorf("create XRC SRQ (%d WRs, %d SGEs): %w", maxWR, maxSGE, ErrInvalidArgument)
	case x == nil || cq == nil:
		return nil, fmt.Errorf("create XRC SRQ: an XRCD and a CQ are required: %w", ErrInvalidArgument)
	case x.dev != pd.dev || cq.dev != pd.dev:
		return nil, fmt.Errorf("create XRC SRQ: XRCD or CQ of another device: %w", ErrInvalidArgument)
	}
	s := &SRQ{pd: pd}
	ops, err := pd.ops.CreateXRCSRQ(s, x, cq, maxWR, maxSGE)
	if err != nil {
		return nil, err
	}
	s.ops, s.xrc = ops, ops
	return s, nil
}

// Num returns an XRC SRQ's number (ibv_get_srq_num), which XRC send work
// requests name (SendWR.RemoteSRQN); ErrInvalidArgument on another SRQ.
func (s *SRQ) Num() (uint32, error) {
	if s.xrc == nil {
		return 0, fmt.Errorf("SRQ number: not an XRC SRQ: %w", ErrInvalidArgument)
	}
	return s.xrc.Num(), nil
}

// Destroy destroys an XRC SRQ (ibv_destroy_srq): requests that name it
// are refused from then on. Other SRQs go with their last user.
func (s *SRQ) Destroy() error {
	if s.xrc == nil {
		return fmt.Errorf("destroy SRQ: not an XRC SRQ: %w", ErrInvalidArgument)
	}
	return s.xrc.Destroy()
}
