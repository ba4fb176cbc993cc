package header

import "encoding/binary"

// Lengths of the transport headers on the wire, in bytes.
const (
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	DETHLen         = 8
	FETHLen         = 4
	XRCETHLen       = 4
	ICRCLen         = 4
)

// BTH is the Base Transport Header that starts every IB packet.
//
//	byte 0     opcode
//	byte 1     SE(7) MigReq(6) PadCount(5:4) TVer(3:0)
//	byte 2-3   P_Key
//	byte 4     FECN(7) BECN(6) reserved
//	byte 5-7   destination QP
//	byte 8     AckReq(7) reserved
//	byte 9-11  PSN
type BTH []byte

// Opcode returns the packet's opcode.
func (b BTH) Opcode() Opcode { return Opcode(b[0]) }

// SetOpcode sets the opcode.
func (b BTH) SetOpcode(o Opcode) { b[0] = byte(o) }

// SolicitedEvent reports the SE bit.
func (b BTH) SolicitedEvent() bool { return b[1]&0x80 != 0 }

// SetSolicitedEvent sets the SE bit.
func (b BTH) SetSolicitedEvent(v bool) { setBit(&b[1], 0x80, v) }

// MigReq reports the migration request bit.
func (b BTH) MigReq() bool { return b[1]&0x40 != 0 }

// SetMigReq sets the migration request bit.
func (b BTH) SetMigReq(v bool) { setBit(&b[1], 0x40, v) }

// PadCount returns the number of pad bytes (0..3) after the payload.
func (b BTH) PadCount() int { return int(b[1]>>4) & 3 }

// SetPadCount sets the pad count; n must be 0..3.
func (b BTH) SetPadCount(n int) { b[1] = b[1]&^0x30 | byte(n&3)<<4 }

// TransportVersion returns the transport header version (0 for IBA 1.x).
func (b BTH) TransportVersion() uint8 { return b[1] & 0x0f }

// SetTransportVersion sets the transport header version.
func (b BTH) SetTransportVersion(v uint8) { b[1] = b[1]&^0x0f | v&0x0f }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[2:]) }

// SetPKey sets the partition key.
func (b BTH) SetPKey(k uint16) { binary.BigEndian.PutUint16(b[2:], k) }

// FECN reports the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[4]&0x80 != 0 }

// SetFECN sets the FECN bit.
func (b BTH) SetFECN(v bool) { setBit(&b[4], 0x80, v) }

// BECN reports the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[4]&0x40 != 0 }

// SetBECN sets the BECN bit.
func (b BTH) SetBECN(v bool) { setBit(&b[4], 0x40, v) }

// DestQPN returns the 24-bit destination queue pair number.
func (b BTH) DestQPN() uint32 { return get24(b[5:]) }

// SetDestQPN sets the destination queue pair number (low 24 bits of q).
func (b BTH) SetDestQPN(q uint32) { put24(b[5:], q) }

// AckReq reports whether the requester asks for an acknowledgement.
func (b BTH) AckReq() bool { return b[8]&0x80 != 0 }

// SetAckReq sets the AckReq bit.
func (b BTH) SetAckReq(v bool) { setBit(&b[8], 0x80, v) }

// PSN returns the packet sequence number.
func (b BTH) PSN() PSN { return PSN(get24(b[9:])) }

// SetPSN sets the packet sequence number.
func (b BTH) SetPSN(p PSN) { put24(b[9:], uint32(p)) }

// Init writes a whole BTH with the reserved bits zero, transport version 0
// and the default P_Key 0xffff.
func (b BTH) Init(op Opcode, destQPN uint32, psn PSN, ackReq bool) {
	b[0] = byte(op)
	b[1] = 0
	b[2], b[3] = 0xff, 0xff
	b[4] = 0
	put24(b[5:], destQPN)
	b[8] = 0
	if ackReq {
		b[8] = 0x80
	}
	put24(b[9:], uint32(psn))
}

// RETH is the RDMA Extended Transport Header of WRITE and READ requests.
type RETH []byte

// VA returns the remote virtual address.
func (r RETH) VA() uint64 { return binary.BigEndian.Uint64(r[0:]) }

// SetVA sets the remote virtual address.
func (r RETH) SetVA(v uint64) { binary.BigEndian.PutUint64(r[0:], v) }

// RKey returns the remote key.
func (r RETH) RKey() uint32 { return binary.BigEndian.Uint32(r[8:]) }

// SetRKey sets the remote key.
func (r RETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(r[8:], k) }

// DMALength returns the length of the whole message in bytes.
func (r RETH) DMALength() uint32 { return binary.BigEndian.Uint32(r[12:]) }

// SetDMALength sets the message length.
func (r RETH) SetDMALength(n uint32) { binary.BigEndian.PutUint32(r[12:], n) }

// AETH is the ACK Extended Transport Header.
type AETH []byte

