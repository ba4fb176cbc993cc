package daemon

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	ibcm "github.com/softnic/softnic/ibtransport/cm"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/verbs"
)

// The connection manager through the daemon, in the shape of the kernel's
// rdma_ucm: the daemon runs package rdmacm on its device for each session,
// whose client drives the IDs with the cm_* commands and takes their
// events with cm_get_event when a channel's pipe is readable. An ID's QP
// is a session QP like create_qp's, lent to the ID (rdmacm.ID.AttachQP):
// the ID moves it through its states, the session destroys it.

// sessionCM is a session's connection manager: its own rdmacm.CM (IDs are
// the session's, as its other objects), its channels and IDs. Only the
// session's goroutine touches it.
type sessionCM struct {
	cm       *rdmacm.CM
	channels map[uint32]*cmChannel
	ids      map[uint32]*cmID
	handles  map[*rdmacm.ID]uint32
}

// cmID is one of the session's IDs: the channel its events go to, the
// client's handle for them, and the session QP lent to it (0: none).
type cmID struct {
	id      *rdmacm.ID
	channel uint32
	user    uint64
	qp      uint32
	groups  int64 // multicast groups joined (cm_mcast.go)
}

// cmChannel is an event channel: rdmacm queues its events, and each one
// queued writes a byte to the pipe whose read end the client polls.
type cmChannel struct {
	ch   *rdmacm.EventChannel
	mu   sync.Mutex // pipe is written by rdmacm's goroutines, closed at the session's end
	pipe int
}

// notify wakes the client: a full pipe already does.
func (c *cmChannel) notify() {
	c.mu.Lock()
	if c.pipe >= 0 {
		unix.Write(c.pipe, []byte{1})
	}
	c.mu.Unlock()
}

func (c *cmChannel) close() {
	c.ch.Close()
	c.mu.Lock()
	unix.Close(c.pipe)
	c.pipe = -1
	c.mu.Unlock()
}

// sessionCMs holds each session's connection manager, made with its first
// cm_* command (a map beside the session, so that sessions without one
// carry nothing).
var sessionCMs = struct {
	sync.Mutex
	m map[*session]*sessionCM
}{m: map[*session]*sessionCM{}}

// cmState returns the session's connection manager, made on first use
// over the daemon's device (its GID table gives the local addresses, the
// device resolves its peers).
func (ss *session) cmState() (*sessionCM, error) {
	sessionCMs.Lock()
	defer sessionCMs.Unlock()
	if sc := sessionCMs.m[ss]; sc != nil {
		return sc, nil
	}
	c, err := rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{ss.s.dev}, Route: ss.s.cfg.CMRoute, Neighbor: ss.s.cfg.CMNeighbor})
	if err != nil {
		return nil, err
	}
	sc := &sessionCM{cm: c, channels: map[uint32]*cmChannel{}, ids: map[uint32]*cmID{}, handles: map[*rdmacm.ID]uint32{}}
	sessionCMs.m[ss] = sc
	return sc, nil
}

// endCM destroys the session's IDs, which lets go of their QPs (the
// session destroys those next), and closes its channels. The session's
// end calls it before destroying its QPs.
func (ss *session) endCM() {
	sessionCMs.Lock()
	sc := sessionCMs.m[ss]
	delete(sessionCMs.m, ss)
	sessionCMs.Unlock()
	if sc == nil {
		return
	}
	sc.cm.Close()
	for _, c := range sc.channels {
		c.close()
	}
}

// withCM adapts a cm_* command to take the session's connection manager.
func withCM[T any](fn func(*session, *sessionCM, T) (any, []int, error)) handler {
	return with(func(ss *session, req T) (any, []int, error) {
		sc, err := ss.cmState()
		if err != nil {
			return nil, nil, err
		}
		body, fds, err := fn(ss, sc, req)
		if err != nil {
			// The errno librdmacm's callers would see; the reply gives it.
			err = fmt.Errorf("%w: %w", cmErrno(err), err)
		}
		return body, fds, err
	})
}

func (ss *session) cmCreateChannel(sc *sessionCM, _ hostif.Empty) (any, []int, error) {
	if err := ss.take(resDescriptor, 1); err != nil {
		return nil, nil, err
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		ss.give(resDescriptor, 1)
		return nil, nil, err
	}
	unix.SetNonblock(p[1], true)
	c := &cmChannel{ch: sc.cm.NewEventChannel(), pipe: p[1]}
	c.ch.SetNotify(c.notify)
	h := ss.handle()
	sc.channels[h] = c
	ss.closeAfterReply = append(ss.closeAfterReply, p[0])
	return hostif.HandleReply{Handle: h}, []int{p[0]}, nil
}

