package rdmacm

import "fmt"

// An in-process ID's events go to the channel it was made on until
// Migrate moves them (rdma_migrate_id). post and Migrate agree through
// the channel's lock: Migrate switches the ID's channel holding the old
// channel's lock, and post appends only to the channel the ID still names
// once it holds that channel's lock, so no event lands on a channel after
// its ID left.

// post queues ev on the ID's channel.
func (id *inprocID) post(ev Event) {
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

// Migrate moves the ID, and the events queued for it, to the channel
// whose half is chb.
func (id *inprocID) Migrate(chb ChannelBackend) error {
	to, ok := chb.(inprocChannel)
	if !ok {
		return fmt.Errorf("migrate: channel of another CM: %w", ErrInvalidArgument)
	}
	ch := to.ch
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
		case ev.ID == id.front:
			moved = append(moved, ev)
		case ev.Listen == id.front:
			// The request's ID, in process as its listener, has posted
			// nothing yet.
			ev.ID.be.(*inprocID).ch.Store(ch)
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
