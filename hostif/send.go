package hostif

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// ErrBadEntry is returned for a work queue entry the daemon cannot execute.
var ErrBadEntry = errors.New("hostif: bad work queue entry")

// ibvFromWR is libibverbs' ibv_wr_opcode value of each opcode, as the
// entries carry them.
var ibvFromWR = [...]uint8{
	ibv.WRRDMAWrite:         0,
	ibv.WRRDMAWriteWithImm:  1,
	ibv.WRSend:              2,
	ibv.WRSendWithImm:       3,
	ibv.WRRDMARead:          4,
	ibv.WRAtomicCmpAndSwp:   5,
	ibv.WRAtomicFetchAndAdd: 6,
	ibv.WRLocalInv:          7,
	ibv.WRBindMW:            8,
	ibv.WRSendWithInv:       9,
	ibv.WRFlush:             14,
	ibv.WRAtomicWrite:       15,
}

// wrFromIBV maps an entry's opcode back; ok is false for values no opcode
// has.
var wrFromIBV = func() (t [256]struct {
	op ibv.WROpcode
	ok bool
}) {
	for op, code := range ibvFromWR {
		t[code].op, t[code].ok = ibv.WROpcode(op), true
	}
	return t
}()

// sendFlagsMask is the ibv_send_flags an entry may carry (FENCE, SIGNALED,
// SOLICITED, INLINE), which have ibv.SendFlags' values.
const sendFlagsMask = 0xf

// SendStride returns the stride of send entries for maxSGE SGEs and
// maxInline bytes of inline data.
func SendStride(maxSGE, maxInline int) int {
	return Pow2(sendHeader + max(sgeSize*maxSGE, maxInline, sgeSize))
}

// RecvStride returns the stride of receive entries for maxSGE SGEs.
func RecvStride(maxSGE int) int { return Pow2(recvHeader + sgeSize*max(maxSGE, 1)) }

// EncodeSend writes wr into the send entry e; ah is the daemon's handle of
// wr.AH for a UD QP.
func EncodeSend(e []byte, wr *ibv.SendWR, ah uint32) error {
	if int(wr.Opcode) >= len(ibvFromWR) {
		return fmt.Errorf("%w: opcode %v", ErrBadEntry, wr.Opcode)
	}
	count := len(wr.SGL)
	if wr.Flags&ibv.SendInline != 0 {
		count = len(wr.InlineData)
		if sendHeader+count > len(e) {
			return fmt.Errorf("%w: %d inline bytes in entries of %d", ErrBadEntry, count, len(e))
		}
		copy(e[sendHeader:], wr.InlineData)
	} else {
		if sendHeader+sgeSize*count > len(e) {
			return fmt.Errorf("%w: %d SGEs in entries of %d", ErrBadEntry, count, len(e))
		}
		putSGL(e[sendHeader:], wr.SGL)
	}
	le := binary.LittleEndian
	le.PutUint64(e[offSendWRID:], wr.ID)
	e[offSendOpcode] = ibvFromWR[wr.Opcode]
	e[offSendFlags] = uint8(wr.Flags) & sendFlagsMask
	le.PutUint16(e[offSendCount:], uint16(count))
	le.PutUint64(e[offSendRemoteAddr:], wr.RemoteAddr)
	le.PutUint32(e[offSendRKey:], wr.RKey)
	le.PutUint32(e[offSendReserved:], 0)
	le.PutUint64(e[offSendCompareAdd:], wr.CompareAdd)
	le.PutUint64(e[offSendSwap:], wr.Swap)
	switch wr.Opcode {
	case ibv.WRSendWithInv, ibv.WRLocalInv:
		le.PutUint32(e[offSendImm:], wr.InvalidateRKey)
	case ibv.WRBindMW:
		encodeBind(e, &wr.Bind)
	default:
		binary.BigEndian.PutUint32(e[offSendImm:], wr.Imm)
	}
	putOperands(e, wr)
	le.PutUint32(e[offSendAH:], ah)
	le.PutUint32(e[offSendRemoteQPN:], wr.RemoteQPN)
	le.PutUint32(e[offSendRemoteQKey:], wr.RemoteQKey)
	le.PutUint32(e[offSendRemoteSrqn:], wr.RemoteSRQN)
	return nil
}

