package daemon

import (
	"errors"
	"fmt"
	"net"
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
	proc *procmem.Process
	page *ring
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
	// received is the descriptor that came with the command being run,
	// or -1; a command that keeps it takes it (takeFD).
	received int
	// ringBytes is the shared memory of the session's CQ and QP rings.
	ringBytes int

	// The tables: only the session's goroutine touches them.
	next uint32
	pds  map[uint32]*verbs.PD
	mrs  map[uint32]*verbs.MR
	mrPD map[uint32]uint32
	// shared are the client's shared mappings (shared.go); mrShared names
	// the one each region inside such a mapping uses.
	shared   map[uint32]*sharedMemory
	mrShared map[uint32]uint32
	channels map[uint32]int // handle: the pipe's write end
	cqs      map[uint32]*hostCQ
	qps      map[uint32]*hostQP
	srqs     map[uint32]*hostSRQ
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
}

// newSession identifies the peer process (SO_PEERPIDFD: the process that
// connected, whatever its pid becomes) and opens its memory.
func newSession(s *Server, c *net.UnixConn) (*session, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	pidfd, serr := -1, error(nil)
	raw.Control(func(fd uintptr) { pidfd, serr = peerPidfd(int(fd)) })
	if serr != nil {
		return nil, fmt.Errorf("peer pidfd: %w", serr)
	}
	proc, err := procmem.FromPidfd(pidfd)
	if err != nil {
		return nil, err
	}
	ss := &session{s: s, conn: c, proc: proc, async: -1, pds: map[uint32]*verbs.PD{}, mrs: map[uint32]*verbs.MR{},
		mrPD: map[uint32]uint32{}, channels: map[uint32]int{}, cqs: map[uint32]*hostCQ{}, qps: map[uint32]*hostQP{},
		srqs: map[uint32]*hostSRQ{}, ahPD: map[uint32]uint32{}, shared: map[uint32]*sharedMemory{},
		mrShared: map[uint32]uint32{}, received: -1}
	ss.fetchers.Store(&[]fetcher{})
	ss.ahs.Store(&map[uint32]*verbs.AH{})
	return ss, nil
}

// peerPidfd returns a pidfd of the process at the other end of the socket:
// SO_PEERPIDFD (Linux 6.5) names the process that connected, whatever
// happens to its pid; older kernels give the pid (SO_PEERCRED), opened as
// a pidfd at once.
func peerPidfd(fd int) (int, error) {
	pidfd, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	if err == nil {
		return pidfd, nil
	}
	cred, cerr := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if cerr != nil {
		return -1, err
	}
	return unix.PidfdOpen(int(cred.Pid), 0)
}

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
	oob := make([]byte, unix.CmsgSpace(4)) // room for one descriptor: the kernel closes any more
	for {
		n, oobn, _, _, err := ss.conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		ss.received = oneReceived(oob[:oobn])
		reply, fds := ss.answer(buf[:n], out)
		if ss.received >= 0 { // passed with a command that takes none
			unix.Close(ss.received)
			ss.received = -1
		}
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		_, _, err = ss.conn.WriteMsgUnix(reply, oob, nil)
		for _, fd := range ss.closeAfterReply {
			unix.Close(fd)
		}
		ss.closeAfterReply = ss.closeAfterReply[:0]
		if err != nil {
			return
		}
	}
}

// oneReceived returns the descriptor that came with a message, or -1.
func oneReceived(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	fd := -1
	for _, m := range msgs {
		fds, rerr := unix.ParseUnixRights(&m)
		for _, f := range fds {
			if fd < 0 && err == nil && rerr == nil {
				fd = f
			} else {
				unix.Close(f)
			}
		}
	}
	return fd
}

// takeFD returns the descriptor that came with the command being run; the
// caller closes it.
func (ss *session) takeFD() (int, error) {
	fd := ss.received
	if fd < 0 {
		return -1, fmt.Errorf("%w: no descriptor passed", unix.EBADF)
	}
	ss.received = -1
	return fd, nil
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
		ss.s.cfg.Log.Debug("command failed", "op", h.Op, "pid", ss.proc.Pid(), "err", err)
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
	case errors.Is(err, errBusy):
		return unix.EBUSY
	case errors.Is(err, errProto), errors.Is(err, hostif.ErrMessage):
		return unix.EPROTO
	case errors.Is(err, procmem.ErrFault):
		return unix.EFAULT
	case errors.Is(err, procmem.ErrGone):
		return unix.ESRCH
	}
	return unix.EINVAL
}

// end destroys what the session made, in the order a driver's release of
// a uverbs file does: QPs first (after which no engine takes their work or
// writes their rings), then regions (after which no engine touches the
// process's memory), then CQs and the rest.
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
	ss.endCM() // the IDs let go of their QPs before the QPs go
	for h := range ss.qps {
		ss.destroyQP(h)
	}
	ss.conn.Close() // the client may learn the end now: its QPs are gone
	for h := range ss.srqs {
		ss.destroySRQ(h)
	}
	for h := range ss.mrs {
		ss.deregMR(hostif.HandleRequest{Handle: h})
	}
	ss.unmapShared()
	ss.proc.Close()
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
	if ss.page != nil {
		s.cfg.Log.Info("session ended", "pid", ss.proc.Pid())
	}
}
