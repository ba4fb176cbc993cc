package daemon

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A session lives as long as its process's address space and credentials
// of connect time. Each access to the client's memory finds out at once
// that the address space is gone (procmem), and each command checks both
// before it runs; between commands the daemon watches:
//
//   - the process's exit, on its pidfd (through the runtime's poller:
//     no thread waits);
//   - an exec or a change of credentials, every checkEvery, for every
//     session.
//
// Any of them ends the session as its client's exit would.

// checkEvery is how often the sessions' address spaces and credentials
// are checked between commands.
const checkEvery = time.Second

// watch starts watching ss's process for its exit. It owns the pidfd
// from then on (closing it when it fails); unwatch closes it.
func (s *Server) watch(ss *session) error {
	if err := unix.SetNonblock(ss.peer.pidfd, true); err != nil {
		unix.Close(ss.peer.pidfd)
		return err
	}
	f := os.NewFile(uintptr(ss.peer.pidfd), "softnic-client-pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return err
	}
	ss.pidFile = f
	go func() {
		// The poller wakes this when the pidfd becomes readable: the
		// process exited. A closed file ends the wait too.
		exited := false
		err := rc.Read(func(uintptr) bool {
			exited = ss.peer.exited()
			return exited
		})
		if err == nil && exited {
			s.endFromOutside(ss, "its process exited")
		}
	}()
	return nil
}

// unwatch stops watching ss's process and closes its pidfd.
func (s *Server) unwatch(ss *session) {
	if ss.pidFile != nil {
		ss.pidFile.Close()
	}
}

// endFromOutside makes ss's goroutine end the session: its blocked read,
// or its write to a client that reads no replies, returns at once.
func (s *Server) endFromOutside(ss *session, why string) {
	if ss.ending.CompareAndSwap(nil, &why) {
		ss.conn.SetDeadline(time.Unix(1, 0))
	}
}

// checkSessions ends, every checkEvery, the sessions whose process
// exec'd or changed credentials since they said hello.
func (s *Server) checkSessions() {
	defer s.wg.Done()
	t := time.NewTicker(checkEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.quit:
			return
		}
		for _, ss := range s.sessionList() {
			if why := ss.stale(); why != "" {
				s.endFromOutside(ss, why)
			}
		}
	}
}

// stale says why the session should end, or "".
func (ss *session) stale() string {
	ss.procMu.Lock()
	defer ss.procMu.Unlock()
	proc := ss.helloProc
	if proc == nil || ss.ending.Load() != nil {
		return ""
	}
	if !proc.Alive() {
		ss.s.counters.SessionsEndedExec.Add(1)
		return "its process exec'd"
	}
	uid, gid, err := ss.peer.ids()
	if err == nil && (uid != ss.peer.uid || gid != ss.peer.gid) {
		ss.s.counters.SessionsEndedCredentials.Add(1)
		return "its process changed credentials"
	}
	return ""
}

// sessionList returns the sessions now.
func (s *Server) sessionList() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := make([]*session, 0, len(s.sessions))
	for ss := range s.sessions {
		list = append(list, ss)
	}
	return list
}
