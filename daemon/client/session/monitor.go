package session

import (
	"fmt"
	"time"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/hostif"
)

// Monitor is a connection to the daemon that opens no session: it asks
// what the daemon serves (softnic stat) and leaves the sessions, the
// engines and the daemon's log as they were.
type Monitor struct{ c *Conn }

// DialMonitor connects to the daemon listening on socket.
func DialMonitor(socket string) (*Monitor, error) {
	c, err := connect(socket)
	if err != nil {
		return nil, err
	}
	return &Monitor{c: c}, nil
}

// Close closes the connection.
func (m *Monitor) Close() error { return m.c.c.Close() }

// Resources is what a device's sessions hold (query_resources).
type Resources struct {
	// Sessions is how many there are, Total their objects together.
	Sessions int
	Total    hostif.ResourceCounts
	// Session lists them in the order they started.
	Session []hostif.SessionResources
}

// Resources asks the daemon for its device's resources, reading the
// sessions a reply at a time. The totals are the first reply's; sessions
// that come or go meanwhile may be missing from the list or still in it.
func (m *Monitor) Resources() (Resources, error) {
	var all Resources
	var after uint32
	for first := true; ; first = false {
		var r hostif.ResourcesReply
		if _, err := m.c.call(hostif.OpQueryResources, hostif.ResourcesRequest{After: after}, &r); err != nil {
			return Resources{}, err
		}
		if r.Count > hostif.ResourcesPerReply {
			return Resources{}, fmt.Errorf("%w: %d sessions in a reply", hostif.ErrMessage, r.Count)
		}
		if first {
			all.Sessions, all.Total = int(r.Sessions), r.Total
		}
		for _, s := range r.Session[:r.Count] {
			if s.ID <= after {
				return Resources{}, fmt.Errorf("%w: session %d after %d", hostif.ErrMessage, s.ID, after)
			}
			after = s.ID
			all.Session = append(all.Session, s)
		}
		if r.Count < hostif.ResourcesPerReply {
			return all, nil
		}
	}
}

// CMIDs asks the daemon for its device's rdma_cm IDs (query_cm_ids), a
// reply at a time, in (session, ID) order. IDs made or destroyed meanwhile
// may be missing from the list or still in it.
func (m *Monitor) CMIDs() ([]hostif.CMIDRecord, error) {
	var all []hostif.CMIDRecord
	var req hostif.CMIDsRequest
	for {
		var r hostif.CMIDsReply
		if _, err := m.c.call(hostif.OpQueryCMIDs, req, &r); err != nil {
			return nil, err
		}
		if r.Count > hostif.CMIDsPerReply {
			return nil, fmt.Errorf("%w: %d IDs in a reply", hostif.ErrMessage, r.Count)
		}
		for _, id := range r.ID[:r.Count] {
			if id.Session < req.AfterSession || (id.Session == req.AfterSession && id.ID <= req.AfterID) {
				return nil, fmt.Errorf("%w: ID %d:%d after %d:%d", hostif.ErrMessage, id.Session, id.ID,
					req.AfterSession, req.AfterID)
			}
			req = hostif.CMIDsRequest{AfterSession: id.Session, AfterID: id.ID}
			all = append(all, id)
		}
		if r.Count < hostif.CMIDsPerReply {
			return all, nil
		}
	}
}

// Raw sends msg as it is and waits up to timeout for any reply (Conn.Raw).
func (m *Monitor) Raw(msg []byte, timeout time.Duration) error { return m.c.Raw(msg, timeout) }

// DeviceCounters asks the daemon for its device's counters
// (query_counters), a reply at a time.
func (m *Monitor) DeviceCounters() ([]counters.Counter, error) {
	return m.counters(hostif.CountersRequest{})
}

// QPCounters asks the daemon for QP qpn's counters; an error that wraps
// unix.ENOENT when the device has no such QP.
func (m *Monitor) QPCounters(qpn uint32) ([]counters.Counter, error) {
	return m.counters(hostif.CountersRequest{Flags: hostif.CountersOfQP, QPN: qpn})
}

func (m *Monitor) counters(req hostif.CountersRequest) ([]counters.Counter, error) {
	var cs []counters.Counter
	for {
		var r hostif.CountersReply
		if _, err := m.c.call(hostif.OpQueryCounters, req, &r); err != nil {
			return nil, err
		}
		var err error
		if cs, err = hostif.DecodeCounters(cs, &r, req.From); err != nil {
			return nil, err
		}
		req.From += r.Count
		if r.Count == 0 || req.From >= r.Total {
			return cs, nil
		}
	}
}
