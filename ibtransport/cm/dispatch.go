package cm

import "time"

// Events travel from the locked sections to the dispatch goroutine through
// m.events, so a Handler never runs under mu and may call back in.

// post queues ev for delivery; the caller holds mu.
func (m *Manager) post(ev Event) {
	if m.closed {
		return
	}
	m.events = append(m.events, queuedEvent{ev})
	m.signal()
}

func (m *Manager) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// dispatch delivers the queued events in order until Close.
func (m *Manager) dispatch() {
	defer close(m.dispatched)
	for range m.wake {
		for {
			m.mu.Lock()
			if m.closed {
				m.mu.Unlock()
				return
			}
			if len(m.events) == 0 {
				m.mu.Unlock()
				break
			}
			q := m.events[0]
			m.events[0] = queuedEvent{}
			m.events = m.events[1:]
			h := m.handlerFor(&q.ev)
			m.mu.Unlock()
			if h != nil {
				h(q.ev)
			}
		}
	}
}

// handlerFor picks who gets ev, at delivery time, so that a SetHandler made
// while handling the REQ applies to everything after it. A destroyed
// connection gets nothing.
func (m *Manager) handlerFor(ev *Event) Handler {
	if ev.Type == EventREQReceived || ev.Type == EventSIDRREQReceived {
		if ev.Conn.destroyed {
			return nil
		}
		return ev.Listener.handler
	}
	if ev.Conn == nil || ev.Conn.destroyed {
		return nil
	}
	return ev.Conn.handler
}

// arm starts c's one timer: after d, fire runs with mu held, unless the
// timer was stopped or re-armed first. m.timers counts the callbacks that
// may still run, so Close can wait for them.
func (c *Conn) arm(d time.Duration, fire func()) {
	c.stopTimer()
	c.timerGen++
	gen := c.timerGen
	m := c.m
	m.timers.Add(1)
	c.timer = time.AfterFunc(d, func() {
		defer m.timers.Done()
		m.mu.Lock()
		if m.closed || c.timerGen != gen || c.timer == nil {
			m.mu.Unlock()
			return
		}
		c.timer = nil
		fire()
		m.unlockAndSend()
	})
}

// stopTimer cancels c's timer; the caller holds mu.
func (c *Conn) stopTimer() {
	if c.timer == nil {
		return
	}
	if c.timer.Stop() {
		c.m.timers.Done()
	}
	c.timer = nil
	c.timerGen++
}
