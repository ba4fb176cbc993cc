package rdmacm

import (
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// The IDs of a remote CM: each call is the daemon's command; what the ID
// knows here (its addresses, device and QP) is what the replies and
// events said.

func (c *CM) remoteCreateID(ch *EventChannel, ps mad.PortSpace) (*ID, error) {
	r := ch.remote
	if r == nil {
		return nil, fmt.Errorf("create ID: channel of another CM: %w", ErrInvalidArgument)
	}
	if r.err != nil {
		return nil, r.err
	}
	var h uint32
	if err := c.remote.call(func(cl *client.Conn) (err error) { h, err = cl.CMCreateID(r.handle, uint16(ps), 0); return err }); err != nil {
		return nil, fmt.Errorf("create ID: %w", err)
	}
	id := &ID{c: c, ps: ps, rem: &remoteID{handle: h}}
	id.ch.Store(ch)
	c.remote.add(id)
	return id, nil
}

// add registers an ID made in the daemon; an ID of a closed CM is
// destroyed there at once.
func (rc *remoteCM) add(id *ID) {
	rc.mu.Lock()
	rc.ids[id.rem.handle] = id
	rc.mu.Unlock()
	id.c.mu.Lock()
	closed := id.c.closed
	id.c.ids[id] = struct{}{}
	id.c.mu.Unlock()
	if closed {
		id.Destroy()
	}
}

// setAddrs records the addresses a reply or an event gave.
func (id *ID) setAddrs(local, peer netip.AddrPort) {
	id.mu.Lock()
	id.local, id.peer = local, peer
	id.mu.Unlock()
}

func (id *ID) remoteBind(ap netip.AddrPort) error {
	rc := id.c.remote
	var a client.CMAddrs
	if err := rc.call(func(c *client.Conn) (err error) { a, err = c.CMBind(id.rem.handle, ap); return err }); err != nil {
		return fmt.Errorf("bind %v: %w", ap, err)
	}
	id.setAddrs(a.Local, a.Peer)
	if !anyAddr(ap.Addr()) { // a wildcard or loopback bind attaches no device
		id.mu.Lock()
		id.dev = rc.dev
		id.mu.Unlock()
	}
	return nil
}

// remoteResolveAddr asks the CM's Route, if it has one, for the source
// the daemon is not told otherwise (the program's routing table is the
// one that counts), but for a loopback or wildcard destination, which the
// daemon resolves to its device; the daemon finds the peers.
func (id *ID) remoteResolveAddr(src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	if local := id.LocalAddr(); !src.IsValid() && (!local.IsValid() || anyAddr(local.Addr())) && !anyAddr(dst.Addr()) && id.c.cfg.Route != nil {
		var err error
		if src, err = id.c.cfg.Route(dst.Addr()); err != nil {
			return fmt.Errorf("resolve address %v: %w", dst, err)
		}
	}
	err := id.c.remote.call(func(c *client.Conn) error { return c.CMResolveAddr(id.rem.handle, src, dst, timeout) })
	if err != nil {
		return fmt.Errorf("resolve address %v: %w", dst, err)
	}
	return nil
}

func (id *ID) remoteResolveRoute(timeout time.Duration) error {
	if err := id.c.remote.call(func(c *client.Conn) error { return c.CMResolveRoute(id.rem.handle, timeout) }); err != nil {
		return fmt.Errorf("resolve route: %w", err)
	}
	return nil
}

// remoteCreateQP makes the ID's QP on pd through cm_create_qp: a QP of the
// device like any other, which the daemon moved to INIT. id.mu is held.
func (id *ID) remoteCreateQP(pd *verbs.PD, init *verbs.QPInitAttr) (*verbs.QP, error) {
	h := id.rem.handle
	qp, err := client.CreateQPThrough(pd, init, func(c *client.Conn, req hostif.CreateQPRequest) (*client.QP, error) {
		return c.CMCreateQP(h, req)
	})
	if err != nil {
		return nil, fmt.Errorf("create QP: %w", remoteErr(err))
	}
	id.qp, id.pd = qp, pd
	return qp, nil
}

func (id *ID) remoteDestroyQP() error {
	id.mu.Lock()
	qp := id.qp
	id.qp = nil
	id.mu.Unlock()
	if qp == nil {
		return fmt.Errorf("destroy QP: no QP: %w", ErrState)
	}
	if err := id.c.remote.call(func(c *client.Conn) error { return c.CMDetachQP(id.rem.handle) }); err != nil {
		return fmt.Errorf("destroy QP: %w", err)
	}
	return qp.Destroy()
}

// connParam encodes p for the daemon.
func (id *ID) connParam(p *ConnParam, maxPrivate int) (hostif.CMConnParam, error) {
	if len(p.PrivateData) > maxPrivate {
		return hostif.CMConnParam{}, fmt.Errorf("%d bytes of private data, at most %d: %w", len(p.PrivateData), maxPrivate, ErrInvalidArgument)
	}
	cp := hostif.CMConnParam{ID: id.rem.handle, ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RetryCount: p.RetryCount, RNRRetryCount: p.RNRRetryCount, PrivateLen: uint32(len(p.PrivateData)), QPNum: p.QPNum}
	copy(cp.Private[:], p.PrivateData)
	return cp, nil
}

func (id *ID) remoteConnect(p *ConnParam) error {
	room := mad.CMAUserDataLen
	if id.isUD() {
		room = mad.SIDRREQPrivateDataLen - mad.CMAHeaderLen
	}
	cp, err := id.connParam(p, room)
	if err == nil {
		err = id.c.remote.call(func(c *client.Conn) error { return c.CMConnect(cp) })
	}
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	return nil
}

func (id *ID) remoteAccept(p *ConnParam) error {
	room := mad.REPPrivateDataLen
	if id.isUD() {
		room = mad.SIDRREPPrivateDataLen
	}
	cp, err := id.connParam(p, room)
	if err == nil {
		err = id.c.remote.call(func(c *client.Conn) error { return c.CMAccept(cp) })
	}
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	return nil
}

func (id *ID) remoteReject(privateData []byte) error {
	if len(privateData) > hostif.CMPrivateDataMax {
		return fmt.Errorf("reject: %d bytes of private data: %w", len(privateData), ErrInvalidArgument)
	}
	if err := id.c.remote.call(func(c *client.Conn) error { return c.CMReject(id.rem.handle, privateData) }); err != nil {
		return fmt.Errorf("reject: %w", err)
	}
	return nil
}

func (id *ID) remoteListen(backlog int) error {
	var a client.CMAddrs
	if err := id.c.remote.call(func(c *client.Conn) (err error) { a, err = c.CMListen(id.rem.handle, backlog); return err }); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	id.setAddrs(a.Local, a.Peer)
	return nil
}

func (id *ID) remoteSetOption(option int, value uint8) error {
	if option < 0 {
		return fmt.Errorf("set option %d: %w", option, ErrNotSupported)
	}
	if err := id.c.remote.call(func(c *client.Conn) error { return c.CMSetOption(id.rem.handle, uint32(option), uint32(value)) }); err != nil {
		return fmt.Errorf("set option: %w", remoteErr(err))
	}
	return nil
}

// remoteMigrate has the daemon send the ID's events to ch's daemon
// channel, whose drain posts them on ch.
func (id *ID) remoteMigrate(ch *EventChannel) error {
	r := ch.remote
	if r == nil || r.err != nil {
		return fmt.Errorf("migrate: channel of another CM: %w", ErrInvalidArgument)
	}
	if err := id.c.remote.call(func(c *client.Conn) error { return c.CMMigrateID(id.rem.handle, r.handle) }); err != nil {
		return fmt.Errorf("migrate: %w", remoteErr(err))
	}
	id.ch.Store(ch)
	return nil
}

func (id *ID) remoteInitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	var attr *verbs.QPAttr
	var mask verbs.QPAttrMask
	err := id.c.remote.call(func(c *client.Conn) (err error) {
		attr, mask, err = c.CMInitQPAttr(id.rem.handle, state)
		return err
	})
	if err != nil {
		return verbs.QPAttr{}, 0, fmt.Errorf("init QP attributes: %w", remoteErr(err))
	}
	return *attr, mask, nil
}

