package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/internal/procmem"
	"github.com/softnic/softnic/verbs"
)

// session is one client connection and the objects it made.
type session struct {
	s    *Server
	conn *net.UnixConn
	// peer is the process that connected, the only one the session
	// serves; acct its user's account, which every object is charged to.
	peer peer
	acct *account
	// held is what the session holds of each resource (under the
	// accounts' lock): given back whole when it ends.
	held [numResources]int64
	// pinned is the bytes of the pages its regions span, against the
	// process's RLIMIT_MEMLOCK.
	pinned int64
	// proc is the client's address space, from the descriptors it passed
	// at hello; nil before. helloProc is the same for the checker's
	// goroutine (checkSessions), which reads it under procMu: end sets
	// it nil there before it closes the descriptors.
	proc *procmem.Process
	// pager is the page table of the session's ODP regions (odp.go).
	pager     *procmem.Pager
	procMu    sync.Mutex
	helloProc *procmem.Process
	// pidFile is the peer's pidfd in the runtime's poller (watch).
	pidFile *os.File
	// ending, once set, is why the session is being ended from outside
	// its goroutine (the process exited, exec'd, changed credentials).
	ending atomic.Pointer[string]
	page   *ring
	// async is the write end of the client's async event pipe.
	async int

	// seenDoorbell is the doorbell value the engine took work for (first
	// engine's goroutine only); fetchers are the session's QPs and SRQs it
	// walks, swapped whole.
	seenDoorbell uint32
	fetchers     atomic.Pointer[[]fetcher]

	// closeAfterReply are descriptors passed in the reply being sent that
	// the daemon does not keep.
	closeAfterReply []int
	// passed are the descriptors that came with the command being run; a
	// command that keeps them takes them (takeFD, takeFDs).
	passed []int
	// byOther is set while a command of another process than the
	// session's runs (sharedOps): what asks for the caller's privileges
	// refuses it, since only the session's process's are known.
	byOther bool
	// ringBytes is the shared memory of the session's CQ and QP rings.
	ringBytes int

	// The tables: only the session's goroutine touches them.
	next uint32
	pds  map[uint32]*verbs.PD
	mrs  map[uint32]*hostMR
	mrPD map[uint32]uint32
	// shared are the client's shared mappings (shared.go); mrShared names
	// the one each region inside such a mapping uses.
	shared   map[uint32]*sharedMemory
	mrShared map[uint32]uint32
	dm       sessionDMs // device memory (dm.go)
	mws      map[uint32]*hostMW
	channels map[uint32]int // handle: the pipe's write end
	cqs      map[uint32]*hostCQ
	qps      map[uint32]*hostQP
	flows    map[uint32]*hostFlow // flow.go
	srqs     map[uint32]*hostSRQ
	xrcds    map[uint32]*verbs.XRCD // xrc.go
	ahPD     map[uint32]uint32
	// ahs is read by the engine (UD entries name AHs): replaced whole.
	ahs atomic.Pointer[map[uint32]*verbs.AH]
	// res is the session's record for monitors (query_resources), set at
	// hello and replaced after every command.
	res atomic.Pointer[hostif.SessionResources]
	// cmIDs is the session's rdma_cm IDs, in handle order, for
	// query_resources and query_cm_ids (sessionCM.publish).
	cmIDs atomic.Pointer[[]cmIDRef]
}

// hostCQ is a session's CQ: the verbs CQ the engines fill and its ring.
type hostCQ struct {
	cq   *verbs.CQ
	ring *ring
	// channel is the completion channel it notifies, 0 for none.
	channel uint32
}

// newSession makes the session of a connection from peer p, charged to
// account a.
func newSession(s *Server, c *net.UnixConn, p peer, a *account) *session {
	ss := &session{s: s, conn: c, peer: p, acct: a, async: -1, pds: map[uint32]*verbs.PD{}, mrs: map[uint32]*hostMR{},
		mrPD: map[uint32]uint32{}, channels: map[uint32]int{}, cqs: map[uint32]*hostCQ{}, qps: map[uint32]*hostQP{},
		srqs: map[uint32]*hostSRQ{}, ahPD: map[uint32]uint32{}, shared: map[uint32]*sharedMemory{},
		mrShared: map[uint32]uint32{}, mws: map[uint32]*hostMW{}, flows: map[uint32]*hostFlow{},
		xrcds: map[uint32]*verbs.XRCD{}}
	ss.fetchers.Store(&[]fetcher{})
	ss.ahs.Store(&map[uint32]*verbs.AH{})
	return ss
}

