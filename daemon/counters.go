package daemon

import (
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// serverCounters are the daemon's own counters, for an operator who
// wonders why a client was refused.
type serverCounters struct {
	// AcceptErrors counts failed accepts (the daemon out of descriptors,
	// say): the loop backs off and goes on.
	AcceptErrors atomic.Uint64 `rdma:"daemon_accept_errors"`
	// SessionsRefused counts connections over their user's session bound.
	SessionsRefused atomic.Uint64 `rdma:"daemon_sessions_refused"`
	// ForeignCommands counts commands refused from a process other than
	// the session's (a forked child, a process the socket was passed to):
	// one not of sharedOps, or under other credentials.
	ForeignCommands atomic.Uint64 `rdma:"daemon_foreign_commands"`
	// SessionsEndedExec and SessionsEndedCredentials count sessions ended
	// because their process exec'd or changed its credentials.
	SessionsEndedExec        atomic.Uint64 `rdma:"daemon_sessions_ended_exec"`
	SessionsEndedCredentials atomic.Uint64 `rdma:"daemon_sessions_ended_credentials"`
}

// Counters returns the served device's counters (verbs.Device's
// DeviceCounters) and the daemon's own: doorbell_wakeups, how many
// times clients woke the sleeping engines through the eventfd, and
// serverCounters.
func (s *Server) Counters() []counters.Counter {
	cs := s.dev.DeviceCounters()
	cs = append(cs, counters.Counter{Name: "doorbell_wakeups", Value: s.Doorbells()})
	return counters.Append(cs, "", &s.counters)
}

// queryCounters answers query_counters: the device's counters, or one
// QP's (any session's: like `rdma statistic qp show`, counters are the
// device's to show), from req.From on.
func (ss *session) queryCounters(req hostif.CountersRequest) (any, []int, error) {
	var cs []counters.Counter
	switch req.Flags {
	case 0:
		cs = ss.s.Counters()
	case hostif.CountersOfQP:
		var ok bool
		if cs, ok = ss.s.dev.QPCounters(req.QPN); !ok {
			return nil, nil, fmt.Errorf("QP %d: %w", req.QPN, unix.ENOENT)
		}
	default:
		return nil, nil, fmt.Errorf("counters flags %#x: %w", req.Flags, unix.EINVAL)
	}
	return hostif.NewCountersReply(cs, req.From), nil, nil
}

// QPCounterRefs returns every QP's number and live counters, in QPN
// order, for a monitor that reads many QPs (the daemon's metrics).
func (s *Server) QPCounterRefs() []ibv.QPCountersRef { return s.dev.QPCounterRefs() }
