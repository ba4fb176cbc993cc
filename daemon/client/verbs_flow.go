package client

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// CreateFlow implements verbs.FlowBackend: the daemon's flow, on its
// device's table.
func (r *dialed) CreateFlow(q *verbs.QP, attr *verbs.FlowAttr) (verbs.FlowOps, error) {
	dq, ok := q.Backend().(*dialedQP)
	if !ok {
		return nil, fmt.Errorf("create flow: a QP of another device: %w", verbs.ErrInvalidArgument)
	}
	var h uint32
	err := r.call(func(*session.Conn) error {
		var err error
		h, err = dq.q.CreateFlow(attr)
		return err
	})
	if errors.Is(err, unix.ENOMEM) { // past the device's or the user's bound
		return nil, fmt.Errorf("create flow: %w: %w", verbs.ErrFlowLimit, err)
	}
	if err != nil {
		return nil, fmt.Errorf("create flow: %w", daemonErr(err))
	}
	return &dialedFlow{r: r, h: h}, nil
}

// dialedFlow is a flow the daemon holds, by handle.
type dialedFlow struct {
	r *dialed
	h uint32
}

func (f *dialedFlow) Destroy() error {
	if err := f.r.call(func(c *session.Conn) error { return c.DestroyFlow(f.h) }); err != nil {
		return fmt.Errorf("destroy flow: %w", daemonErr(err))
	}
	return nil
}

// CreateRSSQP implements verbs.RSSBackend: the daemon's RSS QP over the
// table's QPs, the daemon's too.
func (p *dialedPD) CreateRSSQP(q *verbs.QP, a *verbs.RSSQPInitAttr, rss *roce.RSS) (verbs.QPOps, error) {
	req := hostif.CreateRSSQPRequest{Function: rxHashToeplitz, Fields: rss.Fields, Key: rss.Key}
	n := len(a.Table)
	for n > 1<<req.LogSize {
		req.LogSize++
	}
	if n > len(req.Wqs) {
		return nil, fmt.Errorf("create RSS QP: a table of %d: %w", n, verbs.ErrInvalidArgument)
	}
	for i, w := range a.Table {
		dq, ok := w.Backend().(*dialedQP)
		if !ok {
			return nil, fmt.Errorf("create RSS QP: a QP of another device: %w", verbs.ErrInvalidArgument)
		}
		req.Wqs[i] = dq.q.Handle
	}
	init := &verbs.QPInitAttr{SendCQ: a.CQ, RecvCQ: a.CQ, Type: verbs.QPTypeRawPacket, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}}
	return p.createQPThrough(q, init, func(c *session.Conn, qr hostif.CreateQPRequest) (*session.QP, error) {
		req.PD, req.CQ, req.UserHandle = qr.PD, qr.SendCQ, qr.UserHandle
		return c.CreateRSSQP(req)
	})
}

// rxHashToeplitz is IBV_RX_HASH_FUNC_TOEPLITZ.
const rxHashToeplitz = 1
