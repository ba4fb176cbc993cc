package rdmacm

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/ibtransport/cm"
)

// Disconnect moves the QP to ERR and sends the DREQ.
func (id *inprocID) Disconnect() error {
	id.mu.Lock()
	if id.isUD() {
		id.mu.Unlock()
		return fmt.Errorf("disconnect: a UD ID has no connection: %w", ErrInvalidArgument)
	}
	switch id.state {
	case stateDisconnect:
		id.mu.Unlock()
		return nil
	case stateConnect, stateResponded, stateAccepted, stateEstablished:
	default:
		id.mu.Unlock()
		return fmt.Errorf("disconnect: %w", ErrState)
	}
	id.state = stateDisconnect
	toError(id.qp)
	conn := id.conn
	id.mu.Unlock()
	if err := conn.Disconnect(nil); err != nil && !errors.Is(err, cm.ErrState) {
		return err
	}
	// A connection the IB CM no longer holds established (the peer's DREQ
	// came first and was answered, its event not yet here) is as good as
	// disconnected: Linux's rdma_disconnect ignores what the CM says of
	// its DREQ and DREP alike and succeeds once the QP is in ERR.
	return nil
}

// onConnectedEvent handles the events of a connection that both sides
// share: disconnection and the end of TIMEWAIT.
func (id *inprocID) onConnectedEvent(ev cm.Event) {
	var out EventType
	switch ev.Type {
	case cm.EventDREQReceived:
		// The IB CM answered with a DREP already.
		id.mu.Lock()
		id.state = stateDisconnect
		toError(id.qp)
		id.mu.Unlock()
		out = EventDisconnected
	case cm.EventDisconnected:
		out = EventDisconnected
	case cm.EventTimewaitExit:
		out = EventTimewaitExit
	default:
		return
	}
	id.mu.Lock()
	gone := id.state == stateDestroying
	id.mu.Unlock()
	if !gone {
		id.post(Event{Type: out, ID: id.front})
	}
}
