package ibtransport

// EventType is the kind of an asynchronous event (ibv_event_type).
type EventType uint8

// Asynchronous events.
const (
	// EventQPFatal: the QP went to ERR by itself, because a work request
	// failed or a peer's request could not be executed.
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
	}
	return "unknown event"
}

// Event is an asynchronous event (ibv_async_event).
type Event struct {
	Type EventType
	QP   *QP
	SRQ  *SRQ
	CQ   *CQ
}

// Events returns the channel of asynchronous events (ibv_get_async_event).
// Events that find it full are dropped: a program that cares reads it.
func (e *Engine) Events() <-chan Event { return e.events }

func (e *Engine) emit(ev Event) {
	select {
	case e.events <- ev:
	default:
	}
}

// fail moves the QP to ERR on the engine's own account and says so.
func (q *QP) fail() {
	if q.st == QPSErr {
		return
	}
	q.toError()
	q.e.emit(Event{Type: EventQPFatal, QP: q})
}

// Modify sets the SRQ's limit and arms it (ibv_modify_srq with
// IBV_SRQ_LIMIT): when fewer than limit receives remain, an
// EventSRQLimitReached fires once. A limit of 0 disarms it.
func (s *SRQ) Modify(limit int) error {
	if limit < 0 || limit > len(s.rq.slots) {
		return ErrInvalidArgument
	}
	s.limit.Store(int32(limit))
	return nil
}

// checkLimit fires the SRQ limit event after the engine consumed a receive.
func (s *SRQ) checkLimit(e *Engine) {
	if l := s.limit.Load(); l > 0 && s.rq.count() < int(l) && s.limit.CompareAndSwap(l, 0) {
		e.emit(Event{Type: EventSRQLimitReached, SRQ: s})
	}
}

// complete posts a completion; a CQ overrun fails the QP, as IBA makes it
// an error of the QPs using the CQ.
func (q *QP) complete(cq *CQ, wc *WC) {
	if !cq.push(wc) {
		q.fail()
	}
}