// putOperands writes the operands of the IBTA 1.5 opcodes, which take the
// atomics' fields: ATOMIC_WRITE's 8 bytes, as they lie in memory, where
// the compare/add value goes; FLUSH's length there, and its placement
// type and selectivity level in the swap field's first two bytes.
func putOperands(e []byte, wr *ibv.SendWR) {
	switch wr.Opcode {
	case ibv.WRAtomicWrite:
		copy(e[offSendCompareAdd:offSendCompareAdd+8], wr.AtomicWrite[:])
		binary.LittleEndian.PutUint64(e[offSendSwap:], 0)
	case ibv.WRFlush:
		binary.LittleEndian.PutUint64(e[offSendCompareAdd:], uint64(wr.FlushLength))
		binary.LittleEndian.PutUint64(e[offSendSwap:], uint64(wr.FlushType)|uint64(wr.FlushLevel)<<8)
	}
}

// getOperands is putOperands' reverse; ErrBadEntry for a FLUSH whose
// length or spec does not fit (CheckSendWR judges the values) or either
// opcode with data.
func getOperands(b []byte, count int, wr *ibv.SendWR) error {
	le := binary.LittleEndian
	switch wr.Opcode {
	case ibv.WRAtomicWrite:
		copy(wr.AtomicWrite[:], b[offSendCompareAdd:offSendCompareAdd+8])
		wr.CompareAdd, wr.Swap = 0, 0
	case ibv.WRFlush:
		n, spec := le.Uint64(b[offSendCompareAdd:]), le.Uint64(b[offSendSwap:])
		if n > 1<<32-1 || spec > 0xffff {
			return fmt.Errorf("%w: FLUSH length %d, type and level %#x", ErrBadEntry, n, spec)
		}
		wr.FlushLength, wr.FlushType, wr.FlushLevel = uint32(n), ibv.FlushType(spec), ibv.FlushLevel(spec>>8)
		wr.CompareAdd, wr.Swap = 0, 0
	default:
		return nil
	}
	if count != 0 || wr.Flags&ibv.SendInline != 0 {
		return fmt.Errorf("%w: %v with data", ErrBadEntry, wr.Opcode)
	}
	return nil
}

func putSGL(b []byte, sgl []ibv.SGE) {
	for i, s := range sgl {
		binary.LittleEndian.PutUint64(b[i*sgeSize+offSGEAddr:], s.Addr)
		binary.LittleEndian.PutUint32(b[i*sgeSize+offSGELength:], s.Length)
		binary.LittleEndian.PutUint32(b[i*sgeSize+offSGELKey:], s.LKey)
	}
}

// SendDecoder decodes one QP's send entries for the daemon. A decoded
// request points into the decoder's buffers until the next Decode; the
// QP's PostSend copies what it keeps.
type SendDecoder struct {
	entry     []byte
	sgl       []ibv.SGE
	maxInline int
	// ah resolves a UD entry's AH handle; nil for other QPs, whose entries'
	// UD fields are ignored.
	ah func(handle uint32) *ibv.AH
}

// NewSendDecoder returns a decoder for entries of stride bytes with up to
// maxSGE SGEs or maxInline bytes inline.
func NewSendDecoder(stride, maxSGE, maxInline int, ah func(uint32) *ibv.AH) *SendDecoder {
	return &SendDecoder{entry: make([]byte, stride), sgl: make([]ibv.SGE, maxSGE), maxInline: maxInline, ah: ah}
}

// Decode copies the entry e out of shared memory and decodes the copy into
// wr; it returns ErrBadEntry if a field is out of range.
func (d *SendDecoder) Decode(e []byte, wr *ibv.SendWR) error {
	b := d.entry
	if len(e) != len(b) {
		return fmt.Errorf("%w: entry of %d bytes, stride %d", ErrBadEntry, len(e), len(b))
	}
	copy(b, e)
	le := binary.LittleEndian
	op, ok := wrFromIBV[b[offSendOpcode]].op, wrFromIBV[b[offSendOpcode]].ok
	flags := b[offSendFlags]
	count := int(le.Uint16(b[offSendCount:]))
	switch {
	case !ok:
		return fmt.Errorf("%w: opcode %d", ErrBadEntry, b[offSendOpcode])
	case flags&^sendFlagsMask != 0:
		return fmt.Errorf("%w: flags %#x", ErrBadEntry, flags)
	case le.Uint32(b[offSendReserved:]) != 0:
		return fmt.Errorf("%w: reserved bytes set", ErrBadEntry)
	case le.Uint32(b[offSendRemoteSrqn:]) > srqnMask:
		return fmt.Errorf("%w: remote SRQ number %#x", ErrBadEntry, le.Uint32(b[offSendRemoteSrqn:]))
	}
	*wr = ibv.SendWR{ID: le.Uint64(b[offSendWRID:]), Opcode: op, Flags: ibv.SendFlags(flags),
		RemoteAddr: le.Uint64(b[offSendRemoteAddr:]), RKey: le.Uint32(b[offSendRKey:]),
		CompareAdd: le.Uint64(b[offSendCompareAdd:]), Swap: le.Uint64(b[offSendSwap:]),
		RemoteSRQN: le.Uint32(b[offSendRemoteSrqn:])}
	switch op {
	case ibv.WRSendWithInv, ibv.WRLocalInv:
		wr.InvalidateRKey = le.Uint32(b[offSendImm:])
	case ibv.WRBindMW:
		decodeBind(b, wr)
	default:
		wr.Imm = binary.BigEndian.Uint32(b[offSendImm:])
	}
	if err := getOperands(b, count, wr); err != nil {
		return err
	}
	if err := d.decodeData(b, count, wr); err != nil {
		return err
	}
	return d.decodeUD(b, wr)
}

