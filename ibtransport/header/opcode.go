package header

import "strconv"

// Opcode is the BTH opcode: the top three bits name the transport service,
// the low five the operation.
type Opcode uint8

// Reliable Connected opcodes.
const (
	OpRCSendFirst          Opcode = 0x00
	OpRCSendMiddle         Opcode = 0x01
	OpRCSendLast           Opcode = 0x02
	OpRCSendLastImm        Opcode = 0x03
	OpRCSendOnly           Opcode = 0x04
	OpRCSendOnlyImm        Opcode = 0x05
	OpRCWriteFirst         Opcode = 0x06
	OpRCWriteMiddle        Opcode = 0x07
	OpRCWriteLast          Opcode = 0x08
	OpRCWriteLastImm       Opcode = 0x09
	OpRCWriteOnly          Opcode = 0x0a
	OpRCWriteOnlyImm       Opcode = 0x0b
	OpRCReadRequest        Opcode = 0x0c
	OpRCReadResponseFirst  Opcode = 0x0d
	OpRCReadResponseMiddle Opcode = 0x0e
	OpRCReadResponseLast   Opcode = 0x0f
	OpRCReadResponseOnly   Opcode = 0x10
	OpRCAcknowledge        Opcode = 0x11
	OpRCAtomicAcknowledge  Opcode = 0x12
	OpRCCompareSwap        Opcode = 0x13
	OpRCFetchAdd           Opcode = 0x14
	OpRCSendLastInv        Opcode = 0x16
	OpRCSendOnlyInv        Opcode = 0x17
	// IBTA 1.5 (Linux rxe since 6.2): FLUSH carries a FETH and a RETH;
	// ATOMIC_WRITE a RETH and the 8 bytes to write. Both are answered by
	// an RDMA READ RESPONSE ONLY without payload.
	OpRCFlush       Opcode = 0x1c
	OpRCAtomicWrite Opcode = 0x1d
)

// Unreliable Connected opcodes.
const (
	OpUCSendFirst    Opcode = 0x20
	OpUCSendMiddle   Opcode = 0x21
	OpUCSendLast     Opcode = 0x22
	OpUCSendLastImm  Opcode = 0x23
	OpUCSendOnly     Opcode = 0x24
	OpUCSendOnlyImm  Opcode = 0x25
	OpUCWriteFirst   Opcode = 0x26
	OpUCWriteMiddle  Opcode = 0x27
	OpUCWriteLast    Opcode = 0x28
	OpUCWriteLastImm Opcode = 0x29
	OpUCWriteOnly    Opcode = 0x2a
	OpUCWriteOnlyImm Opcode = 0x2b
)

// XRCOpcodeBase added to an RC opcode makes its XRC twin.
const XRCOpcodeBase Opcode = 0xa0

// Unreliable Datagram opcodes and the RoCEv2 congestion notification packet.
const (
	OpUDSendOnly    Opcode = 0x64
	OpUDSendOnlyImm Opcode = 0x65
	OpCNP           Opcode = 0x81
)

// Transport is the service an opcode belongs to.
type Transport uint8

// Transport services.
const (
	TransportRC Transport = iota + 1
	TransportUC
	TransportUD
	TransportCNP
	// TransportXRC is eXtended Reliable Connected (the IBA XRC annex):
	// RC's operations with opcode prefix 0xA0, and an XRCETH after the
	// BTH of each request.
	TransportXRC
)

func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportUD:
		return "UD"
	case TransportCNP:
		return "CNP"
	case TransportXRC:
		return "XRC"
	}
	return "invalid"
}

// Kind is what an opcode does, independent of its transport.
type Kind uint8

// Operation kinds.
const (
	KindSend Kind = iota + 1
	KindWrite
	KindReadRequest
	KindReadResponse
	KindAck
	KindAtomicRequest
	KindAtomicAck
	KindCNP
	KindFlush
	KindAtomicWrite
)

// Position says where a packet falls in a multi-packet message.
type Position uint8

// Positions within a message.
const (
	PositionNone Position = iota // not part of a segmented message (ACK, READ request, atomic, CNP)
	PositionFirst
	PositionMiddle
	PositionLast
	PositionOnly
)

// Ext is a set of extension headers that follow the BTH.
type Ext uint16

// Extension headers, in the order they appear on the wire (DETH first for UD,
// XRCETH first for XRC requests, FETH before the RETH of a FLUSH, then
// RETH/AtomicETH, AETH, AtomicAckETH, ImmDt/IETH).
const (
	ExtDETH Ext = 1 << iota
	ExtXRCETH
	ExtFETH
	ExtRETH
	ExtAtomicETH
	ExtAETH
	ExtAtomicAckETH
	ExtImmDt
	ExtIETH
)

// OpcodeInfo describes the packets of one opcode.
type OpcodeInfo struct {
	Name       string
	Transport  Transport
	Kind       Kind
	Position   Position
	Ext        Ext
	HasPayload bool
	// HeaderLen is the length of the BTH plus the extension headers.
	HeaderLen int
}

var opcodeTable [256]OpcodeInfo

