package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/softnic/softnic/ibtransport/mad"
)

// EventType is what happened to an ID (enum rdma_cm_event_type), numbered
// as in librdmacm.
type EventType uint8

// Event types.
const (
	EventAddrResolved   EventType = 0
	EventAddrError      EventType = 1
	EventRouteResolved  EventType = 2
	EventRouteError     EventType = 3
	EventConnectRequest EventType = 4
	// EventConnectResponse is the REP, for an ID whose QP is the
	// caller's: it moves the QP on and answers with Establish.
	EventConnectResponse EventType = 5
	EventConnectError    EventType = 6
	EventUnreachable     EventType = 7
	EventRejected        EventType = 8
	EventEstablished     EventType = 9
	EventDisconnected    EventType = 10
	EventTimewaitExit    EventType = 15
	EventMulticastJoin   EventType = 12
	EventMulticastError  EventType = 13
)

var eventNames = map[EventType]string{
	EventAddrResolved:    "RDMA_CM_EVENT_ADDR_RESOLVED",
	EventAddrError:       "RDMA_CM_EVENT_ADDR_ERROR",
	EventRouteResolved:   "RDMA_CM_EVENT_ROUTE_RESOLVED",
	EventRouteError:      "RDMA_CM_EVENT_ROUTE_ERROR",
	EventConnectRequest:  "RDMA_CM_EVENT_CONNECT_REQUEST",
	EventConnectResponse: "RDMA_CM_EVENT_CONNECT_RESPONSE",
	EventConnectError:    "RDMA_CM_EVENT_CONNECT_ERROR",
	EventUnreachable:     "RDMA_CM_EVENT_UNREACHABLE",
	EventRejected:        "RDMA_CM_EVENT_REJECTED",
	EventEstablished:     "RDMA_CM_EVENT_ESTABLISHED",
	EventDisconnected:    "RDMA_CM_EVENT_DISCONNECTED",
	EventTimewaitExit:    "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	EventMulticastJoin:   "RDMA_CM_EVENT_MULTICAST_JOIN",
	EventMulticastError:  "RDMA_CM_EVENT_MULTICAST_ERROR",
}

// String returns librdmacm's name of the event (rdma_event_str).
func (t EventType) String() string {
	if s, ok := eventNames[t]; ok {
		return s
	}
	return "UNKNOWN EVENT"
}

// Event is one event of an ID (struct rdma_cm_event).
type Event struct {
	Type EventType
	// ID is the ID the event is about; for EventConnectRequest, the new ID
	// of the connection, whose Listen is the listening ID.
	ID     *ID
	Listen *ID
	// Param is what the peer sent: its private data (for a connect
	// request, what follows the rdma_cm header) and its resources.
	Param ConnParam
	// Reason is a REJ's reason (EventRejected): mad.RejectInvalidServiceID
	// when nobody listens on the port, mad.RejectConsumer when the peer's
	// program rejected; for a UD ID the SIDR_REP's status.
	Reason mad.RejectReason
	// UD is the peer's QP of a UD ID's EventEstablished, or the group's
	// address of EventMulticastJoin.
	UD *UDParam
	// Group is the group of EventMulticastJoin and EventMulticastError.
	Group netip.Addr
	// Err says why, for the error events.
	Err error
}

// Errors of events and of calls.
var (
	ErrClosed          = errors.New("rdmacm: closed")
	ErrRefused         = errors.New("rdmacm: connection refused")
	ErrTimedOut        = errors.New("rdmacm: connection timed out")
	ErrInvalidArgument = errors.New("rdmacm: invalid argument")
	ErrAddrInUse       = errors.New("rdmacm: address in use")
	ErrNoDevice        = errors.New("rdmacm: no device has the address")
	// ErrNoRoute is a destination the routing table has no route to:
	// ResolveAddr fails at once, as the kernel's rdma_resolve_addr does
	// with ENETUNREACH.
	ErrNoRoute = errors.New("rdmacm: network is unreachable")
	// ErrNotOnDevice is a route whose source address no device has (the
	// route goes through an interface softnic does not serve): the
	// kernel's EventAddrError with ENODEV.
	ErrNotOnDevice  = errors.New("rdmacm: no device has the route's source address")
	ErrState        = errors.New("rdmacm: not allowed in the ID's state")
	ErrNotSupported = errors.New("rdmacm: not supported")
)