func (ss *session) cmCreateID(sc *sessionCM, req hostif.CMCreateIDRequest) (any, []int, error) {
	c := sc.channels[req.Channel]
	if c == nil {
		return nil, nil, fmt.Errorf("CM channel %d: %w", req.Channel, errNoObject)
	}
	if req.PortSpace > 0xffff {
		return nil, nil, fmt.Errorf("port space %#x: %w", req.PortSpace, unix.EINVAL)
	}
	if err := ss.take(resCMID, 1); err != nil {
		return nil, nil, err
	}
	id, err := sc.cm.CreateID(c.ch, mad.PortSpace(req.PortSpace))
	if err != nil {
		ss.give(resCMID, 1)
		return nil, nil, err
	}
	return hostif.HandleReply{Handle: sc.add(ss, id, req.Channel, req.UserHandle)}, nil, nil
}

// add gives id, charged to the session already, a handle of the session.
func (sc *sessionCM) add(ss *session, id *rdmacm.ID, channel uint32, user uint64) uint32 {
	h := ss.handle()
	sc.ids[h] = &cmID{id: id, channel: channel, user: user}
	sc.handles[id] = h
	sc.publish(ss)
	return h
}

// cmDestroyChannel closes an event channel no ID of the session sends its
// events to.
func (ss *session) cmDestroyChannel(sc *sessionCM, req hostif.CMGetEventRequest) (any, []int, error) {
	c := sc.channels[req.Channel]
	if c == nil {
		return nil, nil, fmt.Errorf("CM channel %d: %w", req.Channel, errNoObject)
	}
	for _, id := range sc.ids {
		if id.channel == req.Channel {
			return nil, nil, fmt.Errorf("CM channel %d: an ID's events go there: %w", req.Channel, errBusy)
		}
	}
	delete(sc.channels, req.Channel)
	c.close()
	ss.give(resDescriptor, 1)
	return hostif.Empty{}, nil, nil
}

// id returns the session's ID h. An ID whose QP the client destroyed
// with destroy_qp lets go of it first.
func (sc *sessionCM) id(ss *session, h uint32) (*cmID, error) {
	c := sc.ids[h]
	if c == nil {
		return nil, fmt.Errorf("CM ID %d: %w", h, errNoObject)
	}
	if c.qp != 0 {
		if q := ss.qps[c.qp]; q == nil || q.qp != c.id.QP() {
			c.id.DestroyQP()
			c.qp = 0
		}
	}
	return c, nil
}

func cmAddrReply(id *rdmacm.ID) hostif.CMAddrReply {
	l, p := id.LocalAddr(), id.PeerAddr()
	return hostif.CMAddrReply{LocalPort: l.Port(), PeerPort: p.Port(), Local: hostif.CMAddr(l.Addr()), Peer: hostif.CMAddr(p.Addr())}
}

func (ss *session) cmBind(sc *sessionCM, req hostif.CMAddrRequest) (any, []int, error) {
	c, err := sc.id(ss, req.ID)
	if err != nil {
		return nil, nil, err
	}
	if err := c.id.Bind(netip.AddrPortFrom(netip.AddrFrom16(req.Addr).Unmap(), req.Port)); err != nil {
		return nil, nil, err
	}
	return cmAddrReply(c.id), nil, nil
}

func (ss *session) cmQueryAddr(sc *sessionCM, req hostif.HandleRequest) (any, []int, error) {
	c, err := sc.id(ss, req.Handle)
	if err != nil {
		return nil, nil, err
	}
	return cmAddrReply(c.id), nil, nil
}

// maxCMTimeout bounds the timeouts a client gives (a minute).
const maxCMTimeout = 60000

// maxCMBacklog is the most connect requests a listener keeps unanswered
// (the kernel's default rdma_ucm max_backlog).
const maxCMBacklog = 1024

func (ss *session) cmResolveAddr(sc *sessionCM, req hostif.CMResolveAddrRequest) (any, []int, error) {
	c, err := sc.id(ss, req.ID)
	if err != nil {
		return nil, nil, err
	}
	var src netip.Addr
	if req.Src != ([16]byte{}) {
		src = netip.AddrFrom16(req.Src).Unmap()
	}
	dst := netip.AddrPortFrom(netip.AddrFrom16(req.Dst).Unmap(), req.DstPort)
	timeout := time.Duration(min(req.TimeoutMS, maxCMTimeout)) * time.Millisecond
	return hostif.Empty{}, nil, c.id.ResolveAddr(src, dst, timeout)
}

