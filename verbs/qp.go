package verbs

import "github.com/softnic/softnic/ibtransport"

// QP is a queue pair (ibv_qp). Its methods are the transport's QP's
// (ibtransport.QP): post, modify, query, destroy.
type QP struct {
	*ibtransport.QP
}

// newQP wraps a transport QP the device created.
func newQP(t *ibtransport.QP) *QP {
	q := &QP{QP: t}
	t.Owner = q
	return q
}

// qpOf returns the verbs QP of a transport QP.
func qpOf(t *ibtransport.QP) *QP {
	q, _ := t.Owner.(*QP)
	return q
}
