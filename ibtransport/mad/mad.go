package mad

import (
	"encoding/binary"
	"errors"

	"github.com/softnic/softnic/ibtransport/header"
)

// Sizes of a MAD and its parts, in bytes.
const (
	Len       = 256 // every MAD of the CM class, whatever its attribute
	HeaderLen = 24  // the common MAD header
	DataLen   = Len - HeaderLen
)

// Values of the common header that the CM uses.
const (
	BaseVersion    = 1    // IBA's MAD base version; OPA uses 0x80
	ClassCM        = 0x07 // management class of the communication manager
	CMClassVersion = 2    // the CM class version Linux and IBA 1.2+ speak
	MethodSend     = 0x03 // the only method CM messages use
)

// Well-known values for the GSI QP (QP1) that carries CM MADs.
const (
	GSIQPN  = 1
	GSIQKey = 0x80010000
	GSIPKey = 0xffff
)

// ToGSI reports whether a parsed packet is a datagram to the GSI QP, whose
// payload is a MAD.
func ToGSI(p *header.Packet) bool { return p.DETH != nil && p.BTH.DestQPN() == GSIQPN }

// Errors from Parse. Plain sentinels, so a receive path can count them with
// errors.Is without allocating.
var (
	ErrTruncated          = errors.New("mad: shorter than a 256-byte MAD")
	ErrBadBaseVersion     = errors.New("mad: unsupported base version")
	ErrBadClass           = errors.New("mad: not a communication management MAD")
	ErrBadClassVersion    = errors.New("mad: unsupported CM class version")
	ErrUnknownMethod      = errors.New("mad: unknown CM method")
	ErrUnknownAttribute   = errors.New("mad: unknown CM attribute")
	ErrPrivateDataTooLong = errors.New("mad: private data longer than the message allows")
	ErrBadARILength       = errors.New("mad: REJ additional rejection information longer than its field")
)

// AttrID is a CM attribute ID: which message a CM MAD carries.
type AttrID uint16

// CM attribute IDs (IBA table 104).
const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRREQ       AttrID = 0x0017
	AttrSIDRREP       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001a
)

var attrNames = map[AttrID]string{
	AttrClassPortInfo: "CM_CLASS_PORT_INFO",
	AttrREQ:           "CM_REQ",
	AttrMRA:           "CM_MRA",
	AttrREJ:           "CM_REJ",
	AttrREP:           "CM_REP",
	AttrRTU:           "CM_RTU",
	AttrDREQ:          "CM_DREQ",
	AttrDREP:          "CM_DREP",
	AttrSIDRREQ:       "CM_SIDR_REQ",
	AttrSIDRREP:       "CM_SIDR_REP",
	AttrLAP:           "CM_LAP",
	AttrAPR:           "CM_APR",
}

// String returns the attribute's name as Wireshark and Linux tracing show it
// (CM_REQ, ...), or its number.
func (a AttrID) String() string {
	if s, ok := attrNames[a]; ok {
		return s
	}
	return "CM_ATTR_0x" + hex16(uint16(a))
}

// Supported reports whether a is a message this package has a view for:
// REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ or SIDR_REP.
func (a AttrID) Supported() bool { return a >= AttrREQ && a <= AttrSIDRREP }

func hex16(v uint16) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[v>>12], digits[v>>8&15], digits[v>>4&15], digits[v&15]})
}

// Header is the common MAD header.
//
//	byte 0      base version
//	byte 1      management class
//	byte 2      class version
//	byte 3      R(7) method(6:0)
//	byte 4-5    status
//	byte 6-7    class specific
//	byte 8-15   transaction ID
//	byte 16-17  attribute ID
//	byte 18-19  reserved
//	byte 20-23  attribute modifier
type Header []byte

// BaseVersion returns the MAD base version.
func (h Header) BaseVersion() uint8 { return h[0] }

// SetBaseVersion sets the MAD base version.
func (h Header) SetBaseVersion(v uint8) { h[0] = v }

// MgmtClass returns the management class.
func (h Header) MgmtClass() uint8 { return h[1] }

// SetMgmtClass sets the management class.
func (h Header) SetMgmtClass(c uint8) { h[1] = c }

