package verbs

import (
	"fmt"
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport"
)

// SRQ is a shared receive queue (ibv_srq): receives that any QP attached to
// it consumes.
type SRQ struct {
	pd    *PD
	rq    ibtransport.RecvQueue
	limit atomic.Int32 // armed limit, 0 when not armed
	// retired, if set, keeps a daemon client's ring's consumer index at
	// the receives the engines took (MirrorRetired).
	retired *ibtransport.RetiredMirror
	// remote is the daemon's SRQ, on a device reached through one.
	remote *remoteSRQ
}

// NewSRQ creates a shared receive queue of at least maxWR receives of at
// most maxSGE elements each (ibv_create_srq).
func (pd *PD) NewSRQ(maxWR, maxSGE int) (*SRQ, error) {
	if maxWR <= 0 || maxSGE <= 0 || maxWR > 1<<16 || maxSGE > 256 {
		return nil, fmt.Errorf("create SRQ (%d WRs, %d SGEs): %w", maxWR, maxSGE, ErrInvalidArgument)
	}
	if pd.dev.remote != nil {
		return pd.remoteSRQ(maxWR, maxSGE)
	}
	s := &SRQ{pd: pd}
	s.rq.Init(maxWR, maxSGE)
	return s, nil
}

// PostRecv posts a receive (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wr *RecvWR) error {
	if s.remote != nil {
		return s.remote.postRecv(wr)
	}
	if err := s.rq.Post(wr); err != nil {
		return err
	}
	s.pd.dev.group.Wake()
	return nil
}

// PostRecvList posts several receives with one doorbell; it returns how
// many it posted (on an error, wrs[n] failed).
func (s *SRQ) PostRecvList(wrs []RecvWR) (int, error) {
	if s.remote != nil {
		for i := range wrs {
			if err := s.remote.postRecv(&wrs[i]); err != nil {
				return i, err
			}
		}
		return len(wrs), nil
	}
	n, err := s.rq.PostList(wrs)
	if n > 0 {
		s.pd.dev.group.Wake()
	}
	return n, err
}

// Len returns the number of receives posted and not yet consumed; through
// a daemon, posted and not yet completed in a CQ this process polled.
func (s *SRQ) Len() int {
	if s.remote != nil {
		return s.remote.len()
	}
	return s.rq.Len()
}

// Modify sets the SRQ's limit and arms it (ibv_modify_srq with
// IBV_SRQ_LIMIT): when fewer than limit receives remain, an
// EventSRQLimitReached fires once. A limit of 0 disarms it.
func (s *SRQ) Modify(limit int) error {
	if s.remote != nil {
		return s.remote.modify(limit)
	}
	if limit < 0 || limit > s.rq.Cap() {
		return ErrInvalidArgument
	}
	s.limit.Store(int32(limit))
	return nil
}

// srqRing is the SRQ as the engine sees it (ibtransport.SharedRecvQueue).
type srqRing SRQ

func (r *srqRing) RecvQueue() *ibtransport.RecvQueue { return &r.rq }

// MirrorRetired keeps *word, the consumer index of a daemon client's
// ring for the SRQ, at the number of its receives the engines took, so
// that the SRQ holds no more than its depth, ring and queue together. Call
// it before any QP uses the SRQ; the daemon unmaps the word only once no
// QP does. It returns the mirror, for the entries the daemon drops.
func (s *SRQ) MirrorRetired(word *uint32) *ibtransport.RetiredMirror {
	s.retired = ibtransport.NewRecvRetiredMirror(word, &s.rq)
	return s.retired
}

// Consumed fires the limit event after the engine took a receive, and
// frees the receive's slot in a daemon client's ring.
func (r *srqRing) Consumed() {
	s := (*SRQ)(r)
	if s.retired != nil {
		s.retired.Publish()
	}
	if l := s.limit.Load(); l > 0 && s.rq.Len() < int(l) && s.limit.CompareAndSwap(l, 0) {
		s.pd.dev.emit(Event{Type: EventSRQLimitReached, SRQ: s})
	}
}
