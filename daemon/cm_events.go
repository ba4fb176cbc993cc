package daemon

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/rdmacm"
)

// cmGetEvent takes the next event of a channel for the client (EAGAIN
// when none waits). A connect request gives the new ID a handle of the
// session here; events of IDs the client destroyed meanwhile are dropped.
// The state the event left the ID's QP in is published first, so that
// the client may post as soon as it reads ESTABLISHED.
func (ss *session) cmGetEvent(sc *sessionCM, req hostif.CMGetEventRequest) (any, []int, error) {
	c := sc.channels[req.Channel]
	if c == nil {
		return nil, nil, fmt.Errorf("CM channel %d: %w", req.Channel, errNoObject)
	}
	for {
		ev, ok := c.ch.TryGet()
		if !ok {
			return nil, nil, unix.EAGAIN
		}
		if rec, ok := ss.cmRecord(sc, ev); ok {
			return rec, nil, nil
		}
	}
}

// cmRecord is the client's record of ev, or false if the event's ID is
// gone.
func (ss *session) cmRecord(sc *sessionCM, ev rdmacm.Event) (hostif.CMEvent, bool) {
	var rec hostif.CMEvent
	if ev.Type == rdmacm.EventConnectRequest {
		lh, ok := sc.handles[ev.Listen]
		if !ok {
			ev.ID.Destroy() // rejects the request of a listener destroyed meanwhile
			return rec, false
		}
		if ss.take(resCMID, 1) != nil {
			ev.ID.Destroy() // rejects the request: the user holds as many IDs as allowed
			return rec, false
		}
		l := sc.ids[lh]
		rec.Listen = lh
		sc.add(ss, ev.ID, l.channel, l.user)
	}
	h, ok := sc.handles[ev.ID]
	if !ok {
		return rec, false
	}
	c := sc.ids[h]
	local, peer := ev.ID.LocalAddr(), ev.ID.PeerAddr()
	rec.Type, rec.Status, rec.ID, rec.UserHandle = uint32(ev.Type), -int32(cmErrno(ev.Err)), h, c.user
	rec.LocalPort, rec.PeerPort = local.Port(), peer.Port()
	rec.Local, rec.Peer = hostif.CMAddr(local.Addr()), hostif.CMAddr(peer.Addr())
	if ev.Type == rdmacm.EventMulticastJoin || ev.Type == rdmacm.EventMulticastError {
		rec.Peer, rec.PeerPort = hostif.CMAddr(ev.Group), 0 // the group, not the ID's peer
	}
	p := &ev.Param
	rec.ResponderResources, rec.InitiatorDepth, rec.RetryCount, rec.RNRRetryCount =
		p.ResponderResources, p.InitiatorDepth, p.RetryCount, p.RNRRetryCount
	rec.Reason = uint16(ev.Reason)
	rec.PrivateLen = uint16(copy(rec.Private[:], p.PrivateData))
	if ud := ev.UD; ud != nil {
		rec.QPN, rec.QKey, rec.SGIDIndex, rec.HopLimit = ud.QPN, ud.QKey, ud.AV.SGIDIndex, ud.AV.HopLimit
	}
	return rec, true
}