// ClassVersion returns the class version.
func (h Header) ClassVersion() uint8 { return h[2] }

// SetClassVersion sets the class version.
func (h Header) SetClassVersion(v uint8) { h[2] = v }

// Method returns the method byte, R bit included.
func (h Header) Method() uint8 { return h[3] }

// SetMethod sets the method byte, R bit included.
func (h Header) SetMethod(m uint8) { h[3] = m }

// Status returns the status field.
func (h Header) Status() uint16 { return binary.BigEndian.Uint16(h[4:]) }

// SetStatus sets the status field.
func (h Header) SetStatus(s uint16) { binary.BigEndian.PutUint16(h[4:], s) }

// ClassSpecific returns the class-specific field.
func (h Header) ClassSpecific() uint16 { return binary.BigEndian.Uint16(h[6:]) }

// SetClassSpecific sets the class-specific field.
func (h Header) SetClassSpecific(v uint16) { binary.BigEndian.PutUint16(h[6:], v) }

// TID returns the transaction ID.
func (h Header) TID() uint64 { return binary.BigEndian.Uint64(h[8:]) }

// SetTID sets the transaction ID.
func (h Header) SetTID(t uint64) { binary.BigEndian.PutUint64(h[8:], t) }

// AttrID returns the attribute ID.
func (h Header) AttrID() AttrID { return AttrID(binary.BigEndian.Uint16(h[16:])) }

// SetAttrID sets the attribute ID.
func (h Header) SetAttrID(a AttrID) { binary.BigEndian.PutUint16(h[16:], uint16(a)) }

// AttrModifier returns the attribute modifier.
func (h Header) AttrModifier() uint32 { return binary.BigEndian.Uint32(h[20:]) }

// SetAttrModifier sets the attribute modifier.
func (h Header) SetAttrModifier(m uint32) { binary.BigEndian.PutUint32(h[20:], m) }

// MAD is a whole 256-byte management datagram: the header, then the
// attribute's data.
type MAD []byte

// Header returns the view of the common header.
func (m MAD) Header() Header { return Header(m[:HeaderLen:HeaderLen]) }

// Data returns the 232 bytes after the header.
func (m MAD) Data() []byte { return m[HeaderLen:Len:Len] }

// InitCM zeroes m (which must hold Len bytes) and writes the header of a CM
// SEND carrying attr with transaction ID tid; the message's fields are then
// set through its view (REQ(m), ...).
func (m MAD) InitCM(attr AttrID, tid uint64) {
	clear(m[:Len])
	h := m.Header()
	h.SetBaseVersion(BaseVersion)
	h.SetMgmtClass(ClassCM)
	h.SetClassVersion(CMClassVersion)
	h.SetMethod(MethodSend)
	h.SetTID(tid)
	h.SetAttrID(attr)
}

// Parse checks that b, the payload of a UD SEND to QP1, is a CM MAD this
// package can read: base version 1, class CM, class version 2, method SEND,
// a supported attribute, exactly Len bytes, and for a REJ (a SIDR_REP) an
// ARI (additional information) length that fits its field. It returns the
// MAD view of b and allocates nothing. A datagram longer than a MAD is
// refused too: its tail would be private data beyond what any message has
// room for.
func Parse(b []byte) (MAD, error) {
	if len(b) < Len {
		return nil, ErrTruncated
	}
	h := Header(b[:HeaderLen])
	switch {
	case h.BaseVersion() != BaseVersion:
		return nil, ErrBadBaseVersion
	case h.MgmtClass() != ClassCM:
		return nil, ErrBadClass
	case h.ClassVersion() != CMClassVersion:
		return nil, ErrBadClassVersion
	case h.Method() != MethodSend:
		return nil, ErrUnknownMethod
	case !h.AttrID().Supported():
		return nil, ErrUnknownAttribute
	case len(b) > Len:
		return nil, ErrPrivateDataTooLong
	}
	m := MAD(b[:Len:Len])
	if h.AttrID() == AttrREJ && int(REJ(m).ARILength()) > REJARILen {
		return nil, ErrBadARILength
	}
	if h.AttrID() == AttrSIDRREP && int(SIDRREP(m).InfoLength()) > SIDRInfoLen {
		return nil, ErrBadARILength
	}
	return m, nil
}
