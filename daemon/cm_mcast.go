package daemon

import (
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/rdmacm"
)

// cmJoinMcast joins an ID to a multicast group (rdma_join_multicast_ex).
// Each group joined counts against the user's McastAttachments, as the
// QP's attachment does through attach_mcast, until it is left or the ID
// destroyed.
func (ss *session) cmJoinMcast(sc *sessionCM, req hostif.CMMcastRequest) (any, []int, error) {
	c, err := sc.id(ss, req.ID)
	if err != nil {
		return nil, nil, err
	}
	addr := netip.AddrFrom16(req.Addr).Unmap()
	if err := ss.take(resMcast, 1); err != nil {
		return nil, nil, err
	}
	if err := c.id.JoinMulticast(addr, rdmacm.JoinFlags(req.Flags)); err != nil {
		ss.give(resMcast, 1)
		return nil, nil, err
	}
	c.groups++
	return hostif.Empty{}, nil, nil
}

// cmLeaveMcast leaves a group the ID joined.
func (ss *session) cmLeaveMcast(sc *sessionCM, req hostif.CMMcastRequest) (any, []int, error) {
	c, err := sc.id(ss, req.ID)
	if err != nil {
		return nil, nil, err
	}
	if err := c.id.LeaveMulticast(netip.AddrFrom16(req.Addr).Unmap()); err != nil {
		return nil, nil, fmt.Errorf("leave multicast: %w", err)
	}
	c.groups--
	ss.give(resMcast, 1)
	return hostif.Empty{}, nil, nil
}
