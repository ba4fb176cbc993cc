package verbs

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport"
)

// SRQ is a shared receive queue (ibv_srq): receives that any QP attached to
// it consumes.
type SRQ struct {
	pd  *PD
	ops SRQOps
	tm  bool      // a tag matching SRQ (NewTMSRQ)
	xrc XRCSRQOps // an XRC SRQ's (NewXRCSRQ)
}

// NewSRQ creates a shared receive queue of at least maxWR receives of at
// most maxSGE elements each (ibv_create_srq).
func (pd *PD) NewSRQ(maxWR, maxSGE int) (*SRQ, error) {
	if maxWR <= 0 || maxSGE <= 0 || maxWR > 1<<16 || maxSGE > 256 {
		return nil, fmt.Errorf("create SRQ (%d WRs, %d SGEs): %w", maxWR, maxSGE, ErrInvalidArgument)
	}
	s := &SRQ{pd: pd}
	ops, err := pd.ops.CreateSRQ(s, maxWR, maxSGE)
	if err != nil {
		return nil, err
	}
	s.ops = ops
	return s, nil
}

// PostRecv posts a receive (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wr *RecvWR) error { return s.ops.PostRecv(wr) }

// PostRecvList posts several receives with one doorbell; it returns how
// many it posted (on an error, wrs[n] failed).
func (s *SRQ) PostRecvList(wrs []RecvWR) (int, error) { return s.ops.PostRecvList(wrs) }

// Len returns the number of receives posted and not yet consumed; through
// a daemon, posted and not yet completed in a CQ this process polled.
func (s *SRQ) Len() int { return s.ops.Len() }

// Modify sets the SRQ's limit and arms it (ibv_modify_srq with
// IBV_SRQ_LIMIT): when fewer than limit receives remain, an
// EventSRQLimitReached fires once. A limit of 0 disarms it.
func (s *SRQ) Modify(limit int) error { return s.ops.Modify(limit) }

// MirrorRetired keeps *word, the consumer index of a daemon client's
// ring for the SRQ, at the number of its receives the engines took, so
// that the SRQ holds no more than its depth, ring and queue together. Call
// it before any QP uses the SRQ; the daemon unmaps the word only once no
// QP does. It returns the mirror, for the entries the daemon drops; nil
// on a device reached through a daemon, which hosts no client's rings.
func (s *SRQ) MirrorRetired(word *uint32) *ibtransport.RetiredMirror {
	var es *engineSRQ
	switch o := s.ops.(type) {
	case *engineSRQ:
		es = o
	case *engineTMSRQ:
		es = o.engineSRQ
	case *engineXRCSRQ:
		es = o.engineSRQ
	default:
		return nil
	}
	es.retired = ibtransport.NewRecvRetiredMirror(word, &es.rq)
	return es.retired
}