// take charges n of r to the session and its user, or fails with the
// errno the user's bound gives.
func (ss *session) take(r resource, n int64) error {
	return ss.s.accts.take(ss.acct, r, n, &ss.held)
}

// give returns n of r the session held.
func (ss *session) give(r resource, n int64) { ss.s.accts.give(ss.acct, r, n, &ss.held) }

// word returns a u32 of the session page.
func (ss *session) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&ss.page.mem[off])) }

func (ss *session) handle() uint32 {
	ss.next++
	return ss.next
}

// serve answers the client's commands until it goes, then ends the
// session.
func (ss *session) serve() {
	defer ss.end()
	buf := make([]byte, hostif.MaxMessage)
	out := make([]byte, hostif.MaxMessage)
	oob := make([]byte, oobSize)
	for {
		n, oobn, _, _, err := ss.conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 || ss.ending.Load() != nil {
			closeFDs(parseControl(oob[:oobn]).fds)
			return
		}
		rc := parseControl(oob[:oobn])
		ss.passed = rc.fds
		reply, fds, last := ss.receive(buf[:n], out, rc.cred)
		closeFDs(ss.passed) // passed with a command that takes none
		ss.passed = nil
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		_, _, err = ss.conn.WriteMsgUnix(reply, oob, nil)
		closeFDs(ss.closeAfterReply)
		ss.closeAfterReply = ss.closeAfterReply[:0]
		if err != nil || last {
			return
		}
	}
}

