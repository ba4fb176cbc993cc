package verbs

import (
	"fmt"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/hostif"
)

// What package rdmacm needs to run its IDs in the daemon that serves a
// device reached through Dial (rdma_cm through the daemon, as librdmacm
// drives the kernel's rdma_ucm).

// RemoteControl runs fn with the daemon session of a device reached
// through Dial, under the lock that serialises its control calls.
func (d *Device) RemoteControl(fn func(*client.Conn) error) error {
	r, ok := d.ops.(*remote)
	if !ok {
		return fmt.Errorf("not a device reached through a daemon: %w", ErrInvalidArgument)
	}
	return r.call(fn)
}

// CreateQPThrough creates a QP of a device reached through Dial as
// CreateQP does, with create sending the command that makes it (an rdma_cm
// ID's cm_create_qp): the QP is then like any other of the device's.
func (pd *PD) CreateQPThrough(init *QPInitAttr, create func(*client.Conn, hostif.CreateQPRequest) (*client.QP, error)) (*QP, error) {
	p, ok := pd.ops.(*remotePD)
	if !ok {
		return nil, fmt.Errorf("create QP: not a device reached through a daemon: %w", ErrInvalidArgument)
	}
	if err := pd.checkQP(init); err != nil {
		return nil, err
	}
	q := &QP{}
	ops, err := p.createQPThrough(q, init, create)
	if err != nil {
		return nil, err
	}
	q.ops = ops
	return q, nil
}
