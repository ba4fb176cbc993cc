package daemon

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/verbs"
)

// createTMSRQ makes a tag matching SRQ whose completions go to one of the
// session's CQs; its list's size counts against the user's TMTags.
func (ss *session) createTMSRQ(req hostif.CreateTMSRQRequest) (any, []int, error) {
	pd, cq := ss.pds[req.PD], ss.cqs[req.CQ]
	if pd == nil || cq == nil {
		return nil, nil, fmt.Errorf("TM SRQ of PD %d, CQ %d: %w", req.PD, req.CQ, errNoObject)
	}
	if req.MaxWR == 0 || req.MaxWR > 1<<16 || req.MaxNumTags == 0 || req.MaxNumTags > hostif.TMMaxNumTags ||
		req.MaxOps == 0 || req.MaxOps > hostif.TMMaxOps || req.Reserved != 0 {
		return nil, nil, fmt.Errorf("TM SRQ of %d receives, %d tags, %d ops: %w", req.MaxWR, req.MaxNumTags, req.MaxOps, unix.EINVAL)
	}
	base := hostif.CreateSRQRequest{PD: req.PD, MaxWR: req.MaxWR, MaxSGE: req.MaxSGE, Limit: req.Limit, UserHandle: req.UserHandle}
	init := verbs.TMSRQInit{MaxWR: int(hostif.Pow2(int(req.MaxWR))), MaxSGE: max(int(req.MaxSGE), 1), CQ: cq.cq,
		MaxNumTags: int(req.MaxNumTags), MaxOps: int(req.MaxOps)}
	reply, fds, err := ss.makeSRQ(base, func(pd *verbs.PD, _, _ int) (*verbs.SRQ, error) { return pd.NewTMSRQ(init) },
		int(req.MaxNumTags), req.CQ)
	if err != nil {
		return nil, nil, err
	}
	return reply, fds, nil
}

// postSRQOp performs one list operation of a TM SRQ: its completion is in
// the SRQ's CQ when the reply goes out.
func (ss *session) postSRQOp(req hostif.SRQOpRequest) (any, error) {
	s := ss.srqs[req.SRQ]
	if s == nil {
		return nil, fmt.Errorf("SRQ %d: %w", req.SRQ, errNoObject)
	}
	if req.NumSGE > ibv.MaxTMSGE || req.Reserved != 0 {
		return nil, fmt.Errorf("SRQ op with %d SGEs: %w", req.NumSGE, unix.EINVAL)
	}
	wr := verbs.OpsWR{ID: req.WRID, Opcode: verbs.OpsOpcode(req.Opcode), Flags: verbs.OpsFlags(req.Flags),
		UnexpectedCnt: req.UnexpectedCnt, Handle: req.Handle, RecvID: req.RecvWRID, Tag: req.Tag, Mask: req.Mask}
	if req.NumSGE == 1 {
		// The engine checks the lkey against the SRQ's PD when a message
		// lands, as for an ordinary receive.
		wr.SGL = []verbs.SGE{{Addr: req.SGEAddr, Length: req.SGELength, LKey: req.SGELKey}}
	}
	h, err := s.srq.PostOps(&wr)
	if errors.Is(err, verbs.ErrQueueFull) {
		return nil, fmt.Errorf("%w (%w)", unix.ENOMEM, err) // the list is full, as mlx5 says
	}
	if err != nil {
		return nil, err
	}
	return hostif.HandleReply{Handle: h}, nil
}
