package daemon

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"sync/atomic"

	"github.com/softnic/softnic/hostif"
)

// sessionless are the commands a connection may send without hello. They
// open no session: a monitor such as `softnic stat` puts nothing on the
// engine's list, counts as no session and leaves no line in the log.
var sessionless = map[hostif.Op]bool{hostif.OpHello: true, hostif.OpQueryResources: true, hostif.OpQueryCounters: true,
	hostif.OpQueryCMIDs: true}

// sessionIDs numbers the sessions of every Server of the process: an ID
// is never given twice, so a monitor pages through them in ID order.
var sessionIDs atomic.Uint32

// startResources gives a session that said hello its record: its ID, the
// client's pid and command name, and no objects yet.
func (ss *session) startResources() {
	r := &hostif.SessionResources{ID: sessionIDs.Add(1), PID: uint32(ss.peer.pid)}
	copy(r.Comm[:len(r.Comm)-1], ss.comm())
	ss.res.Store(r)
}

// comm returns the client's command name, or "" when it cannot be read or
// the process has exited (its pid may name another process by now).
func (ss *session) comm() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ss.peer.pid))
	if err != nil || ss.peer.exited() {
		return ""
	}
	return string(bytes.TrimRight(b, "\n"))
}

// publishResources replaces the session's record with one that counts its
// tables as they are now. Only the session's goroutine touches the
// tables; a monitor on another connection reads the record.
func (ss *session) publishResources() {
	old := ss.res.Load()
	if old == nil {
		return // no hello yet
	}
	r := *old
	r.Counts = hostif.ResourceCounts{PD: uint32(len(ss.pds)), CQ: uint32(len(ss.cqs)), QP: uint32(len(ss.qps)),
		MR: uint32(len(ss.mrs)), SRQ: uint32(len(ss.srqs)), AH: uint32(len(*ss.ahs.Load())),
		Channel: uint32(len(ss.channels))}
	if refs := ss.cmIDs.Load(); refs != nil {
		r.Counts.CMID = uint32(len(*refs))
	}
	ss.res.Store(&r)
}

// resources returns the records of the sessions, in ID order, as user
// viewer may see them: the pid and command of its own sessions only
// (root sees all), as a user sees only its own processes' resources.
func (s *Server) resources(viewer uint32) []hostif.SessionResources {
	s.mu.Lock()
	all := make([]hostif.SessionResources, 0, len(s.sessions))
	for ss := range s.sessions {
		if r := ss.res.Load(); r != nil {
			all = append(all, ss.seenBy(viewer, r))
			all[len(all)-1].Listening = ss.listeningCMIDs()
		}
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b hostif.SessionResources) int { return int(a.ID) - int(b.ID) })
	return all
}

// seenBy returns the session's record r as user viewer sees it.
func (ss *session) seenBy(viewer uint32, r *hostif.SessionResources) hostif.SessionResources {
	out := *r
	if viewer != 0 && viewer != ss.peer.uid {
		out.PID, out.Comm = 0, [16]byte{}
	}
	return out
}

// queryResources answers query_resources: the device's totals and the
// sessions after req.After, as many as a reply holds.
func (ss *session) queryResources(req hostif.ResourcesRequest) (any, []int, error) {
	all := ss.s.resources(ss.peer.uid)
	r := hostif.ResourcesReply{Sessions: uint32(len(all))}
	for _, one := range all {
		addCounts(&r.Total, &one.Counts)
		if one.ID > req.After && r.Count < hostif.ResourcesPerReply {
			r.Session[r.Count] = one
			r.Count++
		}
	}
	return r, nil, nil
}

func addCounts(sum, c *hostif.ResourceCounts) {
	sum.PD += c.PD
	sum.CQ += c.CQ
	sum.QP += c.QP
	sum.MR += c.MR
	sum.SRQ += c.SRQ
	sum.AH += c.AH
	sum.Channel += c.Channel
	sum.CMID += c.CMID
}
