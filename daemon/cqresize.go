package daemon

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// resizeCQ moves a CQ's completions to a new ring of at least req.Entries
// (ibv_resize_cq, as mlx5 resizes: the CQ's buffer is replaced and what it
// holds is copied). The client polls nothing meanwhile (the C provider
// holds its CQ's lock over the call), so the completions it has not polled
// are exactly those from its consumer index to the daemon's next: the
// engines, paused, copy them to the same indices of the new ring and from
// then on write only that one, which the reply passes. The old ring is
// unmapped here; the client's mapping of it is its own. The new ring is
// charged to the user's ring bytes before the old one is given back, so
// a resize is bounded as a create_cq is (ENOMEM past the bound).
func (ss *session) resizeCQ(req hostif.ResizeCQRequest) (any, []int, error) {
	cq := ss.cqs[req.Handle]
	if cq == nil {
		return nil, nil, fmt.Errorf("CQ %d: %w", req.Handle, errNoObject)
	}
	if req.Entries == 0 || req.Entries > verbs.MaxCQE {
		return nil, nil, fmt.Errorf("resize CQ to %d entries: %w", req.Entries, unix.EINVAL)
	}
	depth := hostif.Pow2(int(req.Entries))
	r, err := ss.newRing("cq", hostif.RingSize(depth, hostif.CQEntrySize))
	if err != nil {
		return nil, nil, err
	}
	ring, err := hostif.NewCompletionQueue(r.mem, depth)
	if err == nil {
		err = ss.s.dev.ResizeSharedCQ(cq.cq, ring)
	}
	if err != nil {
		ss.freeRing(r)
		if errors.Is(err, verbs.ErrInvalidArgument) {
			err = fmt.Errorf("%w: %w", err, unix.EINVAL)
		}
		return nil, nil, err
	}
	ss.freeRing(cq.ring)
	cq.ring = r
	return hostif.ResizeCQReply{Depth: uint32(depth)}, []int{ss.pass(r)}, nil
}
