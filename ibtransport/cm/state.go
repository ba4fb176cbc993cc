package cm

// State is a connection's CM state (IBA 12.9.6, Linux enum ib_cm_state).
type State uint8

// The states a Conn goes through. The active side goes REQSent (MRAREQRcvd)
// REPRcvd (MRAREPSent) Established; the passive side REQRcvd (MRAREQSent)
// REPSent (MRAREPRcvd) Established. Either leaves Established through
// DREQSent or DREQRcvd to Timewait, and ends Idle.
const (
	StateIdle State = iota
	StateListen
	StateREQSent
	StateREQRcvd
	StateMRAREQSent
	StateMRAREQRcvd
	StateREPSent
	StateREPRcvd
	StateMRAREPSent
	StateMRAREPRcvd
	StateEstablished
	StateDREQSent
	StateDREQRcvd
	StateTimewait
	// Service ID resolution (sidr.go): a SIDR_REQ sent and waiting for
	// its SIDR_REP, or received and waiting for the consumer's answer.
	StateSIDRREQSent
	StateSIDRREQRcvd
)

var stateNames = [...]string{
	StateIdle:        "IDLE",
	StateListen:      "LISTEN",
	StateREQSent:     "REQ_SENT",
	StateREQRcvd:     "REQ_RCVD",
	StateMRAREQSent:  "MRA_REQ_SENT",
	StateMRAREQRcvd:  "MRA_REQ_RCVD",
	StateREPSent:     "REP_SENT",
	StateREPRcvd:     "REP_RCVD",
	StateMRAREPSent:  "MRA_REP_SENT",
	StateMRAREPRcvd:  "MRA_REP_RCVD",
	StateEstablished: "ESTABLISHED",
	StateDREQSent:    "DREQ_SENT",
	StateDREQRcvd:    "DREQ_RCVD",
	StateTimewait:    "TIMEWAIT",
	StateSIDRREQSent: "SIDR_REQ_SENT",
	StateSIDRREQRcvd: "SIDR_REQ_RCVD",
}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "STATE?"
}

// waitingForREP reports whether the active side's REQ is outstanding.
func (s State) waitingForREP() bool { return s == StateREQSent || s == StateMRAREQRcvd }

// waitingForRTU reports whether the passive side's REP is outstanding.
func (s State) waitingForRTU() bool { return s == StateREPSent || s == StateMRAREPRcvd }

// connected reports whether the QPs may be carrying traffic: a DREQ is
// accepted in these states (cm.c's cm_dreq_handler).
func (s State) connected() bool {
	switch s {
	case StateREPSent, StateMRAREPRcvd, StateREPRcvd, StateMRAREPSent,
		StateEstablished, StateDREQSent:
		return true
	}
	return false
}
