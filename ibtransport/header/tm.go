package header

import "encoding/binary"

// Tag matching's headers (rdma-core Documentation/tag_matching.md,
// infiniband/tm_types.h): they ride at the start of an RC SEND's payload,
// so the transport does not know them; a TM SRQ's responder reads them.
// Every field is big-endian.
const (
	TMHLen = 16 // opcode, 3 reserved, app_ctx, tag
	RVHLen = 16 // va, rkey, length
)

// TMOpcode is a TM header's operation (ibv_tmh_op).
type TMOpcode uint8

// TM header operations, with rdma-core's values.
const (
	TMNoTag TMOpcode = 0 // untagged: always an unexpected message
	TMRndv  TMOpcode = 1 // rendezvous request: TMH, RVH, metadata
	TMFin   TMOpcode = 2 // rendezvous done: the request's TMH and RVH, opcode FIN
	TMEager TMOpcode = 3 // eager: TMH, payload
)

// TMH is a view of a tag matching header.
type TMH []byte

// ParseTMH returns the TM header at the start of payload, and false if
// payload is too short to hold one, or, for a rendezvous request, its RVH.
// It never reads past payload, whatever its bytes say.
func ParseTMH(payload []byte) (TMH, bool) {
	if len(payload) < TMHLen {
		return nil, false
	}
	h := TMH(payload[:TMHLen])
	if h.Opcode() == TMRndv && len(payload) < TMHLen+RVHLen {
		return nil, false
	}
	return h, true
}

// Opcode returns the operation.
func (h TMH) Opcode() TMOpcode { return TMOpcode(h[0]) }

// SetOpcode sets the operation.
func (h TMH) SetOpcode(o TMOpcode) { h[0] = uint8(o) }

// AppCtx returns the sender's opaque word (ibv_wc_tm_info's priv).
func (h TMH) AppCtx() uint32 { return binary.BigEndian.Uint32(h[4:]) }

// SetAppCtx sets the sender's opaque word.
func (h TMH) SetAppCtx(v uint32) { binary.BigEndian.PutUint32(h[4:], v) }

// Tag returns the tag.
func (h TMH) Tag() uint64 { return binary.BigEndian.Uint64(h[8:]) }

// SetTag sets the tag.
func (h TMH) SetTag(t uint64) { binary.BigEndian.PutUint64(h[8:], t) }

// RVH is a view of a rendezvous header: where the receiver READs the
// message from.
type RVH []byte

// RVHOf returns the RVH after the TM header of a rendezvous request that
// ParseTMH accepted.
func RVHOf(payload []byte) RVH { return RVH(payload[TMHLen : TMHLen+RVHLen]) }

// VA returns the sender's buffer address.
func (r RVH) VA() uint64 { return binary.BigEndian.Uint64(r[0:]) }

// SetVA sets the sender's buffer address.
func (r RVH) SetVA(v uint64) { binary.BigEndian.PutUint64(r[0:], v) }

// RKey returns the sender's buffer's rkey.
func (r RVH) RKey() uint32 { return binary.BigEndian.Uint32(r[8:]) }

// SetRKey sets the rkey.
func (r RVH) SetRKey(k uint32) { binary.BigEndian.PutUint32(r[8:], k) }

// Length returns the message's length.
func (r RVH) Length() uint32 { return binary.BigEndian.Uint32(r[12:]) }

// SetLength sets the message's length.
func (r RVH) SetLength(n uint32) { binary.BigEndian.PutUint32(r[12:], n) }
