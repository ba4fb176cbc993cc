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
	if d.remote == nil {
		return fmt.Errorf("not a device reached through a daemon: %w", ErrInvalidArgument)
	}
	return d.remote.call(fn)
}

// CreateQPThrough creates a QP of a device reached through Dial as
// CreateQP does, with create sending the command that makes it (an rdma_cm
// ID's cm_create_qp): the QP is then like any other of the device's.
func (pd *PD) CreateQPThrough(init *QPInitAttr, create func(*client.Conn, hostif.CreateQPRequest) (*client.QP, error)) (*QP, error) {
	if pd.dev.remote == nil {
		return nil, fmt.Errorf("create QP: not a device reached through a daemon: %w", ErrInvalidArgument)
	}
	if init.SendCQ == nil || init.RecvCQ == nil {
		return nil, fmt.Errorf("create QP: send and receive CQs are required: %w", ErrInvalidArgument)
	}
	if init.SendCQ.dev != pd.dev || init.RecvCQ.dev != pd.dev {
		return nil, fmt.Errorf("create QP: CQ of another device: %w", ErrInvalidArgument)
	}
	return pd.remoteQPThrough(init, create)
}
