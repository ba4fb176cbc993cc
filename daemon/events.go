package daemon

import (
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// owner is the session an object belongs to and the user handle its client
// gave it, which async events carry.
type owner struct {
	ss     *session
	handle uint64
}

// ibvEventType is libibverbs' enum ibv_event_type value of each event.
var ibvEventType = map[verbs.EventType]uint32{
	verbs.EventCQErr:            hostif.EventCQErr,
	verbs.EventQPFatal:          hostif.EventQPFatal,
	verbs.EventCommEst:          hostif.EventCommEst,
	verbs.EventSQDrained:        hostif.EventSQDrained,
	verbs.EventPortActive:       hostif.EventPortActive,
	verbs.EventPortErr:          hostif.EventPortErr,
	verbs.EventSRQLimitReached:  hostif.EventSRQLimitReached,
	verbs.EventQPLastWQEReached: hostif.EventQPLastWQE,
	verbs.EventGIDChange:        hostif.EventGIDChange,
}

// own records the owner of a CQ or QP (the server's mu is taken).
func (s *Server) own(obj any, ss *session, handle uint64) {
	s.mu.Lock()
	s.owners[obj] = owner{ss: ss, handle: handle}
	s.mu.Unlock()
}

func (s *Server) disown(obj any) {
	s.mu.Lock()
	delete(s.owners, obj)
	s.mu.Unlock()
}

// deliverEvents writes each of the device's async events to the session
// that owns its object, as the record ibv_get_async_event reads
// (hostif.AsyncEvent): the user handle, the event type.
func (s *Server) deliverEvents() {
	defer s.wg.Done()
	for {
		select {
		case ev := <-s.dev.Events():
			s.deliver(ev)
		case <-s.quit:
			return
		}
	}
}

func (s *Server) deliver(ev verbs.Event) {
	switch ev.Type {
	case verbs.EventPortActive, verbs.EventPortErr:
		s.cfg.Log.Info("port state", "port", ev.Port, "event", ev.Type.String())
		s.deliverPortEvent(ev)
		return
	case verbs.EventGIDChange:
		s.deliverPortEvent(ev)
		return
	}
	var obj any
	switch {
	case ev.QP != nil:
		obj = ev.QP
	case ev.CQ != nil:
		obj = ev.CQ
	case ev.SRQ != nil:
		obj = ev.SRQ
	default:
		return
	}
	typ, ok := ibvEventType[ev.Type]
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.owners[obj]
	if !ok || o.ss.async < 0 {
		return
	}
	rec := hostif.AsyncEvent(o.handle, typ)
	unix.Write(o.ss.async, rec[:]) // non-blocking: a full pipe loses the event
}

// deliverPortEvent writes a port's event (its state, its GID table) to
// every session, as the kernel gives it to every context of the device;
// the record's element is the port number.
func (s *Server) deliverPortEvent(ev verbs.Event) {
	rec := hostif.AsyncEvent(uint64(ev.Port), ibvEventType[ev.Type])
	s.mu.Lock()
	defer s.mu.Unlock()
	for ss := range s.sessions {
		if ss.async >= 0 {
			unix.Write(ss.async, rec[:])
		}
	}
}
