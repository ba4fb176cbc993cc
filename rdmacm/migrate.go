package rdmacm

import "fmt"

// An ID's events go to the channel it was made on until Migrate moves
// them (rdma_migrate_id). post and Migrate agree through the channel's
// lock: Migrate switches the ID's channel holding the old channel's lock,
// and post appends only to the channel the ID still names once it holds
// that channel's lock, so no event lands on a channel after its ID left.

// post queues ev on the ID's channel.
func (id *ID) post(ev Event) {
	for {
		ch := id.ch.Load()
		ch.mu.Lock()
		if id.ch.Load() != ch {
			ch.mu.Unlock()
			continue // migrated meanwhile
		}
		ch.append(ev)
		notify := ch.notify
		ch.mu.Unlock()
		if notify != nil {
			notify()
		}
		return
	}
}

// Migrate sends the ID's events to ch from now on, and moves there those
// queued and not yet taken (rdma_migrate_id). A listener's connect
// requests move with it, and their new IDs too.
func (id *ID) Migrate(ch *EventChannel) error {
	if ch == nil {
		return fmt.Errorf("migrate: %w", ErrInvalidArgument)
	}
	if id.rem != nil {
		return id.remoteMigrate(ch)
	}
	old := id.ch.Load()
	if old == ch {
		return nil
	}
	old.mu.Lock()
	id.ch.Store(ch)
	var moved []Event
	kept := old.queue[:0]
	for _, ev := range old.queue {
		switch {
		case ev.ID == id:
			moved = append(moved, ev)
		case ev.Listen == id:
			ev.ID.ch.Store(ch) // the request's ID has posted nothing yet
			moved = append(moved, ev)
		default:
			kept = append(kept, ev)
		}
	}
	clear(old.queue[len(kept):])
	old.queue = kept
	old.mu.Unlock()
	ch.mu.Lock()
	for _, ev := range moved {
		ch.append(ev)
	}
	notify := ch.notify
	ch.mu.Unlock()
	for range moved {
		if notify != nil {
			notify() // one wake-up per event, as each post gives
		}
	}
	return nil
}
