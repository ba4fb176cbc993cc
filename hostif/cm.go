package hostif

import "net/netip"

// Bodies of the connection manager's commands (rdma_cm through the
// daemon, as the kernel's rdma_ucm serves librdmacm): the daemon runs the
// IDs, the client drives them and takes their events with cm_get_event
// when its channel's pipe is readable. Addresses are IPv6, IPv4 ones
// mapped (::ffff:a.b.c.d); all zero is none.
type (
	// CMCreateIDRequest creates an ID whose events go to Channel, in
	// PortSpace (RDMA_PS_TCP, 0x0106); UserHandle comes back in its
	// events.
	CMCreateIDRequest struct {
		Channel, PortSpace uint32
		UserHandle         uint64
	}
	// CMAddrRequest binds ID to Addr and Port (cm_bind).
	CMAddrRequest struct {
		ID       uint32
		Port     uint16
		Reserved uint16
		Addr     [16]byte
	}
	// CMAddrReply is an ID's local and peer address and port.
	CMAddrReply struct {
		LocalPort, PeerPort uint16
		Local, Peer         [16]byte
	}
	// CMResolveAddrRequest resolves Dst from Src (none: the ID's bound
	// address or the route's) within TimeoutMS.
	CMResolveAddrRequest struct {
		ID, TimeoutMS     uint32
		DstPort, Reserved uint16
		Src, Dst          [16]byte
	}
	CMResolveRouteRequest struct{ ID, TimeoutMS uint32 }
	// CMCreateQPRequest creates the ID's QP as create_qp does and moves
	// it to INIT; the reply is create_qp's, with the ring's descriptor.
	CMCreateQPRequest struct {
		ID, Reserved uint32
		QP           CreateQPRequest
	}
	// CMConnParam is struct rdma_conn_param for cm_connect, cm_accept and
	// cm_reject (which uses the private data only). QPNum names the
	// session's QP of an ID that has none (rdma_conn_param.qp_num).
	CMConnParam struct {
		ID                                 uint32
		ResponderResources, InitiatorDepth uint8
		RetryCount, RNRRetryCount          uint8
		PrivateLen                         uint32
		Private                            [CMPrivateDataMax]byte
		QPNum                              uint32
	}
	// CMInitQPAttrRequest asks for the attributes that move a QP of ID's
	// connection to State (ibv_qp_state: INIT, RTR or RTS); the reply is
	// a ModifyQPRequest body whose Handle is 0.
	CMInitQPAttrRequest struct{ ID, State uint32 }
	CMListenRequest     struct{ ID, Backlog uint32 }
	// CMSetOptionRequest sets an ID's option (rdma_set_option at level
	// RDMA_OPTION_ID): Option 0 the traffic class, 3 the ACK timeout.
	CMSetOptionRequest struct{ ID, Option, Value uint32 }
	// CMMigrateRequest sends ID's events to Channel from now on, those
	// not yet taken too (rdma_migrate_id).
	CMMigrateRequest struct{ ID, Channel uint32 }
	// CMGetEventRequest takes the next event of Channel; EAGAIN when
	// there is none.
	CMGetEventRequest struct{ Channel uint32 }
	// CMEvent is one event (struct rdma_cm_event): Type is librdmacm's
	// event number, Status 0 or a negative errno, ID the ID it is about
	// (for CONNECT_REQUEST the new ID, the request's, and Listen the
	// listening ID), UserHandle the ID's (the listener's for a new ID).
	// Local and Peer are the ID's addresses after the event; the
	// parameters and private data are what the peer sent, Reason a REJ's
	// reason (a SIDR_REP's status for a UD ID). For a UD ID's
	// ESTABLISHED, QPN and QKey are the peer's QP and Q_Key, SGIDIndex
	// and HopLimit the address vector's (whose GID is Peer's).
	CMEvent struct {
		Type                               uint32
		Status                             int32
		ID, Listen                         uint32
		UserHandle                         uint64
		LocalPort, PeerPort                uint16
		Local, Peer                        [16]byte
		ResponderResources, InitiatorDepth uint8
		RetryCount, RNRRetryCount          uint8
		Reason, PrivateLen                 uint16
		Private                            [CMPrivateDataMax]byte
		QPN, QKey                          uint32
		SGIDIndex, HopLimit                uint8
		Reserved                           uint16
	}
)

// CMPrivateDataMax is the room for private data in the CM's bodies: more
// than any CM message carries (a DREQ's 220 bytes).
const CMPrivateDataMax = 224

// CMAddr encodes a for the CM's bodies (none: all zero).
func CMAddr(a netip.Addr) [16]byte {
	if !a.IsValid() {
		return [16]byte{}
	}
	return netip.AddrFrom16(a.As16()).As16()
}

// CMAddrPort decodes an address of the CM's bodies, IPv4 unmapped;
// all zero with port 0 is none.
func CMAddrPort(b [16]byte, port uint16) netip.AddrPort {
	if b == ([16]byte{}) && port == 0 {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(netip.AddrFrom16(b).Unmap(), port)
}