func (ss *session) cmResolveRoute(sc *sessionCM, req hostif.CMResolveRouteRequest) (any, []int, error) {
	c, err := sc.id(ss, req.ID)
	if err != nil {
		return nil, nil, err
	}
	return hostif.Empty{}, nil, c.id.ResolveRoute(time.Duration(min(req.TimeoutMS, maxCMTimeout)) * time.Millisecond)
}

// cmCreateQP makes a session QP as create_qp does and lends it to the ID,
// which moves it to INIT.
func (ss *session) cmCreateQP(sc *sessionCM, req hostif.CMCreateQPRequest) (any, []int, error) {
	c, err := sc.id(ss, req.ID)
	if err != nil {
		return nil, nil, err
	}
	if c.qp != 0 || c.id.Device() == nil {
		return nil, nil, fmt.Errorf("CM ID %d: %w", req.ID, rdmacm.ErrState)
	}
	var body any
	var fds []int
	switch verbs.QPType(req.QP.Type) {
	case verbs.QPTypeRC, verbs.QPTypeUD, verbs.QPTypeXRCSend:
		body, fds, err = ss.createQP(req.QP)
	case verbs.QPTypeXRCRecv: // its PD field names the XRCD
		body, fds, err = ss.createXRCQP(hostif.XRCQPRequest{Xrcd: req.QP.PD, UserHandle: req.QP.UserHandle})
	default:
		return nil, nil, fmt.Errorf("CM QP of type %d: %w", req.QP.Type, rdmacm.ErrInvalidArgument)
	}
	if err != nil {
		return nil, nil, err
	}
	reply := body.(hostif.CreateQPReply)
	q := ss.qps[reply.Handle]
	if err := c.id.AttachQP(q.qp); err != nil {
		ss.destroyQP(reply.Handle)
		return nil, nil, err
	}
	c.qp = reply.Handle
	return reply, fds, nil
}

func (ss *session) cmDetachQP(sc *sessionCM, req hostif.HandleRequest) (any, []int, error) {
	c, err := sc.id(ss, req.Handle)
	if err != nil {
		return nil, nil, err
	}
	if c.qp == 0 {
		return nil, nil, fmt.Errorf("CM ID %d has no QP: %w", req.Handle, rdmacm.ErrState)
	}
	c.qp = 0
	return hostif.Empty{}, nil, c.id.DestroyQP()
}

// connParam decodes struct rdma_conn_param.
func connParam(p *hostif.CMConnParam) (rdmacm.ConnParam, error) {
	if p.PrivateLen > hostif.CMPrivateDataMax {
		return rdmacm.ConnParam{}, fmt.Errorf("%d bytes of private data: %w", p.PrivateLen, rdmacm.ErrInvalidArgument)
	}
	return rdmacm.ConnParam{PrivateData: append([]byte(nil), p.Private[:p.PrivateLen]...),
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RetryCount: p.RetryCount, RNRRetryCount: p.RNRRetryCount, QPNum: p.QPNum}, nil
}

// ownsQPN reports whether a QP of the session has number qpn: an ID
// without a QP may connect only a QP of its own session (a REQ naming
// another's would point the peer at it).
func (ss *session) ownsQPN(qpn uint32) bool {
	for _, q := range ss.qps {
		if q.qp.QPN() == qpn {
			return true
		}
	}
	return false
}

// cmCall runs an ID's call that takes its connection parameters, then
// publishes the state its QP went to.
func (ss *session) cmCall(sc *sessionCM, p hostif.CMConnParam, call func(*rdmacm.ID, *rdmacm.ConnParam) error) (any, []int, error) {
	c, err := sc.id(ss, p.ID)
	if err != nil {
		return nil, nil, err
	}
	cp, err := connParam(&p)
	if err != nil {
		return nil, nil, err
	}
	if c.qp != 0 {
		cp.QPNum = 0 // the ID's own QP is the one
	} else if cp.QPNum != 0 && !ss.ownsQPN(cp.QPNum) {
		return nil, nil, fmt.Errorf("QP %#x is not the session's: %w", cp.QPNum, rdmacm.ErrInvalidArgument)
	}
	err = call(c.id, &cp)
	return hostif.Empty{}, nil, err
}

func (ss *session) cmConnect(sc *sessionCM, p hostif.CMConnParam) (any, []int, error) {
	return ss.cmCall(sc, p, (*rdmacm.ID).Connect)
}

func (ss *session) cmAccept(sc *sessionCM, p hostif.CMConnParam) (any, []int, error) {
	return ss.cmCall(sc, p, (*rdmacm.ID).Accept)
}

func (ss *session) cmReject(sc *sessionCM, p hostif.CMConnParam) (any, []int, error) {
	return ss.cmCall(sc, p, func(id *rdmacm.ID, cp *rdmacm.ConnParam) error { return id.Reject(cp.PrivateData) })
}

