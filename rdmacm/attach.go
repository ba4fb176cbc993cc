package rdmacm

import (
	"fmt"

	"github.com/softnic/softnic/verbs"
)

// AttachQP takes the caller's QP as the ID's and readies it as CreateQP
// does one it makes; the ID lets go of it rather than destroy it.
func (id *inprocID) AttachQP(qp *verbs.QP) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dev == nil || id.qp != nil || id.state == stateDestroying {
		return fmt.Errorf("attach QP: %w", ErrState)
	}
	if t := qpType(id.ps); qp.Type() != t || qp.State() != verbs.QPSReset {
		return fmt.Errorf("attach QP: a %v QP in RESET connects: %w", t, ErrInvalidArgument)
	}
	if err := id.readyQP(qp); err != nil {
		return err
	}
	id.qp, id.lentQP = qp, true
	return nil
}
