package hostif

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Op is a control command (docs/HOST-INTERFACE.md). Its constants and
// their names come from provider/hostif.h's enum sn_op (ztypes_hostif.go).
type Op uint16

func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint16(o))
}

// ErrMessage is returned for a control message that cannot be decoded.
var ErrMessage = errors.New("hostif: bad control message")

// Bodies that provider/hostif.h has no struct for (ztypes_hostif.go holds
// those it has): the provider sends hello's version as a bare u32, and
// sends no query_gid.
type (
	HelloRequest    struct{ Version uint32 }
	QueryGIDRequest struct{ Index uint32 }
	// QueryGIDReply's Type is enum ibv_gid_type's: 2 for RoCE v2.
	QueryGIDReply struct {
		GID  [16]byte
		Type uint32
	}
	Empty struct{}
)

// Bodies of query_resources, which a connection may send without hello:
// the device's objects, in total and by session, as `rdma resource show`
// reports a kernel device's. Reserved fields are 0; a later version may
// give them a meaning that 0 still reads as "absent".
type (
	// ResourcesRequest asks for the sessions whose ID is above After (0:
	// from the first): a reply holds at most ResourcesPerReply of them,
	// in ID order, and the next request continues from the last one.
	ResourcesRequest struct {
		After    uint32
		Reserved uint32
	}
	// ResourceCounts counts objects by type; Channel counts completion
	// channels, CMID rdma_cm IDs.
	ResourceCounts struct {
		PD, CQ, QP, MR, SRQ, AH, Channel uint32
		CMID                             uint32
	}
	// SessionResources is one session: its ID (unique for the daemon's
	// lifetime, growing), the client's pid in the daemon's pid namespace
	// and its command name (/proc/PID/comm, NUL-padded), its objects, and
	// how many of its CM IDs listen.
	SessionResources struct {
		ID, PID   uint32
		Comm      [16]byte
		Counts    ResourceCounts
		Listening uint32
		Reserved  uint32
	}
	// ResourcesReply holds the device's totals, over every session
	// (Sessions of them), and Count session records.
	ResourcesReply struct {
		Sessions, Count uint32
		Total           ResourceCounts
		Session         [ResourcesPerReply]SessionResources
	}
)

// ResourcesPerReply is how many session records a query_resources reply
// holds.
const ResourcesPerReply = 32

type (
	// CMIDsRequest asks for the rdma_cm IDs after ID AfterID of session
	// AfterSession, in (session, ID) order.
	CMIDsRequest struct {
		AfterSession, AfterID uint32
	}
	// CMIDRecord is one rdma_cm ID: its session, the client's pid and
	// command name, its handle in the session, its QP's number and type
	// (enum ibv_qp_type: RC 2, UC 3, UD 4; 0: no QP), its state (the kernel's enum rdma_cm_state, as
	// `rdma resource show cm_id` prints it), its port space and its
	// addresses (IPv4-mapped, as CMAddr).
	CMIDRecord struct {
		Session, PID        uint32
		Comm                [16]byte
		ID, QPN             uint32
		State, QPType       uint8
		PortSpace           uint16
		LocalPort, PeerPort uint16
		Local, Peer         [16]byte
		Reserved            [4]byte
	}
	// CMIDsReply holds Count records.
	CMIDsReply struct {
		Count, Reserved uint32
		ID              [CMIDsPerReply]CMIDRecord
	}
)

// CMIDsPerReply is how many records a query_cm_ids reply holds.
const CMIDsPerReply = 48

// Encode writes a message of op with body into buf and returns its bytes.
func Encode(buf []byte, h Header, body any) ([]byte, error) {
	n := binary.Size(body)
	if n < 0 || HeaderLen+n > len(buf) {
		return nil, fmt.Errorf("%w: %T does not fit", ErrMessage, body)
	}
	h.Version, h.Length = Version, uint32(HeaderLen+n)
	le := binary.LittleEndian
	le.PutUint16(buf[offHeaderOp:], uint16(h.Op))
	le.PutUint16(buf[offHeaderVersion:], h.Version)
	le.PutUint32(buf[offHeaderLength:], h.Length)
	le.PutUint32(buf[offHeaderSeq:], h.Seq)
	le.PutUint32(buf[offHeaderStatus:], uint32(h.Status))
	if _, err := binary.Encode(buf[HeaderLen:], le, body); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMessage, err)
	}
	return buf[:h.Length], nil
}

// DecodeHeader reads the header of msg and checks its version and length.
func DecodeHeader(msg []byte) (Header, error) {
	if len(msg) < HeaderLen {
		return Header{}, fmt.Errorf("%w: %d bytes", ErrMessage, len(msg))
	}
	le := binary.LittleEndian
	h := Header{Op: Op(le.Uint16(msg[offHeaderOp:])), Version: le.Uint16(msg[offHeaderVersion:]),
		Length: le.Uint32(msg[offHeaderLength:]), Seq: le.Uint32(msg[offHeaderSeq:]),
		Status: int32(le.Uint32(msg[offHeaderStatus:]))}
	switch {
	case h.Version != Version:
		return h, fmt.Errorf("%w: version %d", ErrMessage, h.Version)
	case int(h.Length) != len(msg):
		return h, fmt.Errorf("%w: length %d in a message of %d bytes", ErrMessage, h.Length, len(msg))
	}
	return h, nil
}

// DecodeBody reads msg's body into body, which must be exactly its size.
func DecodeBody(msg []byte, body any) error {
	n := binary.Size(body)
	if n < 0 || len(msg) != HeaderLen+n {
		return fmt.Errorf("%w: body of %d bytes for %T", ErrMessage, len(msg)-HeaderLen, body)
	}
	if _, err := binary.Decode(msg[HeaderLen:], binary.LittleEndian, body); err != nil {
		return fmt.Errorf("%w: %v", ErrMessage, err)
	}
	return nil
}
