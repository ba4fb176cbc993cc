package memlink

import (
	"fmt"
	"time"

	"github.com/softnic/softnic/roce"
)

// MultiQueue is one end of an in-memory link with several queues, each a
// pair of Endpoints: a frame sent on queue k arrives on the peer's queue
// k, as on a veth pair. Used whole, as a roce.Link, it sends on queue 0
// and receives from every queue; a roce.Device splits it (roce.Splitter)
// to run an engine on each queue.
type MultiQueue struct {
	queues []*Endpoint
	any    chan struct{} // a frame arrived on some queue, or Wake
	timer  *time.Timer   // Wait's, stopped between waits
	next   int
	split  bool
}

var _ roce.Splitter = (*MultiQueue)(nil)

// PairQueues returns the two ends of a new link of n queues. Queue k's
// faults are seeded with cfg.Seed+k.
func PairQueues(cfg Config, n int) (a, b *MultiQueue) {
	a = &MultiQueue{any: make(chan struct{}, 1), timer: time.NewTimer(time.Hour)}
	b = &MultiQueue{any: make(chan struct{}, 1), timer: time.NewTimer(time.Hour)}
	a.timer.Stop()
	b.timer.Stop()
	for k := range n {
		c := cfg
		c.Seed += uint64(k)
		qa, qb := Pair(c)
		qa.anyWake, qb.anyWake = a.any, b.any
		a.queues = append(a.queues, qa)
		b.queues = append(b.queues, qb)
	}
	return a, b
}

// Queue returns queue k's endpoint (for its Stats, faults and tap).
func (m *MultiQueue) Queue(k int) *Endpoint { return m.queues[k] }

// NumQueues implements roce.Splitter.
func (m *MultiQueue) NumQueues() int { return len(m.queues) }

// Split implements roce.Splitter: n must be the number of queues (one
// link per queue) or 1.
func (m *MultiQueue) Split(n int) ([]roce.Link, error) {
	if m.split || (n != 1 && n != len(m.queues)) {
		return nil, fmt.Errorf("split an in-memory link of %d queues in %d: %w", len(m.queues), n, roce.ErrSplit)
	}
	m.split = true
	if n == 1 {
		return []roce.Link{m}, nil
	}
	links := make([]roce.Link, n)
	for k, q := range m.queues {
		links[k] = q
	}
	return links, nil
}

// MTU implements roce.Link.
func (m *MultiQueue) MTU() int { return m.queues[0].MTU() }

// HardwareAddr implements roce.Link.
func (m *MultiQueue) HardwareAddr() [6]byte { return m.queues[0].HardwareAddr() }

// TxFrame implements roce.Link.
func (m *MultiQueue) TxFrame() []byte { return m.queues[0].TxFrame() }

// Send implements roce.Link.
func (m *MultiQueue) Send(frame []byte) { m.queues[0].Send(frame) }

// Flush implements roce.Link.
func (m *MultiQueue) Flush() error { return m.queues[0].Flush() }

// Receive implements roce.Link: from every queue, starting with a
// different one each call.
func (m *MultiQueue) Receive(fn func(frame []byte), max int) int {
	n := 0
	for k := 0; k < len(m.queues) && n < max; k++ {
		n += m.queues[(m.next+k)%len(m.queues)].Receive(fn, max-n)
	}
	m.next++
	return n
}

// Wait implements roce.Link.
func (m *MultiQueue) Wait(timeout time.Duration) error {
	for _, q := range m.queues {
		select {
		case <-q.closed:
			return roce.ErrLinkClosed
		default:
		}
		if until, ok := q.nextArrival(); ok {
			if until <= 0 {
				return nil
			}
			if timeout < 0 || until < timeout {
				timeout = until
			}
		}
	}
	return sleep(m.queues[0].closed, m.any, m.timer, timeout)
}

// Wake implements roce.Link.
func (m *MultiQueue) Wake() {
	select {
	case m.any <- struct{}{}:
	default:
	}
}

// Close implements roce.Link: it closes every queue.
func (m *MultiQueue) Close() error {
	for _, q := range m.queues {
		q.Close()
	}
	m.Wake()
	return nil
}