func (ss *session) cmInitQPAttr(sc *sessionCM, req hostif.CMInitQPAttrRequest) (any, []int, error) {
	c, err := sc.id(ss, req.ID)
	if err != nil {
		return nil, nil, err
	}
	attr, mask, err := c.id.InitQPAttr(verbs.QPState(req.State))
	if err != nil {
		return nil, nil, err
	}
	return hostif.ModifyQPRequestOf(0, &attr, mask), nil, nil
}

func (ss *session) cmEstablish(sc *sessionCM, req hostif.HandleRequest) (any, []int, error) {
	c, err := sc.id(ss, req.Handle)
	if err != nil {
		return nil, nil, err
	}
	return hostif.Empty{}, nil, c.id.Establish()
}

func (ss *session) cmListen(sc *sessionCM, req hostif.CMListenRequest) (any, []int, error) {
	c, err := sc.id(ss, req.ID)
	if err != nil {
		return nil, nil, err
	}
	// As the kernel's ucma: 0 is the most, and more than the most is it.
	backlog := req.Backlog
	if backlog == 0 || backlog > maxCMBacklog {
		backlog = maxCMBacklog
	}
	if err := c.id.Listen(int(backlog)); err != nil {
		return nil, nil, err
	}
	return cmAddrReply(c.id), nil, nil
}

func (ss *session) cmDisconnect(sc *sessionCM, req hostif.HandleRequest) (any, []int, error) {
	c, err := sc.id(ss, req.Handle)
	if err != nil {
		return nil, nil, err
	}
	err = c.id.Disconnect()
	return hostif.Empty{}, nil, err
}

func (ss *session) cmSetOption(sc *sessionCM, req hostif.CMSetOptionRequest) (any, []int, error) {
	c, err := sc.id(ss, req.ID)
	if err != nil {
		return nil, nil, err
	}
	if req.Value > 0xff {
		return nil, nil, fmt.Errorf("option value %d: %w", req.Value, rdmacm.ErrInvalidArgument)
	}
	return hostif.Empty{}, nil, c.id.SetOption(int(req.Option), uint8(req.Value))
}

// cmMigrateID sends an ID's events to another of the session's channels;
// a listener's later requests' IDs go there too.
func (ss *session) cmMigrateID(sc *sessionCM, req hostif.CMMigrateRequest) (any, []int, error) {
	c, err := sc.id(ss, req.ID)
	if err != nil {
		return nil, nil, err
	}
	ch := sc.channels[req.Channel]
	if ch == nil {
		return nil, nil, fmt.Errorf("CM channel %d: %w", req.Channel, errNoObject)
	}
	if err := c.id.Migrate(ch.ch); err != nil {
		return nil, nil, err
	}
	c.channel = req.Channel
	return hostif.Empty{}, nil, nil
}

// cmDestroyID destroys an ID; its QP, if any, stays the session's, in ERR.
func (ss *session) cmDestroyID(sc *sessionCM, req hostif.HandleRequest) (any, []int, error) {
	c, err := sc.id(ss, req.Handle)
	if err != nil {
		return nil, nil, err
	}
	delete(sc.ids, req.Handle)
	delete(sc.handles, c.id)
	ss.give(resCMID, 1)
	ss.give(resMcast, c.groups) // Destroy leaves them
	sc.publish(ss)
	err = c.id.Destroy()
	return hostif.Empty{}, nil, err
}

// cmErrno gives rdmacm's errors the errno librdmacm's callers see.
func cmErrno(err error) unix.Errno {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, rdmacm.ErrAddrInUse), errors.Is(err, ibcm.ErrServiceInUse):
		return unix.EADDRINUSE
	case errors.Is(err, rdmacm.ErrNotOnDevice):
		return unix.ENODEV
	case errors.Is(err, rdmacm.ErrNoDevice):
		return unix.EADDRNOTAVAIL
	case errors.Is(err, rdmacm.ErrNoRoute) && errors.Is(err, unix.EHOSTUNREACH):
		return unix.EHOSTUNREACH
	case errors.Is(err, rdmacm.ErrNoRoute):
		return unix.ENETUNREACH
	case errors.Is(err, rdmacm.ErrRefused):
		return unix.ECONNREFUSED
	case errors.Is(err, rdmacm.ErrTimedOut):
		return unix.ETIMEDOUT
	case errors.Is(err, rdmacm.ErrClosed):
		return unix.EBADF
	case errors.Is(err, rdmacm.ErrNotSupported):
		return unix.ENOSYS
	}
	return errnoOf(err)
}
