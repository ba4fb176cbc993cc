package verbs

import "github.com/softnic/softnic/ibtransport"

// EventType is the kind of an asynchronous event (ibv_event_type).
type EventType uint8

// Asynchronous events.
const (
	// EventQPFatal: the QP went to ERR by itself, because a work request
	// failed, a peer's request could not be executed or a CQ overran.
	EventQPFatal EventType = iota + 1
	// EventSQDrained: a QP in SQD has no work request in flight any more.
	EventSQDrained
	// EventSRQLimitReached: an armed SRQ dropped below its limit.
	EventSRQLimitReached
	// EventQPLastWQEReached: a QP attached to an SRQ went to ERR and will
	// consume no more of its receives.
	EventQPLastWQEReached
	// EventCQErr: a CQ overran; completions were lost.
	EventCQErr
	// EventCommEst: a connected QP still in RTR received its first packet
	// (communication established).
	EventCommEst
	// EventDeviceFatal: the device is gone. Through a daemon (daemon/client): the
	// daemon ended the session (it stopped or was killed) and its objects
	// are gone; calls and empty polls return client.ErrDaemonGone.
	EventDeviceFatal
	// EventPortActive: the port came back up (its link's carrier), and
	// EventPortErr: it went down. Event.Port names it.
	EventPortActive
	EventPortErr
	// EventGIDChange: the port's GID table gained or lost an entry (its
	// interface's addresses changed). Event.Port names the port.
	EventGIDChange
)

func (t EventType) String() string {
	switch t {
	case EventQPFatal:
		return "QP_FATAL"
	case EventSQDrained:
		return "SQ_DRAINED"
	case EventSRQLimitReached:
		return "SRQ_LIMIT_REACHED"
	case EventQPLastWQEReached:
		return "QP_LAST_WQE_REACHED"
	case EventCQErr:
		return "CQ_ERR"
	case EventCommEst:
		return "COMM_EST"
	case EventDeviceFatal:
		return "DEVICE_FATAL"
	case EventPortActive:
		return "PORT_ACTIVE"
	case EventPortErr:
		return "PORT_ERR"
	case EventGIDChange:
		return "GID_CHANGE"
	}
	return "unknown event"
}

// Event is an asynchronous event (ibv_async_event); the field of the
// object it concerns is set.
type Event struct {
	Type EventType
	QP   *QP
	SRQ  *SRQ
	CQ   *CQ
	Port int // the port of EventPortActive, EventPortErr and EventGIDChange: 1
}

// Events returns the device's asynchronous events (ibv_get_async_event).
// Events that find the channel full are dropped: a program that cares
// reads it.
func (d *Device) Events() <-chan Event { return d.events }

// emit queues an event; the engine goroutine calls it, so it never blocks.
func (d *Device) emit(ev Event) {
	select {
	case d.events <- ev:
	default:
	}
}

var qpEventTypes = [...]EventType{
	ibtransport.QPEventFatal:          EventQPFatal,
	ibtransport.QPEventSQDrained:      EventSQDrained,
	ibtransport.QPEventLastWQEReached: EventQPLastWQEReached,
	ibtransport.QPEventCommEst:        EventCommEst,
}

// onQPEvent receives the engine's QP events.
func (e *engine) onQPEvent(t *ibtransport.QP, ev ibtransport.QPEvent) {
	q := qpOf(t)
	if ev == ibtransport.QPEventCommEst {
		if fn, ok := e.commEst.LoadAndDelete(q); ok {
			fn.(func())()
		}
		if q.State() != QPSRTR {
			// IBA raises it for a QP still in RTR only; OnCommEst also
			// hears of a QP that went to RTS first, as rdmacm's do.
			return
		}
	}
	if int(ev) < len(qpEventTypes) && qpEventTypes[ev] != 0 {
		e.d.emit(Event{Type: qpEventTypes[ev], QP: q})
	}
}

// OnCommEst makes fn run once, on the engine goroutine, when qp next raises
// EventCommEst; nil forgets a pending fn. A connection manager waiting for
// an RTU takes the first packet as the connection's start, as Linux's
// rdma_cm does on IB_EVENT_COMM_EST. fn must not block. Through a daemon
// it does nothing: the daemon's connection manager hears of the packet.
func (d *Device) OnCommEst(qp *QP, fn func()) { d.ops.OnCommEst(qp, fn) }

func (e *engine) OnCommEst(qp *QP, fn func()) {
	if fn == nil {
		e.commEst.Delete(qp)
		return
	}
	e.commEst.Store(qp, fn)
}
