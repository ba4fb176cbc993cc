package rdmacm

import (
	"fmt"

	"github.com/softnic/softnic/verbs"
)

// What a program that makes its QPs itself needs (the softnic daemon,
// which makes each client's QP with the client's rings and lends it to
// the ID the client names), and a way to take events without waiting.

// AttachQP makes qp, a QP of the ID's device in RESET (RC, UD for the UDP
// port space), the ID's QP and moves it on as CreateQP does with a QP it
// makes. The QP stays
// the caller's: DestroyQP lets go of it, Destroy moves it to ERR and lets
// go of it; neither destroys it.
func (id *ID) AttachQP(qp *verbs.QP) error {
	if id.rem != nil || qp == nil {
		return fmt.Errorf("attach QP: %w", ErrInvalidArgument)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dev == nil || id.qp != nil || id.state == stateDestroying {
		return fmt.Errorf("attach QP: %w", ErrState)
	}
	if qp.Type() != id.qpType() || qp.State() != verbs.QPSReset {
		return fmt.Errorf("attach QP: a %v QP in RESET connects: %w", id.qpType(), ErrInvalidArgument)
	}
	if err := id.readyQP(qp); err != nil {
		return err
	}
	id.qp, id.lentQP = qp, true
	return nil
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