func (id *ID) remoteEstablish() error {
	if err := id.c.remote.call(func(c *client.Conn) error { return c.CMEstablish(id.rem.handle) }); err != nil {
		return fmt.Errorf("establish: %w", remoteErr(err))
	}
	return nil
}

func (id *ID) remoteDisconnect() error {
	if err := id.c.remote.call(func(c *client.Conn) error { return c.CMDisconnect(id.rem.handle) }); err != nil {
		return fmt.Errorf("disconnect: %w", err)
	}
	return nil
}

// remoteDestroy destroys the ID in the daemon, then its QP, as Destroy
// does in this process.
func (id *ID) remoteDestroy() error {
	id.mu.Lock()
	if id.rem.destroyed {
		id.mu.Unlock()
		return fmt.Errorf("destroy ID: %w", ErrState)
	}
	id.rem.destroyed = true
	qp := id.qp
	id.qp = nil
	id.mu.Unlock()
	rc := id.c.remote
	err := rc.call(func(c *client.Conn) error { return c.CMDestroyID(id.rem.handle) })
	if qp != nil {
		qp.Destroy()
	}
	rc.mu.Lock()
	delete(rc.ids, id.rem.handle)
	rc.mu.Unlock()
	id.c.mu.Lock()
	delete(id.c.ids, id)
	id.c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("destroy ID: %w", err)
	}
	return nil
}

