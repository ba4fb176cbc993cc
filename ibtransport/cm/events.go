package cm

import (
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// Handler receives a connection's or a listener's events. It runs on the
// Manager's dispatch goroutine, one event at a time, in order; it may call
// Conn methods but not Manager.Close.
type Handler func(Event)

// EventType says what happened.
type EventType uint8

// The events, named after Linux's enum ib_cm_event_type.
const (
	// EventREQReceived: a REQ for a Listener's service; Conn is new, in
	// StateREQRcvd, and answers with Accept, Reject or MRA.
	EventREQReceived EventType = iota + 1
	// EventREPReceived: the active side's REQ was accepted; move the QP to
	// RTR and RTS, then call ReadyToUse (or Reject).
	EventREPReceived
	// EventRTUReceived: the passive side is established.
	EventRTUReceived
	// EventEstablished: Conn.Established made the passive side
	// established before the RTU came (Linux's IB_CM_USER_ESTABLISHED).
	EventEstablished
	// EventREJReceived: the peer rejected; Reason and PrivateData say why.
	// The connection is over (gone, or in TIMEWAIT when it was connected).
	EventREJReceived
	// EventMRAReceived: the peer needs longer; the wait was extended.
	EventMRAReceived
	// EventTimeout: the REQ or REP went unanswered through all retries;
	// the connection failed and is gone.
	EventTimeout
	// EventDREQReceived: the peer disconnects. The DREP is already sent and
	// the connection is in TIMEWAIT.
	EventDREQReceived
	// EventDisconnected: our DREQ was answered by a DREP, or went
	// unanswered through all retries (TimedOut); now in TIMEWAIT.
	EventDisconnected
	// EventTimewaitExit: TIMEWAIT is over and the connection is forgotten.
	EventTimewaitExit
	// EventSIDRREQReceived: a SIDR_REQ for a Listener's service; Conn is
	// new, in StateSIDRREQRcvd, and answers with SIDRReply.
	EventSIDRREQReceived
	// EventSIDRREPReceived: the answer to ResolveService: SIDRStatus, and
	// with SIDRValid the service's RemoteQPN and QKey. (A request that
	// goes unanswered through its retries gets EventTimeout.)
	EventSIDRREPReceived
)

var eventNames = [...]string{
	EventREQReceived:     "REQ received",
	EventREPReceived:     "REP received",
	EventRTUReceived:     "RTU received",
	EventEstablished:     "established",
	EventREJReceived:     "REJ received",
	EventMRAReceived:     "MRA received",
	EventTimeout:         "timeout",
	EventDREQReceived:    "DREQ received",
	EventDisconnected:    "disconnected",
	EventTimewaitExit:    "timewait exit",
	EventSIDRREQReceived: "SIDR REQ received",
	EventSIDRREPReceived: "SIDR REP received",
}

func (t EventType) String() string {
	if int(t) < len(eventNames) && eventNames[t] != "" {
		return eventNames[t]
	}
	return "event?"
}

// Event is one happening on a connection. The message's fields are copied
// out, so the Event stays valid after the Handler returns.
type Event struct {
	Type     EventType
	Conn     *Conn
	Listener *Listener // for EventREQReceived: the listener it came to

	// From the REQ (EventREQReceived). ResponderResources and
	// InitiatorDepth are the sender's: what it accepts and what it issues.
	ServiceID                uint64
	Transport                uint8 // mad.TransportRC, mad.TransportUC or mad.TransportXRC
	PathMTU                  ibv.MTU
	RetryCount               uint8
	PKey                     uint16
	LocalACKTimeout          uint8 // of the primary path
	RemoteCMResponseTimeout  uint8 // how long the sender waits for us
	LocalCMResponseTimeout   uint8 // how long the sender takes to answer
	MaxCMRetries             uint8
	Peer                     ibv.AddressVector // where the MAD came from
	PeerGID, LocalGID        ibv.GID           // primary path, as we see it
	FlowLabel                uint32
	TrafficClass, HopLimit   uint8
	EndToEndFlowControl, SRQ bool
	RemoteCAGUID             uint64

	// From the REQ and the REP (EventREPReceived).
	RemoteQPN          uint32
	StartingPSN        uint32 // the first PSN the peer's receive queue expects
	ResponderResources uint8
	InitiatorDepth     uint8
	RNRRetryCount      uint8
	TargetACKDelay     uint8 // REP only
	FailoverAccepted   uint8 // REP only

	// From a REJ (EventREJReceived) or MRA (EventMRAReceived).
	Reason          mad.RejectReason
	MessageRejected uint8 // mad.MsgREQ, MsgREP or MsgOther
	ARI             []byte
	ServiceTimeout  uint8

	// TimedOut marks an EventDisconnected whose DREQ went unanswered.
	TimedOut bool

	// From a SIDR_REP (EventSIDRREPReceived); RemoteQPN above is its QPN.
	SIDRStatus mad.SIDRStatus
	QKey       uint32

	// PrivateData is the whole private data field of the message that
	// caused the event (REQ, REP, RTU, REJ, MRA, DREQ or DREP).
	PrivateData []byte
}
