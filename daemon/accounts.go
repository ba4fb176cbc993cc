package daemon

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// resource is a kind of thing a user can make the daemon hold.
type resource int

const (
	resSession resource = iota
	resPD
	resMR
	resCQ
	resQP
	resSRQ
	resAH
	resCMID
	resDescriptor
	resRingBytes
	resSharedBytes
	resDM
	resDMBytes
	resMW
	resMcast
	resTMTags
	resRawQP
	resFlow
	resXRCD
	numResources
)

var resourceNames = [numResources]string{"sessions", "PDs", "MRs", "CQs", "QPs", "SRQs", "AHs", "rdma_cm IDs",
	"descriptors", "ring bytes", "shared bytes", "DMs", "device memory bytes", "MWs", "multicast attachments",
	"tagged buffers", "raw packet QPs", "flows", "XRCDs"}

// errno is what the offender gets, as from a kernel device: a process
// out of descriptors gets EMFILE, one that opens too many sessions EAGAIN
// (as fork past RLIMIT_NPROC), any other object or byte past its bound
// ENOMEM.
func (r resource) errno() unix.Errno {
	switch r {
	case resSession:
		return unix.EAGAIN
	case resDescriptor:
		return unix.EMFILE
	}
	return unix.ENOMEM
}

// bounds returns l as one bound per resource (negative: none).
func (l Limits) bounds() [numResources]int64 {
	l = l.withDefaults()
	return [numResources]int64{int64(l.Sessions), int64(l.PDs), int64(l.MRs), int64(l.CQs), int64(l.QPs),
		int64(l.SRQs), int64(l.AHs), int64(l.CMIDs), int64(l.Descriptors), l.RingBytes, l.SharedBytes,
		int64(l.DMs), l.DMBytes, int64(l.MWs), int64(l.McastAttachments), int64(l.TMTags),
		int64(l.RawQPs), int64(l.Flows), int64(l.XRCDs)}
}

// accounts holds what each user's sessions hold, against the bounds.
type accounts struct {
	mu     sync.Mutex
	bounds [numResources]int64
	users  map[uint32]*account
}

// account is one user's use of each resource.
type account struct {
	uid   uint32
	held  [numResources]int64
	conns int // sessions holding the account, for dropping it at the last
}

func newAccounts(l Limits) *accounts {
	return &accounts{bounds: l.bounds(), users: map[uint32]*account{}}
}

// open returns uid's account for a new connection, or an error with
// EAGAIN when the user holds as many sessions as allowed.
func (as *accounts) open(uid uint32) (*account, error) {
	as.mu.Lock()
	defer as.mu.Unlock()
	a := as.users[uid]
	if a == nil {
		a = &account{uid: uid}
		as.users[uid] = a
	}
	if err := as.takeLocked(a, resSession, 1); err != nil {
		if a.conns == 0 {
			delete(as.users, uid)
		}
		return nil, err
	}
	a.conns++
	return a, nil
}

// close gives back the connection's session; the account goes with the
// user's last.
func (as *accounts) close(a *account) {
	as.mu.Lock()
	defer as.mu.Unlock()
	as.giveLocked(a, resSession, 1)
	if a.conns--; a.conns == 0 {
		delete(as.users, a.uid)
	}
}

// take charges n of r to a and to a session's tally held, or refuses
// with r's errno when that would pass the user's bound.
func (as *accounts) take(a *account, r resource, n int64, held *[numResources]int64) error {
	as.mu.Lock()
	defer as.mu.Unlock()
	if err := as.takeLocked(a, r, n); err != nil {
		return err
	}
	held[r] += n
	return nil
}

func (as *accounts) takeLocked(a *account, r resource, n int64) error {
	if b := as.bounds[r]; b >= 0 && (n > b || a.held[r] > b-n) {
		return fmt.Errorf("user %d holds %d %s of %d allowed (softnic daemon --help: the per-user limits): %w",
			a.uid, a.held[r], resourceNames[r], b, r.errno())
	}
	a.held[r] += n
	return nil
}

// give returns n of r that a session held.
func (as *accounts) give(a *account, r resource, n int64, held *[numResources]int64) {
	as.mu.Lock()
	n = min(n, held[r])
	held[r] -= n
	as.giveLocked(a, r, n)
	as.mu.Unlock()
}

func (as *accounts) giveLocked(a *account, r resource, n int64) {
	// Below zero would be the daemon's own miscount, which the tests
	// look for (held); a user is not given credit for it.
	a.held[r] = max(a.held[r]-n, 0)
}

// endSession gives back all a session held, and its session.
func (as *accounts) endSession(a *account, held *[numResources]int64) {
	as.mu.Lock()
	for r, n := range held {
		as.giveLocked(a, resource(r), n)
		held[r] = 0
	}
	as.mu.Unlock()
	as.close(a)
}

// held returns what uid holds of r (for tests and monitors).
func (as *accounts) held(uid uint32, r resource) int64 {
	as.mu.Lock()
	defer as.mu.Unlock()
	if a := as.users[uid]; a != nil {
		return a.held[r]
	}
	return 0
}
