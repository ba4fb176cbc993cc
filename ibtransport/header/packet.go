package header

import "errors"

// Errors from ParsePacket. They are plain sentinels so that a receive path
// can count them with errors.Is without allocating.
var (
	ErrTruncated     = errors.New("header: packet shorter than its headers")
	ErrBadVersion    = errors.New("header: unsupported transport header version")
	ErrUnknownOpcode = errors.New("header: unknown opcode")
	ErrBadPadCount   = errors.New("header: pad count larger than the payload")
	// ErrUnexpectedPayload is a header-only opcode (ACK, READ request,
	// atomic) followed by more bytes.
	ErrUnexpectedPayload = errors.New("header: payload on an opcode that carries none")
	// ErrShortBuffer is returned by LayoutPacket when b cannot hold the packet.
	ErrShortBuffer = errors.New("header: buffer too small for the packet")
)

// Packet is a parsed IB packet: views into the buffer it was parsed from.
// Headers the opcode does not carry are nil.
type Packet struct {
	BTH          BTH
	DETH         DETH
	XRCETH       XRCETH
	FETH         FETH
	RETH         RETH
	AtomicETH    AtomicETH
	AETH         AETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	// Payload is the data after the headers, without the pad bytes.
	Payload []byte
	// Pad holds the pad bytes (0..3) that follow the payload.
	Pad []byte
}

// Opcode returns the packet's opcode.
func (p *Packet) Opcode() Opcode { return p.BTH.Opcode() }

// Info returns the description of the packet's opcode.
func (p *Packet) Info() *OpcodeInfo { return p.BTH.Opcode().Info() }

// ParsePacket parses b, which starts at the BTH and ends with the pad bytes
// (the ICRC already removed), into p. The views in p alias b. It allocates
// nothing.
func ParsePacket(b []byte, p *Packet) error {
	*p = Packet{}
	if len(b) < BTHLen {
		return ErrTruncated
	}
	bth := BTH(b[:BTHLen])
	if bth.TransportVersion() != 0 {
		return ErrBadVersion
	}
	info := bth.Opcode().Info()
	if info.Transport == 0 {
		return ErrUnknownOpcode
	}
	if len(b) < info.HeaderLen {
		return ErrTruncated
	}
	p.BTH = bth
	p.setViews(b, info)
	rest := b[info.HeaderLen:]
	pad := bth.PadCount()
	if pad > len(rest) {
		return ErrBadPadCount
	}
	if !info.HasPayload && len(rest) != 0 {
		return ErrUnexpectedPayload
	}
	p.Payload = rest[: len(rest)-pad : len(rest)-pad]
	p.Pad = rest[len(rest)-pad:]
	return nil
}

// setViews points p's extension header views into b for the opcode info.
func (p *Packet) setViews(b []byte, info *OpcodeInfo) {
	off := BTHLen
	take := func(n int) []byte {
		h := b[off : off+n : off+n]
		off += n
		return h
	}
	// Wire order: DETH, XRCETH, FETH, RETH or AtomicETH, AETH,
	// AtomicAckETH, ImmDt or IETH.
	if info.Ext&ExtDETH != 0 {
		p.DETH = take(DETHLen)
	}
	if info.Ext&ExtXRCETH != 0 {
		p.XRCETH = take(XRCETHLen)
	}
	if info.Ext&ExtFETH != 0 {
		p.FETH = take(FETHLen)
	}
	if info.Ext&ExtRETH != 0 {
		p.RETH = take(RETHLen)
	}
	if info.Ext&ExtAtomicETH != 0 {
		p.AtomicETH = take(AtomicETHLen)
	}
	if info.Ext&ExtAETH != 0 {
		p.AETH = take(AETHLen)
	}
	if info.Ext&ExtAtomicAckETH != 0 {
		p.AtomicAckETH = take(AtomicAckETHLen)
	}
	if info.Ext&ExtImmDt != 0 {
		p.ImmDt = take(ImmDtLen)
	}
	if info.Ext&ExtIETH != 0 {
		p.IETH = take(IETHLen)
	}
}

// PaddedLen returns n rounded up to a multiple of four: the payload plus its
// pad bytes.
func PaddedLen(n int) int { return (n + 3) &^ 3 }

// LayoutPacket prepares b to hold a packet of opcode op with payloadLen bytes
// of payload: it zeroes the headers, writes the opcode, transport version 0,
// the default P_Key and the pad count, zeroes the pad bytes, and points p's
// views at the headers and payload so the caller can fill them. It returns
// the packet length (headers, payload and pad; no ICRC).
func LayoutPacket(b []byte, op Opcode, payloadLen int, p *Packet) (int, error) {
	*p = Packet{}
	info := op.Info()
	if info.Transport == 0 {
		return 0, ErrUnknownOpcode
	}
	if payloadLen < 0 || (!info.HasPayload && payloadLen != 0) {
		return 0, ErrUnexpectedPayload
	}
	n := info.HeaderLen + PaddedLen(payloadLen)
	if len(b) < n {
		return 0, ErrShortBuffer
	}
	clear(b[:info.HeaderLen])
	p.BTH = BTH(b[:BTHLen:BTHLen])
	p.BTH.SetOpcode(op)
	p.BTH.SetPKey(DefaultPKey)
	pad := PaddedLen(payloadLen) - payloadLen
	p.BTH.SetPadCount(pad)
	p.setViews(b, info)
	end := info.HeaderLen + payloadLen
	p.Payload = b[info.HeaderLen:end:end]
	p.Pad = b[end:n:n]
	clear(p.Pad)
	return n, nil
}

// DefaultPKey is the default partition key, the one RoCE peers use.
const DefaultPKey = 0xffff
