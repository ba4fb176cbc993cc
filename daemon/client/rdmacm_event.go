package client

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// The daemon's event records, as the drain of a channel takes them: each
// becomes the Event the in-process backend would post, a connect
// request's with an ID made here for the daemon's.

// event turns the daemon's record into an event of this CM's IDs: a
// connect request's new ID is made here; records of IDs destroyed here
// meanwhile are dropped.
func (rc *dialedCM) event(rec *hostif.CMEvent) (rdmacm.Event, bool) {
	typ := rdmacm.EventType(rec.Type)
	rc.mu.Lock()
	id, listen := rc.ids[rec.ID], rc.ids[rec.Listen]
	rc.mu.Unlock()
	if typ == rdmacm.EventConnectRequest && id == nil && listen != nil {
		id = rc.newChild(rec.ID, listen)
	}
	if id == nil {
		if typ == rdmacm.EventConnectRequest {
			// The listener was destroyed here before the daemon heard:
			// the request's ID, the daemon's now, goes (a reject).
			rc.call(func(c *session.Conn) error { return c.CMDestroyID(rec.ID) })
		}
		return rdmacm.Event{}, false
	}
	mcast := typ == rdmacm.EventMulticastJoin || typ == rdmacm.EventMulticastError
	if !mcast { // a multicast event's peer is the group
		id.setAddrs(hostif.CMAddrPort(rec.Local, rec.LocalPort), hostif.CMAddrPort(rec.Peer, rec.PeerPort))
	}
	if typ == rdmacm.EventAddrResolved {
		id.mu.Lock()
		id.dev = rc.dev
		id.mu.Unlock()
	}
	n := min(int(rec.PrivateLen), len(rec.Private))
	ev := rdmacm.Event{Type: typ, ID: id.front, Reason: mad.RejectReason(rec.Reason), Param: rdmacm.ConnParam{
		PrivateData:        append([]byte(nil), rec.Private[:n]...),
		ResponderResources: rec.ResponderResources, InitiatorDepth: rec.InitiatorDepth,
		RetryCount: rec.RetryCount, RNRRetryCount: rec.RNRRetryCount}}
	if typ == rdmacm.EventConnectRequest {
		ev.Listen = listen.front
	}
	if typ == rdmacm.EventEstablished && id.isUD() {
		peer := hostif.CMAddrPort(rec.Peer, rec.PeerPort).Addr()
		ev.UD = &rdmacm.UDParam{AV: verbs.AddressVector{DGID: roce.GIDFromAddr(peer), SGIDIndex: rec.SGIDIndex, HopLimit: rec.HopLimit},
			QPN: rec.QPN, QKey: rec.QKey}
	}
	if mcast {
		ev.Group = hostif.CMAddrPort(rec.Peer, 0).Addr()
		ev.UD = &rdmacm.UDParam{AV: verbs.AddressVector{DGID: rdmacm.McastGID(ev.Group), SGIDIndex: rec.SGIDIndex,
			HopLimit: rec.HopLimit}, QPN: rec.QPN, QKey: rec.QKey}
	}
	ev.Err = rc.eventErr(typ, ev.Reason, unix.Errno(-rec.Status))
	return ev, true
}

// newChild makes the ID of a connect request to listen, the daemon's
// ID handle; an ID of a closed CM is destroyed at once.
func (rc *dialedCM) newChild(handle uint32, listen *dialedID) *dialedID {
	var id *dialedID
	front, open := rc.hooks.NewID(listen.front.PortSpace(), func(f *rdmacm.ID) rdmacm.IDBackend {
		id = &dialedID{rc: rc, front: f, handle: handle, dev: rc.dev}
		rc.register(id)
		return id
	})
	if !open {
		front.Destroy()
	}
	return id
}

// eventErr is the error of an event, as the ID in this process gives it.
func (rc *dialedCM) eventErr(typ rdmacm.EventType, reason mad.RejectReason, errno unix.Errno) error {
	switch {
	case typ == rdmacm.EventRejected:
		return rc.hooks.RejectError(reason)
	case typ == rdmacm.EventUnreachable && reason != 0:
		return fmt.Errorf("%w (SIDR status %d)", rdmacm.ErrRefused, reason) // a UD ID's refusal
	case typ == rdmacm.EventUnreachable:
		return rdmacm.ErrTimedOut
	case errno == 0:
		return nil
	}
	if e := cmErrnoErr(errno); e != nil {
		return fmt.Errorf("%v: %w (%w)", typ, e, errno)
	}
	return fmt.Errorf("%v: %w", typ, errno)
}
