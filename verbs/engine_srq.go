package verbs

import (
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport"
)

// engineSRQ is an SRQ of an in-process device, and the SRQ as the
// engines see it (ibtransport.SharedRecvQueue).
type engineSRQ struct {
	s     *SRQ
	e     *engine
	rq    ibtransport.RecvQueue
	limit atomic.Int32 // armed limit, 0 when not armed
	// retired, if set, keeps a daemon client's ring's consumer index at
	// the receives the engines took (SRQ.MirrorRetired).
	retired *ibtransport.RetiredMirror
}

func (p *enginePD) CreateSRQ(s *SRQ, maxWR, maxSGE int) (SRQOps, error) {
	es := &engineSRQ{s: s, e: p.e}
	es.rq.Init(maxWR, maxSGE)
	return es, nil
}

func (s *engineSRQ) PostRecv(wr *RecvWR) error {
	if err := s.rq.Post(wr); err != nil {
		return err
	}
	s.e.group.Wake()
	return nil
}

func (s *engineSRQ) PostRecvList(wrs []RecvWR) (int, error) {
	n, err := s.rq.PostList(wrs)
	if n > 0 {
		s.e.group.Wake()
	}
	return n, err
}

func (s *engineSRQ) Len() int { return s.rq.Len() }

func (s *engineSRQ) Modify(limit int) error {
	if limit < 0 || limit > s.rq.Cap() {
		return ErrInvalidArgument
	}
	s.limit.Store(int32(limit))
	return nil
}

func (s *engineSRQ) RecvQueue() *ibtransport.RecvQueue { return &s.rq }

// Consumed fires the limit event after the engine took a receive, and
// frees the receive's slot in a daemon client's ring.
func (s *engineSRQ) Consumed() {
	if s.retired != nil {
		s.retired.Publish()
	}
	if l := s.limit.Load(); l > 0 && s.rq.Len() < int(l) && s.limit.CompareAndSwap(l, 0) {
		s.e.d.emit(Event{Type: EventSRQLimitReached, SRQ: s.s})
	}
}
