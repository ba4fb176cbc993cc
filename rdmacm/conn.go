package rdmacm

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/verbs"
)

// ConnParam are the parameters of a connection (struct rdma_conn_param).
type ConnParam struct {
	// PrivateData goes to the peer in the REQ (after the 36-byte rdma_cm
	// header: at most mad.CMAUserDataLen bytes), the REP or the REJ.
	PrivateData []byte
	// ResponderResources is how many RDMA READs and atomics the peer may
	// have outstanding at this side; InitiatorDepth how many this side
	// issues at once.
	ResponderResources, InitiatorDepth uint8
	// RetryCount and RNRRetryCount are the QP's retry counts (7: forever
	// for RNR). Zero RetryCount is taken as 7 as librdmacm's users mostly
	// mean it; RNRRetryCount is used as given.
	RetryCount, RNRRetryCount uint8
	// QPNum is the number of a QP the caller made itself and moves
	// through its states with InitQPAttr, for Connect and Accept on an ID
	// that has no QP (rdma_conn_param.qp_num; InitQPAttr).
	QPNum uint32
}

// The UDP port space (udaddy): an ID's QP is a UD QP, ready to send and
// receive once created, as librdmacm makes it; "connecting" is service ID
// resolution. Connect sends a SIDR_REQ with the rdma_cm header, and the
// SIDR_REP's QPN and Q_Key come back in EventEstablished (Event.UD), or
// its refusal in EventUnreachable (Reason: the status), as Linux's; a
// listener gets each SIDR_REQ as EventConnectRequest, and Accept answers
// with the new ID's QPN and Q_Key (no event follows on the passive side,
// as with the kernel's CM).

// UDPQKey is the Q_Key of the UDP port space's QPs (RDMA_UDP_QKEY).
const UDPQKey = 0x01234567

// UDParam is what EventEstablished of a UD ID carries (struct
// rdma_ud_param): the peer's address vector, QP and Q_Key.
type UDParam struct {
	AV   verbs.AddressVector
	QPN  uint32
	QKey uint32
}

// CreateQP creates the ID's QP on pd (nil: a PD of the ID's own) and
// moves it to INIT (rdma_create_qp); Connect or Accept take it on to RTS.
// The UDP port space's QP is UD and goes to RTS at once.
func (id *ID) CreateQP(pd *verbs.PD, init *verbs.QPInitAttr) (*verbs.QP, error) {
	return id.be.CreateQP(pd, init)
}

// qpPD checks that an ID of port space ps on dev, whose QP is have, may
// have a QP of init's type, and returns the PD it goes on: pd, or without
// one a new PD of dev.
func qpPD(dev *verbs.Device, have *verbs.QP, ps mad.PortSpace, pd *verbs.PD, init *verbs.QPInitAttr) (*verbs.PD, error) {
	if dev == nil || have != nil {
		return nil, fmt.Errorf("create QP: %w", ErrState)
	}
	if !qpTypeFits(ps, init.Type) {
		return nil, fmt.Errorf("create QP: the port space's QPs are of type %v: %w", qpType(ps), ErrInvalidArgument)
	}
	if pd == nil {
		return dev.AllocPD(), nil
	}
	if pd.Device() != dev {
		return nil, fmt.Errorf("create QP: PD of another device: %w", ErrInvalidArgument)
	}
	return pd, nil
}

// qpTypeFits reports whether an ID of port space ps connects QPs of type
// t: its qpType, or in the IB port space XRC's too (cma.c's
// cma_check_req_qp_type takes XRC there).
func qpTypeFits(ps mad.PortSpace, t verbs.QPType) bool {
	return t == qpType(ps) || (ps == PortSpaceIB && t.IsXRC())
}

// qpType is the type of QP port space ps connects.
func qpType(ps mad.PortSpace) verbs.QPType {
	if ps == PortSpaceUDP {
		return verbs.QPTypeUD
	}
	return verbs.QPTypeRC
}

// AttachQP makes qp, a QP of the ID's device in RESET (RC, UD for the UDP
// port space), the ID's QP and moves it on as CreateQP does with a QP it
// makes. The QP stays the caller's: DestroyQP lets go of it, Destroy
// moves it to ERR and lets go of it; neither destroys it. It is for a
// program that makes its QPs itself (the softnic daemon, which makes each
// client's QP with the client's rings and lends it to the ID the client
// names); an ID that runs in a daemon takes none.
func (id *ID) AttachQP(qp *verbs.QP) error {
	if qp == nil {
		return fmt.Errorf("attach QP: %w", ErrInvalidArgument)
	}
	return id.be.AttachQP(qp)
}

// DestroyQP destroys the ID's QP (rdma_destroy_qp).
func (id *ID) DestroyQP() error { return id.be.DestroyQP() }

// A QP the caller made and moves through its states itself, as rping -q
// does with librdmacm: Connect and Accept on an ID without a QP take its
// number in ConnParam.QPNum; InitQPAttr gives the attributes of each state
// from the connection's exchange (rdma_init_qp_attr); on the active side
// the REP brings EventConnectResponse instead of EventEstablished, and
// Establish sends the RTU once the caller's QP is ready (rdma_establish).
// The passive side's RTU brings EventEstablished as usual.

// InitQPAttr returns the attributes, and which of them to set, that move
// a QP of the ID's connection to state (rdma_init_qp_attr): INIT, RTR or
// RTS, the last two once the connection's REQ (passive side) or REP
// (active side) has come.
func (id *ID) InitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	return id.be.InitQPAttr(state)
}

// Connect connects to the peer resolved by ResolveAddr and ResolveRoute
// (rdma_connect). It returns once the REQ is sent; EventEstablished,
// EventRejected (ErrRefused when nobody listens on the port),
// EventUnreachable (no answer after the CM's retries) or EventConnectError
// follows.
func (id *ID) Connect(p *ConnParam) error { return id.be.Connect(p) }

// Accept accepts a connection request (rdma_accept): the ID's QP goes to
// RTS and a REP goes to the peer; EventEstablished follows on the RTU.
func (id *ID) Accept(p *ConnParam) error { return id.be.Accept(p) }

// Reject rejects a connection request (rdma_reject) with a consumer
// reject carrying privateData.
func (id *ID) Reject(privateData []byte) error { return id.be.Reject(privateData) }

// Establish completes a connection whose EventConnectResponse came
// (rdma_establish): it sends the RTU. The caller's QP is to be in RTS by
// then; the ID is then established, with no further event.
func (id *ID) Establish() error { return id.be.Establish() }

// Disconnect ends the connection (rdma_disconnect): the QP goes to ERR,
// flushing what is posted, and a DREQ goes to the peer. EventDisconnected
// follows on the DREP (or when the DREQ's retries run out), and on the
// peer's side on the DREQ. After the peer disconnected first, Disconnect
// has nothing left to do and returns nil.
func (id *ID) Disconnect() error { return id.be.Disconnect() }