// receive answers one message from the sender with credentials cred:
// the session's own process, with the credentials it connected with,
// in the address space it said hello from, or for sharedOps another
// process under those credentials. It reports last when the
// session must end after the reply.
func (ss *session) receive(msg, out []byte, cred *unix.Ucred) (reply []byte, fds []int, last bool) {
	h, _ := hostif.DecodeHeader(msg)
	if err := ss.peer.check(cred, h.Op); err != nil {
		if errors.Is(err, errCredentials) {
			ss.s.counters.SessionsEndedCredentials.Add(1)
			ss.s.cfg.Log.Warn("session ended: its process changed credentials", "pid", ss.peer.pid, "err", err)
			return ss.reply(out, h, nil, err), nil, true
		}
		ss.s.counters.ForeignCommands.Add(1)
		return ss.reply(out, h, nil, err), nil, false
	}
	if ss.proc != nil && !ss.proc.Alive() {
		// The process exec'd: what it registered, and the session, were
		// of the address space that is gone.
		ss.s.counters.SessionsEndedExec.Add(1)
		ss.s.cfg.Log.Info("session ended: its process exec'd", "pid", ss.peer.pid)
		return ss.reply(out, h, nil, procmem.ErrGone), nil, true
	}
	ss.byOther = int(cred.Pid) != ss.peer.pid
	reply, fds = ss.answer(msg, out)
	ss.byOther = false
	return reply, fds, false
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// takeFD returns the one descriptor that came with the command being
// run; the caller closes it.
func (ss *session) takeFD() (int, error) {
	fds, err := ss.takeFDs(1)
	if err != nil {
		return -1, err
	}
	return fds[0], nil
}

// takeFDs returns the n descriptors that came with the command being
// run, EBADF unless exactly n came; the caller closes them.
func (ss *session) takeFDs(n int) ([]int, error) {
	if len(ss.passed) != n {
		return nil, fmt.Errorf("%w: %d descriptors passed, %d wanted", unix.EBADF, len(ss.passed), n)
	}
	fds := ss.passed
	ss.passed = nil
	return fds, nil
}

// answer runs one command and encodes its reply, with the descriptors to
// pass.
func (ss *session) answer(msg, out []byte) ([]byte, []int) {
	h, err := hostif.DecodeHeader(msg)
	if err != nil {
		// Answered all the same, with what could be read of the header.
		return ss.reply(out, h, nil, err), nil
	}
	if ss.page == nil && !sessionless[h.Op] {
		return ss.reply(out, h, nil, errProto), nil
	}
	body, fds, err := ss.run(h.Op, msg)
	if err != nil {
		fds = nil
	}
	return ss.reply(out, h, body, err), fds
}

var (
	errProto    = errors.New("hello first")
	errNoObject = errors.New("no such object")
	errBusy     = errors.New("object in use")
)

// reply encodes the reply to h: body on success, the errno of err otherwise.
func (ss *session) reply(out []byte, h hostif.Header, body any, err error) []byte {
	h.Status = 0
	if err != nil {
		h.Status = -int32(errnoOf(err))
		body = hostif.Empty{}
		ss.s.cfg.Log.Debug("command failed", "op", h.Op, "pid", ss.peer.pid, "err", err)
	}
	b, _ := hostif.Encode(out, h, body)
	return b
}

func errnoOf(err error) unix.Errno {
	var errno unix.Errno
	switch {
	case errors.As(err, &errno):
		return errno
	case errors.Is(err, errNoObject):
		return unix.ENOENT
	case errors.Is(err, errBusy), errors.Is(err, verbs.ErrBusy):
		return unix.EBUSY
	case errors.Is(err, errProto), errors.Is(err, hostif.ErrMessage):
		return unix.EPROTO
	case errors.Is(err, verbs.ErrNoRegion):
		return unix.ENOENT
	case errors.Is(err, verbs.ErrNotSupported):
		return unix.EOPNOTSUPP
	case errors.Is(err, procmem.ErrFault), errors.Is(err, verbs.ErrFault):
		return unix.EFAULT
	case errors.Is(err, procmem.ErrGone):
		return unix.ESRCH
	case errors.Is(err, procmem.ErrDescriptor):
		return unix.EBADF
	case errors.Is(err, verbs.ErrMcastLimit), errors.Is(err, verbs.ErrFlowLimit):
		return unix.ENOMEM
	case errors.Is(err, hostif.ErrFlowUnsupported):
		return unix.EOPNOTSUPP
	}
	return unix.EINVAL
}

// end destroys what the session made, in the order a driver's release of
// a uverbs file does: QPs first (after which no engine takes their work or
// writes their rings), then regions (after which no engine touches the
// process's memory), then CQs and the rest; then it gives its user back
// whatever it held.
func (ss *session) end() {
	s := ss.s
	if ss.page != nil { // a connection that never said hello was never on the engine's list
		s.mu.Lock()
		s.host.remove(ss)
		s.mu.Unlock()
		// A pass of the first engine that began before the removal may
		// still read the session page.
		s.betweenPasses()
	}
	ss.endCM()        // the IDs let go of their QPs before the QPs go
	ss.destroyFlows() // a QP with flows is busy
	for h, q := range ss.qps {
		if q.qp.IsRSS() { // before the work queues of its table
			ss.destroyQP(h)
		}
	}
	for h := range ss.qps {
		ss.destroyQP(h)
	}
	ss.conn.Close() // the client may learn the end now: its QPs are gone
	for h := range ss.srqs {
		ss.destroySRQ(h)
	}
	for h := range ss.xrcds { // after their SRQs and QPs
		ss.closeXRCD(hostif.HandleRequest{Handle: h})
	}
	for h := range ss.mws { // bound windows keep their regions
		ss.deallocMW(hostif.HandleRequest{Handle: h})
	}
	for h := range ss.mrs {
		ss.deregMR(hostif.HandleRequest{Handle: h})
	}
	ss.unmapShared()
	ss.freeDMs()
	ss.procMu.Lock()
	ss.helloProc = nil
	ss.procMu.Unlock()
	if ss.proc != nil {
		ss.proc.Close()
	}
	for h := range ss.cqs {
		ss.dropCQ(h)
	}
	for h, fd := range ss.channels {
		unix.Close(fd)
		delete(ss.channels, h)
	}
	s.mu.Lock() // deliver writes to async under it
	if ss.async >= 0 {
		unix.Close(ss.async)
		ss.async = -1
	}
	s.mu.Unlock()
	ss.page.close()
	s.unwatch(ss)
	s.accts.endSession(ss.acct, &ss.held)
	if ss.page != nil {
		s.cfg.Log.Info("session ended", "pid", ss.peer.pid)
	}
}
