package ibtransport

import "github.com/softnic/softnic/ibtransport/ibv"

// QPEvent is an asynchronous event the engine raises about a QP (the QP
// kinds of ibv_event_type; verbs adds those of SRQs and CQs).
type QPEvent uint8

// QP events.
const (
	// QPEventFatal: the QP went to ERR by itself, because a work request
	// failed, a peer's request could not be executed or a CQ overran.
	QPEventFatal QPEvent = iota + 1
	// QPEventSQDrained: a QP in SQD has no work request in flight any more.
	QPEventSQDrained
	// QPEventLastWQEReached: a QP attached to an SRQ went to ERR and will
	// consume no more of its receives.
	QPEventLastWQEReached
	// QPEventCommEst: a connected QP received its first packet from its
	// peer since it entered RTR, in RTR or later (IBA's communication
	// established, which IBA raises in RTR only): a connection manager
	// still waiting for its RTU may take the connection as up.
	QPEventCommEst
)

func (t QPEvent) String() string {
	switch t {
	case QPEventFatal:
		return "QP_FATAL"
	case QPEventSQDrained:
		return "SQ_DRAINED"
	case QPEventLastWQEReached:
		return "QP_LAST_WQE_REACHED"
	case QPEventCommEst:
		return "COMM_EST"
	}
	return "unknown QP event"
}

func (e *Engine) emit(q *QP, ev QPEvent) {
	if e.onEvent != nil {
		e.onEvent(q, ev)
	}
}

// fail moves the QP to ERR on the engine's own account and says so.
func (q *QP) fail() {
	if q.st == ibv.QPSErr {
		return
	}
	q.toError()
	q.e.emit(q, QPEventFatal)
}

// complete posts a completion; a CQ overrun fails the QP, as IBA makes it
// an error of the QPs using the CQ.
func (q *QP) complete(cq CompletionQueue, wc ibv.WC, solicited bool) {
	q.e.SettleWrites() // a completion says the data is in place
	if !cq.Push(wc, solicited) {
		q.fail()
	}
}