// event turns the daemon's record into an event of this CM's IDs: a
// connect request's new ID is made here; records of IDs destroyed here
// meanwhile are dropped.
func (rc *remoteCM) event(rec *hostif.CMEvent) (Event, bool) {
	typ := EventType(rec.Type)
	rc.mu.Lock()
	id, listen := rc.ids[rec.ID], rc.ids[rec.Listen]
	rc.mu.Unlock()
	if typ == EventConnectRequest && id == nil && listen != nil {
		id = &ID{c: listen.c, ps: listen.ps, dev: rc.dev, rem: &remoteID{handle: rec.ID}}
		id.ch.Store(listen.ch.Load())
		rc.add(id)
	}
	if id == nil {
		if typ == EventConnectRequest {
			// The listener was destroyed here before the daemon heard:
			// the request's ID, the daemon's now, goes (a reject).
			rc.call(func(c *client.Conn) error { return c.CMDestroyID(rec.ID) })
		}
		return Event{}, false
	}
	id.setAddrs(hostif.CMAddrPort(rec.Local, rec.LocalPort), hostif.CMAddrPort(rec.Peer, rec.PeerPort))
	if typ == EventAddrResolved {
		id.mu.Lock()
		id.dev = rc.dev
		id.mu.Unlock()
	}
	n := min(int(rec.PrivateLen), len(rec.Private))
	ev := Event{Type: typ, ID: id, Reason: mad.RejectReason(rec.Reason), Param: ConnParam{
		PrivateData:        append([]byte(nil), rec.Private[:n]...),
		ResponderResources: rec.ResponderResources, InitiatorDepth: rec.InitiatorDepth,
		RetryCount: rec.RetryCount, RNRRetryCount: rec.RNRRetryCount}}
	if typ == EventConnectRequest {
		ev.Listen = listen
	}
	if typ == EventEstablished && id.isUD() {
		peer := hostif.CMAddrPort(rec.Peer, rec.PeerPort).Addr()
		ev.UD = &UDParam{AV: verbs.AddressVector{DGID: roce.GIDFromAddr(peer), SGIDIndex: rec.SGIDIndex, HopLimit: rec.HopLimit},
			QPN: rec.QPN, QKey: rec.QKey}
	}
	ev.Err = eventErr(typ, ev.Reason, unix.Errno(-rec.Status))
	return ev, true
}

// eventErr is the error of an event, as the ID in this process gives it.
func eventErr(typ EventType, reason mad.RejectReason, errno unix.Errno) error {
	switch {
	case typ == EventRejected:
		return rejectError(reason)
	case typ == EventUnreachable && reason != 0:
		return fmt.Errorf("%w (SIDR status %d)", ErrRefused, reason) // a UD ID's refusal
	case typ == EventUnreachable:
		return ErrTimedOut
	case errno == 0:
		return nil
	}
	if e := errnoErr(errno); e != nil {
		return fmt.Errorf("%v: %w (%w)", typ, e, errno)
	}
	return fmt.Errorf("%v: %w", typ, errno)
}