func init() {
	type row struct {
		op      Opcode
		name    string
		kind    Kind
		pos     Position
		ext     Ext
		payload bool
	}
	// The RC/UC rows are the same operations; UC lacks READ, atomics and ACKs.
	connected := []row{
		{0x00, "SEND_FIRST", KindSend, PositionFirst, 0, true},
		{0x01, "SEND_MIDDLE", KindSend, PositionMiddle, 0, true},
		{0x02, "SEND_LAST", KindSend, PositionLast, 0, true},
		{0x03, "SEND_LAST_WITH_IMMEDIATE", KindSend, PositionLast, ExtImmDt, true},
		{0x04, "SEND_ONLY", KindSend, PositionOnly, 0, true},
		{0x05, "SEND_ONLY_WITH_IMMEDIATE", KindSend, PositionOnly, ExtImmDt, true},
		{0x06, "RDMA_WRITE_FIRST", KindWrite, PositionFirst, ExtRETH, true},
		{0x07, "RDMA_WRITE_MIDDLE", KindWrite, PositionMiddle, 0, true},
		{0x08, "RDMA_WRITE_LAST", KindWrite, PositionLast, 0, true},
		{0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", KindWrite, PositionLast, ExtImmDt, true},
		{0x0a, "RDMA_WRITE_ONLY", KindWrite, PositionOnly, ExtRETH, true},
		{0x0b, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", KindWrite, PositionOnly, ExtRETH | ExtImmDt, true},
	}
	rcOnly := []row{
		{0x0c, "RDMA_READ_REQUEST", KindReadRequest, PositionNone, ExtRETH, false},
		{0x0d, "RDMA_READ_RESPONSE_FIRST", KindReadResponse, PositionFirst, ExtAETH, true},
		{0x0e, "RDMA_READ_RESPONSE_MIDDLE", KindReadResponse, PositionMiddle, 0, true},
		{0x0f, "RDMA_READ_RESPONSE_LAST", KindReadResponse, PositionLast, ExtAETH, true},
		{0x10, "RDMA_READ_RESPONSE_ONLY", KindReadResponse, PositionOnly, ExtAETH, true},
		{0x11, "ACKNOWLEDGE", KindAck, PositionNone, ExtAETH, false},
		{0x12, "ATOMIC_ACKNOWLEDGE", KindAtomicAck, PositionNone, ExtAETH | ExtAtomicAckETH, false},
		{0x13, "COMPARE_SWAP", KindAtomicRequest, PositionNone, ExtAtomicETH, false},
		{0x14, "FETCH_ADD", KindAtomicRequest, PositionNone, ExtAtomicETH, false},
		{0x16, "SEND_LAST_WITH_INVALIDATE", KindSend, PositionLast, ExtIETH, true},
		{0x17, "SEND_ONLY_WITH_INVALIDATE", KindSend, PositionOnly, ExtIETH, true},
		{0x1c, "FLUSH", KindFlush, PositionNone, ExtFETH | ExtRETH, false},
		{0x1d, "ATOMIC_WRITE", KindAtomicWrite, PositionNone, ExtRETH, true},
	}
	add := func(t Transport, prefix string, base Opcode, r row) {
		op := base | r.op
		opcodeTable[op] = OpcodeInfo{
			Name: prefix + r.name, Transport: t, Kind: r.kind, Position: r.pos,
			Ext: r.ext, HasPayload: r.payload, HeaderLen: BTHLen + r.ext.Len(),
		}
	}
	for _, r := range connected {
		add(TransportRC, "RC_", 0x00, r)
		add(TransportUC, "UC_", 0x20, r)
	}
	for _, r := range rcOnly {
		add(TransportRC, "RC_", 0x00, r)
	}
	// XRC: RC's operations but IBTA 1.5's FLUSH and ATOMIC_WRITE, which
	// softnic offers on RC only; requests carry an XRCETH, responses none.
	for _, r := range append(connected[:len(connected):len(connected)], rcOnly...) {
		if r.kind == KindFlush || r.kind == KindAtomicWrite {
			continue
		}
		if r.kind != KindReadResponse && r.kind != KindAck && r.kind != KindAtomicAck {
			r.ext |= ExtXRCETH
		}
		add(TransportXRC, "XRC_", XRCOpcodeBase, r)
	}
	add(TransportUD, "UD_", 0x60, row{0x04, "SEND_ONLY", KindSend, PositionOnly, ExtDETH, true})
	add(TransportUD, "UD_", 0x60, row{0x05, "SEND_ONLY_WITH_IMMEDIATE", KindSend, PositionOnly, ExtDETH | ExtImmDt, true})
	// CNP: BTH followed by 16 reserved bytes, which we treat as payload.
	opcodeTable[OpCNP] = OpcodeInfo{Name: "CNP", Transport: TransportCNP, Kind: KindCNP, HasPayload: true, HeaderLen: BTHLen}
}

// extLens are the extension headers with their lengths.
var extLens = [...]struct {
	ext Ext
	n   int
}{
	{ExtDETH, DETHLen}, {ExtXRCETH, XRCETHLen}, {ExtFETH, FETHLen}, {ExtRETH, RETHLen}, {ExtAtomicETH, AtomicETHLen}, {ExtAETH, AETHLen},
	{ExtAtomicAckETH, AtomicAckETHLen}, {ExtImmDt, ImmDtLen}, {ExtIETH, IETHLen},
}

// Len returns the total length of the extension headers in e.
func (e Ext) Len() int {
	n := 0
	for _, x := range extLens {
		if e&x.ext != 0 {
			n += x.n
		}
	}
	return n
}

// Info returns the description of o; Info().Transport is zero for opcodes
// softnic does not know (RD, reserved and vendor opcodes).
func (o Opcode) Info() *OpcodeInfo { return &opcodeTable[o] }

// Valid reports whether o is a known RC, UC, UD, XRC or CNP opcode.
func (o Opcode) Valid() bool { return opcodeTable[o].Transport != 0 }

// HeaderLen returns the length of the BTH plus o's extension headers.
func (o Opcode) HeaderLen() int { return opcodeTable[o].HeaderLen }

func (o Opcode) String() string {
	if o.Valid() {
		return opcodeTable[o].Name
	}
	return "OPCODE_0x" + strconv.FormatUint(uint64(o), 16)
}
