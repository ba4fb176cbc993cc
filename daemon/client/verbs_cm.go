package client

import (
	"fmt"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// What package rdmacm needs to run its IDs in the daemon that serves a
// device reached through DialDevice (rdma_cm through the daemon, as librdmacm
// drives the kernel's rdma_ucm).

// CreateQPThrough creates a QP of a device reached through DialDevice as
// PD.CreateQP does, with create sending the command that makes it (an
// rdma_cm ID's cm_create_qp): the QP is then like any other of the
// device's.
func CreateQPThrough(pd *verbs.PD, init *verbs.QPInitAttr, create func(*Conn, hostif.CreateQPRequest) (*QP, error)) (*verbs.QP, error) {
	p, ok := pd.Backend().(*dialedPD)
	if !ok {
		return nil, fmt.Errorf("create QP: not a device reached through a daemon: %w", verbs.ErrInvalidArgument)
	}
	return pd.CreateQPWith(init, func(q *verbs.QP) (verbs.QPOps, error) { return p.createQPThrough(q, init, create) })
}