// Syndrome returns the ACK/NAK syndrome.
func (a AETH) Syndrome() Syndrome { return Syndrome(a[0]) }

// SetSyndrome sets the syndrome.
func (a AETH) SetSyndrome(s Syndrome) { a[0] = byte(s) }

// MSN returns the 24-bit message sequence number.
func (a AETH) MSN() uint32 { return get24(a[1:]) }

// SetMSN sets the message sequence number.
func (a AETH) SetMSN(m uint32) { put24(a[1:], m) }

// AtomicETH is the Atomic Extended Transport Header of CmpSwap and FetchAdd.
type AtomicETH []byte

// VA returns the remote virtual address (8-byte aligned when valid).
func (a AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(a[0:]) }

// SetVA sets the remote virtual address.
func (a AtomicETH) SetVA(v uint64) { binary.BigEndian.PutUint64(a[0:], v) }

// RKey returns the remote key.
func (a AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(a[8:]) }

// SetRKey sets the remote key.
func (a AtomicETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(a[8:], k) }

// SwapAdd returns the swap value (CmpSwap) or the addend (FetchAdd).
func (a AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(a[12:]) }

// SetSwapAdd sets the swap value or addend.
func (a AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(a[12:], v) }

// Compare returns the compare value of CmpSwap.
func (a AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(a[20:]) }

// SetCompare sets the compare value.
func (a AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(a[20:], v) }

// AtomicAckETH carries the original remote value back in an atomic ACK.
type AtomicAckETH []byte

// OrigData returns the value the target held before the atomic operation.
func (a AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(a) }

// SetOrigData sets the original value.
func (a AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(a, v) }

// ImmDt is the immediate data header.
type ImmDt []byte

// Imm returns the immediate data as the 32-bit big-endian value on the wire.
func (i ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(i) }

// SetImm sets the immediate data.
func (i ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(i, v) }

// IETH is the Invalidate Extended Transport Header of SEND with invalidate.
type IETH []byte

// RKey returns the remote key to invalidate.
func (i IETH) RKey() uint32 { return binary.BigEndian.Uint32(i) }

// SetRKey sets the remote key to invalidate.
func (i IETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(i, k) }

// DETH is the Datagram Extended Transport Header of UD packets.
type DETH []byte

// QKey returns the queue key.
func (d DETH) QKey() uint32 { return binary.BigEndian.Uint32(d[0:]) }

// SetQKey sets the queue key.
func (d DETH) SetQKey(k uint32) { binary.BigEndian.PutUint32(d[0:], k) }

// SrcQP returns the 24-bit source queue pair number.
func (d DETH) SrcQP() uint32 { return get24(d[5:]) }

// SetSrcQP sets the source queue pair number; the reserved byte is zeroed.
func (d DETH) SetSrcQP(q uint32) { d[4] = 0; put24(d[5:], q) }

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

func setBit(b *byte, mask byte, v bool) {
	if v {
		*b |= mask
	} else {
		*b &^= mask
	}
}

// FETH is the FLUSH Extended Transport Header (IBTA 1.5, A19): one
// big-endian word whose bits 3-0 are the placement type and bits 5-4 the
// selectivity level; the rest is reserved.
type FETH []byte

// Flush placement types (bits of the FETH's placement type, IBTA's and
// the kernel's IB_FLUSH_GLOBAL and IB_FLUSH_PERSISTENT).
const (
	FlushGlobal     uint8 = 1 << 0
	FlushPersistent uint8 = 1 << 1
)

// Flush selectivity levels: the RETH's range, or the whole region its
// rkey names (IB_FLUSH_RANGE, IB_FLUSH_MR).
const (
	FlushRange uint8 = 0
	FlushMR    uint8 = 1
)

// PlacementType returns the placement type (4 bits).
func (f FETH) PlacementType() uint8 { return f[3] & 0x0f }

// SelectivityLevel returns the selectivity level (2 bits).
func (f FETH) SelectivityLevel() uint8 { return f[3] >> 4 & 3 }

// Set writes the whole FETH: placement type t and selectivity level l,
// reserved bits zero.
func (f FETH) Set(t, l uint8) {
	f[0], f[1], f[2] = 0, 0, 0
	f[3] = t&0x0f | (l&3)<<4
}

// XRCETH is the XRC Extended Transport Header that follows the BTH of
// every XRC request: the number of the shared receive queue at the
// responder the request is for.
//
//	byte 0     reserved
//	byte 1-3   XRC SRQ number
type XRCETH []byte

// SRQN returns the XRC SRQ number.
func (x XRCETH) SRQN() uint32 { return get24(x[1:]) }

// SetSRQN sets the XRC SRQ number and clears the reserved byte.
func (x XRCETH) SetSRQN(n uint32) { x[0] = 0; put24(x[1:], n) }