// decodeData points wr at the entry's inline bytes or SGEs.
func (d *SendDecoder) decodeData(b []byte, count int, wr *ibv.SendWR) error {
	if wr.Flags&ibv.SendInline != 0 {
		if count > d.maxInline || sendHeader+count > len(b) {
			return fmt.Errorf("%w: %d inline bytes, at most %d", ErrBadEntry, count, d.maxInline)
		}
		wr.InlineData = b[sendHeader : sendHeader+count]
		return nil
	}
	if count > len(d.sgl) || sendHeader+sgeSize*count > len(b) {
		return fmt.Errorf("%w: %d SGEs, at most %d", ErrBadEntry, count, len(d.sgl))
	}
	wr.SGL = getSGL(d.sgl[:count], b[sendHeader:])
	return nil
}

func getSGL(sgl []ibv.SGE, b []byte) []ibv.SGE {
	for i := range sgl {
		sgl[i] = ibv.SGE{Addr: binary.LittleEndian.Uint64(b[i*sgeSize+offSGEAddr:]),
			Length: binary.LittleEndian.Uint32(b[i*sgeSize+offSGELength:]), LKey: binary.LittleEndian.Uint32(b[i*sgeSize+offSGELKey:])}
	}
	return sgl
}

// decodeUD resolves a UD entry's address handle and destination.
func (d *SendDecoder) decodeUD(b []byte, wr *ibv.SendWR) error {
	if d.ah == nil {
		return nil
	}
	le := binary.LittleEndian
	h := le.Uint32(b[offSendAH:])
	if wr.AH = d.ah(h); wr.AH == nil {
		return fmt.Errorf("%w: no AH %d", ErrBadEntry, h)
	}
	wr.RemoteQPN, wr.RemoteQKey = le.Uint32(b[offSendRemoteQPN:]), le.Uint32(b[offSendRemoteQKey:])
	return nil
}

// A BIND_MW entry carries its binding in the fields of other opcodes
// (provider/hostif.h): remote_addr and compare_add the window's address
// and length, rkey its new rkey, imm the region's lkey (little-endian),
// swap the window's access flags.
func encodeBind(e []byte, b *ibv.MWBind) {
	le := binary.LittleEndian
	le.PutUint64(e[offSendRemoteAddr:], b.Addr)
	le.PutUint64(e[offSendCompareAdd:], b.Length)
	le.PutUint32(e[offSendRKey:], b.RKey)
	le.PutUint32(e[offSendImm:], b.LKey)
	le.PutUint64(e[offSendSwap:], uint64(b.Access))
}

// decodeBind reads a BIND_MW entry's binding into wr.Bind; access flags
// past 32 bits become ones no bind accepts (MW_BIND_ERR).
func decodeBind(b []byte, wr *ibv.SendWR) {
	le := binary.LittleEndian
	access := le.Uint64(b[offSendSwap:])
	wr.Bind = ibv.MWBind{Addr: wr.RemoteAddr, Length: wr.CompareAdd, RKey: wr.RKey, LKey: le.Uint32(b[offSendImm:]),
		Access: ibv.Access(min(access, 1<<31))}
	wr.RemoteAddr, wr.CompareAdd, wr.RKey, wr.Swap = 0, 0, 0, 0
}

// srqnMask bounds an SRQ number: 24 bits, as the XRCETH carries it.
const srqnMask = 0xffffff