// EventChannel delivers the events of the IDs created on it, in order
// (struct rdma_event_channel). Events queue without bound: an ID's events
// are few.
type EventChannel struct {
	mu     sync.Mutex
	queue  []Event
	wake   chan struct{} // one token while queue is not empty
	closed bool
	// notify, if set, is called after each event queued (SetNotify).
	notify func()
	be     ChannelBackend // the channel's half in the CM's backend
}

// NewEventChannel creates an event channel (rdma_create_event_channel).
func (c *CM) NewEventChannel() *EventChannel {
	ch := &EventChannel{wake: make(chan struct{}, 1)}
	ch.be = c.be.OpenChannel(ch, ch.post)
	return ch
}

// Get waits for the next event (rdma_get_cm_event). Events need no
// acknowledgement.
func (ch *EventChannel) Get(ctx context.Context) (Event, error) {
	for {
		ch.mu.Lock()
		if len(ch.queue) > 0 {
			ev := ch.queue[0]
			ch.queue[0] = Event{}
			ch.queue = ch.queue[1:]
			if len(ch.queue) > 0 {
				ch.signal()
			}
			ch.mu.Unlock()
			ev.taken()
			return ev, nil
		}
		closed := ch.closed
		ch.mu.Unlock()
		if closed {
			return Event{}, ErrClosed
		}
		select {
		case <-ch.wake:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Pending returns how many events wait to be taken.
func (ch *EventChannel) Pending() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return len(ch.queue)
}

// Close makes Get return ErrClosed once the queued events are taken
// (rdma_destroy_event_channel).
func (ch *EventChannel) Close() {
	ch.be.Close()
	ch.mu.Lock()
	ch.closed = true
	ch.signal()
	ch.mu.Unlock()
}

// SetNotify has fn called after each event the channel queues, on the
// goroutine that queued it: fn must not block or call into the CM.
func (ch *EventChannel) SetNotify(fn func()) {
	ch.mu.Lock()
	ch.notify = fn
	ch.mu.Unlock()
}

// TryGet returns the next event if one is queued (a non-blocking Get).
func (ch *EventChannel) TryGet() (Event, bool) {
	ch.mu.Lock()
	if len(ch.queue) == 0 {
		ch.mu.Unlock()
		return Event{}, false
	}
	ev := ch.queue[0]
	ch.queue[0] = Event{}
	ch.queue = ch.queue[1:]
	ch.mu.Unlock()
	ev.taken()
	return ev, true
}

func (ch *EventChannel) post(ev Event) {
	ch.mu.Lock()
	ch.append(ev)
	notify := ch.notify
	ch.mu.Unlock()
	if notify != nil {
		notify()
	}
}

// append queues ev unless the channel is closed. Called under mu.
func (ch *EventChannel) append(ev Event) {
	if !ch.closed {
		ch.queue = append(ch.queue, ev)
		ch.signal()
	}
}

// signal leaves a token in wake. Called under mu.
func (ch *EventChannel) signal() {
	select {
	case ch.wake <- struct{}{}:
	default:
	}
}

// taken is the event's leaving its channel for the program: a connect
// request leaves its listener's backlog then, as the kernel's ucma counts
// the requests queued on the file and not yet read.
func (ev *Event) taken() {
	if ev.Type == EventConnectRequest && ev.Listen != nil {
		ev.Listen.be.RequestTaken()
	}
}

// rejectError is the error of a rejected connection.
func rejectError(r mad.RejectReason) error {
	if r == mad.RejectInvalidServiceID {
		return fmt.Errorf("%w (nobody listens on the port)", ErrRefused)
	}
	return fmt.Errorf("rdmacm: connection rejected, reason %d", r)
}
