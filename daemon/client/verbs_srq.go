package client

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/verbs"
)

// dialedSRQ is an SRQ the daemon's engines take receives from: this
// process posts into its ring.
type dialedSRQ struct {
	srq    *verbs.SRQ // the API's session.SRQ, which events name
	s      *session.SRQ
	r      *dialed
	handle uint64 // the user handle its events carry
	maxSGE int
	mu     sync.Mutex // serialises posters
	// posted counts the receives posted, taken the receive completions of
	// its QPs this process polled (dialedObjects.noteCompletions): the
	// daemon does not say how many receives its engines consumed.
	posted, taken atomic.Int64
}

func (p *dialedPD) CreateSRQ(front *verbs.SRQ, maxWR, maxSGE int) (verbs.SRQOps, error) {
	r := p.r
	h := r.objects.handle()
	var s *session.SRQ
	err := r.call(func(c *session.Conn) (err error) { s, err = c.CreateSRQ(p.handle, maxWR, maxSGE, 0, h); return err })
	if err != nil {
		return nil, fmt.Errorf("create SRQ: %w", daemonErr(err))
	}
	srq := &dialedSRQ{srq: front, s: s, r: r, handle: h, maxSGE: maxSGE}
	r.objects.srqs.Add(1)
	r.objects.add(h, srq)
	return srq, nil
}

// CreateTMSRQ makes a tag matching SRQ in the daemon, its completions
// going to init.CQ there.
func (p *dialedPD) CreateTMSRQ(front *verbs.SRQ, init verbs.TMSRQInit) (verbs.SRQOps, error) {
	cq, ok := init.CQ.Backend().(*dialedCQ)
	if !ok || cq.r != p.r {
		return nil, fmt.Errorf("create TM SRQ: a CQ of another device: %w", verbs.ErrInvalidArgument)
	}
	r := p.r
	h := r.objects.handle()
	var s *session.SRQ
	err := r.call(func(c *session.Conn) (err error) {
		s, err = c.CreateTMSRQ(p.handle, init.MaxWR, init.MaxSGE, cq.handle, init.MaxNumTags, init.MaxOps, h)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create TM SRQ: %w", daemonErr(err))
	}
	srq := &dialedSRQ{srq: front, s: s, r: r, handle: h, maxSGE: init.MaxSGE}
	r.objects.srqs.Add(1)
	r.objects.add(h, srq)
	return srq, nil
}

// PostOps sends the list operation to the daemon, which performs it and
// completes it into the SRQ's CQ before it answers.
func (s *dialedSRQ) PostOps(wr *verbs.OpsWR) (uint32, error) {
	var h uint32
	err := s.r.call(func(*session.Conn) (err error) { h, err = s.s.PostOp(wr); return err })
	if err != nil {
		return 0, fmt.Errorf("post SRQ ops: %w", daemonErr(err))
	}
	return h, nil
}

func (s *dialedSRQ) PostRecv(wr *verbs.RecvWR) error {
	if len(wr.SGL) > s.maxSGE {
		return fmt.Errorf("post receive: %d SGEs, at most %d: %w", len(wr.SGL), s.maxSGE, verbs.ErrInvalidArgument)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.s.PostRecv(wr); err != nil {
		return fmt.Errorf("post session.SRQ receive: %w", ringErr(err))
	}
	s.posted.Add(1)
	return nil
}

// Len is how many receives were posted and not yet completed in a CQ this
// process polled.
func (s *dialedSRQ) Len() int { return int(s.posted.Load() - s.taken.Load()) }

func (s *dialedSRQ) Modify(limit int) error {
	if limit < 0 {
		return fmt.Errorf("modify SRQ: limit %d: %w", limit, verbs.ErrInvalidArgument)
	}
	if err := s.r.call(func(*session.Conn) error { return s.s.Modify(limit) }); err != nil {
		return fmt.Errorf("modify SRQ: %w", daemonErr(err))
	}
	return nil
}

func (s *dialedSRQ) PostRecvList(wrs []verbs.RecvWR) (int, error) { return postEach(wrs, s.PostRecv) }
