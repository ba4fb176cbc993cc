package perftest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/softnic/softnic/tools/oob"
	"github.com/softnic/softnic/verbs"
)

// syncSpecID is perftest's SYNC_SPEC_ID, the work request ID of every
// exchange SEND and receive.
const syncSpecID = 5

// exchangeQP is perftest's comm->rdma_ctx in the -R mode: the RC QP that
// rdma_cm connects for the exchange (tx and rx depth 1) and its buffers.
// It carries each message of the exchange as one SEND (rdma_write_data,
// rdma_write_keys) into the one receive the peer keeps posted
// (post_one_recv_wqe, reposted by rdma_read_data and rdma_read_keys as soon
// as a message is taken). perftest sends from and receives into the same
// buffer; here the halves of one registration are apart, so a message
// arriving while this side's SEND is still unacknowledged cannot be
// overwritten by it.
type exchangeQP struct {
	ctx      context.Context
	pd       *verbs.PD
	mr       *verbs.MR
	scq, rcq *verbs.CQ
	qp       *verbs.QP
	wc       []verbs.WC
}

// exchangeBuf is where the receive lands; the send half follows it.
const exchangeBuf = oob.KeysBinLen

// newExchangeQP allocates the PD, buffer and CQs of the exchange QP on dev
// (create_comm_struct). The QP is created by the caller, on the rdma_cm ID,
// with initAttr, then given to attach. ctx bounds every wait.
func newExchangeQP(ctx context.Context, dev *verbs.Device) (*exchangeQP, error) {
	x := &exchangeQP{ctx: ctx, pd: dev.AllocPD(), wc: make([]verbs.WC, 1)}
	var err error
	if x.mr, err = x.pd.RegMR(make([]byte, 2*exchangeBuf), verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("exchange buffer: %w", err)
	}
	if x.scq, err = dev.CreateCQ(1, nil); err != nil {
		return nil, fmt.Errorf("exchange send CQ: %w", err)
	}
	if x.rcq, err = dev.CreateCQ(1, nil); err != nil {
		return nil, fmt.Errorf("exchange receive CQ: %w", err)
	}
	return x, nil
}

// initAttr is the exchange QP's creation attributes: one SEND and one
// receive at a time, of one SGE.
func (x *exchangeQP) initAttr() *verbs.QPInitAttr {
	return &verbs.QPInitAttr{SendCQ: x.scq, RecvCQ: x.rcq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
}

// attach adopts the created QP and posts its first receive, which perftest
// does before rdma_connect and rdma_accept so the peer's first message
// finds it.
func (x *exchangeQP) attach(qp *verbs.QP) error {
	x.qp = qp
	return x.postOneRecvWQE()
}

// postOneRecvWQE is post_one_recv_wqe: one receive of a keys message's
// size, the largest message of the exchange.
func (x *exchangeQP) postOneRecvWQE() error {
	wr := verbs.RecvWR{ID: syncSpecID, SGL: []verbs.SGE{x.mr.SGE(0, exchangeBuf)}}
	if err := x.qp.PostRecv(&wr); err != nil {
		return fmt.Errorf("post exchange receive: %w", err)
	}
	return nil
}

// Send is rdma_write_data: msg goes out as one signaled SEND, and the
// call returns once it completed (the peer acknowledged it).
func (x *exchangeQP) Send(what string, msg []byte, timeout time.Duration) error {
	if len(msg) > exchangeBuf {
		return fmt.Errorf("%w: %s of %d bytes exceeds the peer's %d-byte receive", oob.ErrMessageLength, what, len(msg), exchangeBuf)
	}
	copy(x.mr.Bytes()[exchangeBuf:], msg)
	wr := verbs.SendWR{ID: syncSpecID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{x.mr.SGE(exchangeBuf, len(msg))}}
	if err := x.qp.PostSend(&wr); err != nil {
		return fmt.Errorf("send %s: %w", what, err)
	}
	wc, err := x.await(x.scq, what, timeout)
	if err == nil && wc.Opcode != verbs.WCSend {
		err = fmt.Errorf("send %s: completion opcode %v", what, wc.Opcode)
	}
	return err
}

// Recv is rdma_read_data: it waits for the peer's message, which must be
// len(buf) bytes, copies it out and reposts the receive.
func (x *exchangeQP) Recv(what string, buf []byte, timeout time.Duration) error {
	wc, err := x.await(x.rcq, what, timeout)
	if err != nil {
		return err
	}
	if wc.Opcode != verbs.WCRecv || int(wc.ByteLen) != len(buf) {
		return fmt.Errorf("%w: receive %s: %d bytes (opcode %v), want %d", oob.ErrMessageLength, what, wc.ByteLen, wc.Opcode, len(buf))
	}
	copy(buf, x.mr.Bytes()[:len(buf)])
	return x.postOneRecvWQE()
}

// errExchangeTimeout is a message of the exchange that did not complete
// in time.
var errExchangeTimeout = errors.New("perftest: rdma_cm exchange timed out")

// await waits for the one completion on cq, which must be successful.
func (x *exchangeQP) await(cq *verbs.CQ, what string, timeout time.Duration) (verbs.WC, error) {
	ctx, cancel := context.WithTimeout(x.ctx, timeout)
	defer cancel()
	n, err := cq.Wait(ctx, x.wc)
	switch {
	case errors.Is(err, context.DeadlineExceeded) && x.ctx.Err() == nil:
		return verbs.WC{}, fmt.Errorf("%w: %s after %v", errExchangeTimeout, what, timeout)
	case err != nil:
		return verbs.WC{}, fmt.Errorf("%s: %w", what, err)
	case n != 1:
		return verbs.WC{}, fmt.Errorf("%s: no completion", what)
	}
	wc := x.wc[0]
	if wc.Status != verbs.WCSuccess || wc.WRID != syncSpecID {
		return wc, fmt.Errorf("%s: completion status %v, wr_id %d", what, wc.Status, wc.WRID)
	}
	return wc, nil
}

// close releases the buffer; the QP belongs to the rdma_cm ID.
func (x *exchangeQP) close() {
	if x.mr != nil {
		x.mr.Dereg()
	}
}
