package mad

import "encoding/binary"

// Field accessors at MAD offsets. A bit field is named by its byte, the
// shift of its least significant bit and its width.

func u16(b []byte, off int) uint16 { return binary.BigEndian.Uint16(b[off:]) }

func putU16(b []byte, off int, v uint16) { binary.BigEndian.PutUint16(b[off:], v) }

func u32(b []byte, off int) uint32 { return binary.BigEndian.Uint32(b[off:]) }

func putU32(b []byte, off int, v uint32) { binary.BigEndian.PutUint32(b[off:], v) }

func u64(b []byte, off int) uint64 { return binary.BigEndian.Uint64(b[off:]) }

func putU64(b []byte, off int, v uint64) { binary.BigEndian.PutUint64(b[off:], v) }

// u24 reads the 24-bit field in the top three bytes of the word at off
// (QPNs, PSNs); the fourth byte belongs to another field.
func u24(b []byte, off int) uint32 {
	return uint32(b[off])<<16 | uint32(b[off+1])<<8 | uint32(b[off+2])
}

func putU24(b []byte, off int, v uint32) {
	b[off], b[off+1], b[off+2] = byte(v>>16), byte(v>>8), byte(v)
}

func bits(b []byte, off int, shift, width uint) uint8 {
	return b[off] >> shift & (1<<width - 1)
}

func putBits(b []byte, off int, shift, width uint, v uint8) {
	mask := byte(1<<width-1) << shift
	b[off] = b[off]&^mask | v<<shift&mask
}

func flag(b []byte, off int, shift uint) bool { return bits(b, off, shift, 1) != 0 }

func putFlag(b []byte, off int, shift uint, v bool) {
	var x uint8
	if v {
		x = 1
	}
	putBits(b, off, shift, 1, x)
}

// setPrivateData copies p into the private data field b, zeroing the rest of
// it, as IBA asks for unused private data.
func setPrivateData(b, p []byte) error {
	if len(p) > len(b) {
		return ErrPrivateDataTooLong
	}
	n := copy(b, p)
	clear(b[n:])
	return nil
}
