package client

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client/session"
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
