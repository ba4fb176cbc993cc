package rdmacm

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/softnic/softnic/ibtransport/cm"
	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/verbs"
)

// The passive side: Listen registers the port's service ID with the IB CM
// of each device the ID is bound to; each REQ becomes a new ID and an
// EventConnectRequest (onREQ); Accept moves its QP to RTS and replies with
// a REP; the RTU makes it established.

// cmaMRAServiceTimeout is the service timeout of the MRA that answers a
// REQ once its connect request is queued for the program (cma.c's
// CMA_CM_MRA_SETTING: 4.096 µs × 2^24, about 69 s): the active side waits
// that long for the program to accept before it sends the REQ again.
const cmaMRAServiceTimeout = 24

// errBacklogFull is a REQ that finds its listener's backlog full.
var errBacklogFull = errors.New("rdmacm: the listener's backlog is full")

// Listen registers the port's service ID with the IB CM of each device
// the ID is bound to (every device for an ID bound to none).
func (id *inprocID) Listen(backlog int) error {
	if !id.LocalAddr().IsValid() {
		if err := id.Bind(netip.AddrPortFrom(netip.IPv6Unspecified(), 0)); err != nil {
			return err
		}
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != stateIdle {
		return fmt.Errorf("listen: %w", ErrState)
	}
	devs := id.c.cfg.Devices
	if id.dev != nil {
		devs = []*verbs.Device{id.dev}
	}
	sid := mad.ServiceID(id.ps, id.local.Port())
	for _, d := range devs {
		l, err := d.CM().Listen(sid, func(ev cm.Event) { id.onREQ(d, ev) })
		if err != nil {
			for _, l := range id.listens {
				l.Close()
			}
			id.listens = nil
			return fmt.Errorf("listen on %v: %w", id.local, err)
		}
		id.listens = append(id.listens, l)
	}
	if backlog <= 0 || backlog > MaxBacklog {
		backlog = MaxBacklog
	}
	id.state, id.backlog = stateListen, backlog
	return nil
}

// onREQ turns a REQ that came to the listener on dev into a new ID and an
// EventConnectRequest, or rejects it.
func (id *inprocID) onREQ(dev *verbs.Device, ev cm.Event) {
	if ev.Type == cm.EventSIDRREQReceived && id.isUD() {
		id.onSIDRREQ(dev, ev)
		return
	}
	if ev.Type != cm.EventREQReceived || id.isUD() {
		return
	}
	child, err := id.newChild(dev, ev)
	switch {
	case errors.Is(err, errBacklogFull):
		// As the kernel's CM when the ucma has no room (ENOMEM): no
		// answer, the active side's next retry is a new request.
		ev.Conn.Drop()
		return
	case err != nil:
		// As cma.c: a request the listener cannot take is a consumer
		// reject.
		ev.Conn.Reject(mad.RejectConsumer, nil)
		return
	}
	ev.Conn.SetHandler(child.onPassiveEvent)
	id.post(Event{Type: EventConnectRequest, ID: child.front, Listen: id.front, Param: ConnParam{
		PrivateData:        ev.PrivateData[mad.CMAHeaderLen:],
		ResponderResources: ev.ResponderResources, InitiatorDepth: ev.InitiatorDepth,
		RetryCount: ev.RetryCount, RNRRetryCount: ev.RNRRetryCount}})
	// As cma.c once the request is queued: an MRA, delayed (sent only to
	// a resent REQ, so that the active side then waits for the program
	// rather than give up; a prompt answer needs none), which the
	// program's answer makes moot.
	ev.Conn.DelayMRA(cmaMRAServiceTimeout, nil)
}

// newChild makes the ID of a connection request, if the listener takes it.
func (id *inprocID) newChild(dev *verbs.Device, ev cm.Event) (*inprocID, error) {
	if len(ev.PrivateData) < mad.CMAHeaderLen {
		return nil, fmt.Errorf("REQ without an rdma_cm header: %w", ErrInvalidArgument)
	}
	h := mad.CMAHeader(ev.PrivateData[:mad.CMAHeaderLen])
	if err := h.Check(); err != nil {
		return nil, err
	}
	gi := -1
	for i, g := range dev.GIDTable() {
		if g == ev.LocalGID {
			gi = i
		}
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	switch {
	case id.state != stateListen:
		return nil, ErrState
	case gi < 0:
		return nil, fmt.Errorf("REQ to GID %v, not the device's: %w", ev.LocalGID, ErrNoDevice)
	case !id.matches(h.DstAddr().Unmap()):
		return nil, fmt.Errorf("REQ to %v, listening on %v: %w", h.DstAddr(), id.local, ErrInvalidArgument)
	case id.pending >= id.backlog:
		return nil, fmt.Errorf("%d connect requests queued: %w", id.pending, errBacklogFull)
	}
	var child *inprocID
	front := id.c.front.newID(id.ps, func(f *ID) IDBackend {
		child = &inprocID{front: f, c: id.c, ps: id.ps, state: stateRequested, dev: dev, gidIndex: gi,
			local: netip.AddrPortFrom(h.DstAddr().Unmap(), id.local.Port()),
			peer:  netip.AddrPortFrom(h.SrcAddr().Unmap(), h.SrcPort()),
			conn:  ev.Conn, listen: id, req: ev, tos: id.tos, ackTimeout: id.ackTimeout,
			ourPSN: rand.Uint32() & header.PSNMask}
		return child
	})
	child.ch.Store(id.ch.Load())
	if !id.c.front.add(front) {
		return nil, ErrClosed
	}
	id.pending++
	return child, nil
}

// matches reports whether a REQ to dst is for this listener, as cma.c's
// cma_match_private_data: a listener bound to a wildcard or loopback
// address takes every address, an IPv4 one only IPv4 (the kernel makes an
// IPv4 bind AF_INET-only); another takes its own address. Called under
// mu.
func (id *inprocID) matches(dst netip.Addr) bool {
	local := id.local.Addr()
	switch {
	case anyAddr(local) && local.Is4():
		return dst.Is4()
	case anyAddr(local):
		return true
	}
	return local == dst
}

// RequestTaken is one of the listener's connect requests leaving its
// channel for the program.
func (id *inprocID) RequestTaken() {
	id.mu.Lock()
	if id.pending > 0 {
		id.pending--
	}
	id.mu.Unlock()
}

// Accept moves the QP to RTS along the REQ's path and replies with a REP
// (for a UD ID with a SIDR_REP, inproc_ud.go).
func (id *inprocID) Accept(p *ConnParam) error {
	id.mu.Lock()
	if id.state != stateRequested || (id.qp == nil && (p.QPNum == 0 || id.isUD())) {
		id.mu.Unlock()
		return fmt.Errorf("accept: %w", ErrState)
	}
	if id.isUD() {
		err := id.acceptUD(p)
		id.mu.Unlock()
		return err
	}
	if len(p.PrivateData) > mad.REPPrivateDataLen {
		id.mu.Unlock()
		return fmt.Errorf("accept: %d bytes of private data: %w", len(p.PrivateData), ErrInvalidArgument)
	}
	r := &id.req
	id.param = *p
	pa := id.reqPath(min(p.ResponderResources, r.InitiatorDepth), min(p.InitiatorDepth, r.ResponderResources))
	id.path = &pa
	var err error
	qp := id.qp
	if qp != nil {
		err = toRTS(qp, &pa)
	}
	rep := cm.REPParams{LocalQPN: id.localQPN(p), StartingPSN: id.ourPSN, ResponderResources: pa.responderResources,
		InitiatorDepth: pa.initiatorDepth, RNRRetryCount: p.RNRRetryCount, PrivateData: p.PrivateData}
	conn := id.conn
	if err == nil {
		id.state = stateAccepted
	}
	id.mu.Unlock()
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	// Data from the peer before its RTU means the RTU was lost: take the
	// connection as up, as cma.c does on IB_EVENT_COMM_EST, rather than
	// wait for the REP's retry to bring another RTU.
	if qp != nil {
		id.dev.OnCommEst(qp, func() { go conn.Established() }) // not on the engine goroutine
	}
	if err := conn.Accept(rep); err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	return nil
}

// reqPath is the path of the connection the REQ asks for, with these
// resources. Called under mu.
func (id *inprocID) reqPath(responderResources, initiatorDepth uint8) path {
	r := &id.req
	return path{
		av: verbs.AddressVector{DGID: r.PeerGID, SGIDIndex: uint8(id.gidIndex), HopLimit: hopLimit,
			TrafficClass: cmp.Or(id.tos, r.TrafficClass), FlowLabel: r.FlowLabel},
		mtu:     min(r.PathMTU, id.dev.ActiveMTU()),
		destQPN: r.RemoteQPN, recvPSN: id.ourPSN, sendPSN: r.StartingPSN,
		responderResources: responderResources, initiatorDepth: initiatorDepth,
		retryCount: r.RetryCount, rnrRetryCount: r.RNRRetryCount, ackTimeout: id.qpACKTimeout(),
	}
}

// Reject replies with a consumer REJ (for a UD ID a SIDR_REP's refusal).
func (id *inprocID) Reject(privateData []byte) error {
	id.mu.Lock()
	if id.state != stateRequested {
		id.mu.Unlock()
		return fmt.Errorf("reject: %w", ErrState)
	}
	conn := id.conn
	id.state, id.conn = stateIdle, nil
	id.mu.Unlock()
	if id.isUD() {
		return conn.SIDRReply(mad.SIDRRejected, 0, 0, privateData)
	}
	return conn.Reject(mad.RejectConsumer, privateData)
}

// onPassiveEvent is the IB CM's news of a connection this ID was asked
// for.
func (id *inprocID) onPassiveEvent(ev cm.Event) {
	switch ev.Type {
	case cm.EventRTUReceived, cm.EventEstablished:
		id.mu.Lock()
		ok := id.state == stateAccepted
		if ok {
			id.state = stateEstablished
			id.dev.OnCommEst(id.qp, nil)
		}
		id.mu.Unlock()
		if ok {
			id.post(Event{Type: EventEstablished, ID: id.front})
		}
	case cm.EventTimeout:
		id.failConnect(Event{Type: EventUnreachable, Err: ErrTimedOut})
	case cm.EventREJReceived:
		id.failConnect(Event{Type: EventRejected, Reason: ev.Reason, Param: ConnParam{PrivateData: ev.PrivateData},
			Err: rejectError(ev.Reason)})
	default:
		id.onConnectedEvent(ev)
	}
}
