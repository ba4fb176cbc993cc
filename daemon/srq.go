package daemon

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// The session's shared receive queues: basic, and the ring making that
// tm.go's and xrc.go's SRQs share.

// createSRQ makes a shared receive queue and its ring.
func (ss *session) createSRQ(req hostif.CreateSRQRequest) (any, []int, error) {
	return ss.makeSRQ(req, (*verbs.PD).NewSRQ, 0, 0)
}

// makeSRQ makes an SRQ with newSRQ, and its ring; a TM SRQ's holds tags
// of the user's tagged buffers, and an XRC or TM SRQ's CQ is cq.
func (ss *session) makeSRQ(req hostif.CreateSRQRequest, newSRQ func(pd *verbs.PD, depth, maxSGE int) (*verbs.SRQ, error),
	tags int, cq uint32) (hostif.CreateSRQReply, []int, error) {
	pd := ss.pds[req.PD]
	if pd == nil {
		return hostif.CreateSRQReply{}, nil, fmt.Errorf("PD %d: %w", req.PD, errNoObject)
	}
	if req.MaxWR == 0 || req.MaxWR > 1<<16 {
		return hostif.CreateSRQReply{}, nil, fmt.Errorf("SRQ of %d receives: %w", req.MaxWR, unix.EINVAL)
	}
	depth, maxSGE := hostif.Pow2(int(req.MaxWR)), max(int(req.MaxSGE), 1)
	if err := ss.take(resSRQ, 1); err != nil {
		return hostif.CreateSRQReply{}, nil, err
	}
	if err := ss.take(resTMTags, int64(tags)); err != nil {
		ss.give(resSRQ, 1)
		return hostif.CreateSRQReply{}, nil, err
	}
	fail := func(err error) (hostif.CreateSRQReply, []int, error) {
		ss.give(resSRQ, 1)
		ss.give(resTMTags, int64(tags))
		return hostif.CreateSRQReply{}, nil, err
	}
	srq, err := newSRQ(pd, depth, maxSGE)
	if err != nil {
		return fail(err)
	}
	if err := srq.Modify(int(req.Limit)); err != nil {
		return fail(err)
	}
	stride := hostif.RecvStride(maxSGE)
	r, err := ss.newRing("srq", hostif.RingSize(depth, stride))
	if err != nil {
		return fail(err)
	}
	wq, err := hostif.NewWorkQueue(r.mem, depth, stride)
	if err != nil {
		ss.freeRing(r)
		return fail(err)
	}
	h := ss.handle()
	ss.srqs[h] = &hostSRQ{srq: srq, ring: r, wq: wq, dec: hostif.NewRecvDecoder(stride, maxSGE), pd: req.PD,
		done: srq.MirrorRetired(wq.RetiredWord()), tags: tags, cq: cq}
	ss.publishFetchers()
	ss.s.own(srq, ss, req.UserHandle)
	return hostif.CreateSRQReply{Handle: h, Depth: uint32(depth), Stride: uint32(stride)}, []int{ss.pass(r)}, nil
}

// modifySRQ sets and arms the SRQ's limit.
func (ss *session) modifySRQ(req hostif.ModifySRQRequest) error {
	s := ss.srqs[req.Handle]
	if s == nil {
		return fmt.Errorf("SRQ %d: %w", req.Handle, errNoObject)
	}
	return s.srq.Modify(int(req.Limit))
}

// destroySRQ drops an SRQ no QP uses any more. The engine may be taking
// its entries in a pass: the ring is unmapped after Group.Do, once every
// engine is between passes.
func (ss *session) destroySRQ(h uint32) {
	s := ss.srqs[h]
	delete(ss.srqs, h)
	ss.publishFetchers()
	s.gone.Store(true)
	if s.xrcd != 0 {
		s.srq.Destroy() // out of its domain: requests naming it are refused
	}
	ss.s.betweenPasses()
	ss.s.disown(s.srq)
	ss.freeRing(s.ring)
	ss.give(resSRQ, 1)
	ss.give(resTMTags, int64(s.tags))
}

func (ss *session) destroySRQHandle(req hostif.HandleRequest) error {
	if ss.srqs[req.Handle] == nil {
		return errNoObject
	}
	for _, q := range ss.qps {
		if q.srq == req.Handle {
			return errBusy
		}
	}
	ss.destroySRQ(req.Handle)
	return nil
}
