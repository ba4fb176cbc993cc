package oob

import (
	"encoding/binary"
	"fmt"
	"time"
)

// KeysBinLen is sizeof(struct pingpong_dest) on 64-bit Linux, the size of
// the keys message with perftest's -R (rdma_write_keys): five 32-bit ints
// (lid, out_reads, qpn, psn, rkey), 4 bytes of padding, the 64-bit vaddr,
// the 16-byte GID, srqn and gid_index. It is also the length of the one
// receive perftest keeps posted, so no -R message may be longer.
const KeysBinLen = 56

// Offsets in the binary keys message; every number is big-endian
// (perftest built with HAVE_ENDIAN converts with htobe32/htobe64).
const (
	binLID      = 0
	binOutReads = 4
	binQPN      = 8
	binPSN      = 12
	binRKey     = 16
	binVAddr    = 24 // after 4 bytes of struct padding
	binGID      = 32
	binSRQN     = 48
	binGIDIndex = 52
)

// FormatBinary returns the 56-byte keys message rdma_write_keys sends.
// perftest leaves the padding uninitialised; it is zero here. gidIndex
// fills the last field, which rdma_read_keys ignores.
func (d PerftestDest) FormatBinary(gidIndex int) []byte {
	b := make([]byte, KeysBinLen)
	be := binary.BigEndian
	be.PutUint32(b[binLID:], uint32(d.LID))
	be.PutUint32(b[binOutReads:], uint32(d.OutReads))
	be.PutUint32(b[binQPN:], d.QPN)
	be.PutUint32(b[binPSN:], d.PSN)
	be.PutUint32(b[binRKey:], d.RKey)
	be.PutUint64(b[binVAddr:], d.VAddr)
	copy(b[binGID:], d.GID[:])
	be.PutUint32(b[binSRQN:], d.SRQN)
	be.PutUint32(b[binGIDIndex:], uint32(int32(gidIndex)))
	return b
}

// ParseBinaryDest parses a 56-byte keys message as rdma_read_keys does:
// lid, out_reads, qpn, psn, rkey, vaddr and GID (not srqn nor gid_index).
// Values wider than their field (a LID above 16 bits, a QPN or PSN above
// 24) are refused rather than truncated.
func ParseBinaryDest(b []byte) (PerftestDest, error) {
	var d PerftestDest
	if len(b) != KeysBinLen {
		return d, fmt.Errorf("%w: keys message is %d bytes, want %d", ErrMessageLength, len(b), KeysBinLen)
	}
	be := binary.BigEndian
	lid, reads := be.Uint32(b[binLID:]), be.Uint32(b[binOutReads:])
	d.QPN, d.PSN = be.Uint32(b[binQPN:]), be.Uint32(b[binPSN:])
	if lid > 0xffff || reads > 0xffff || d.QPN > 0xffffff || d.PSN > 0xffffff {
		return PerftestDest{}, fmt.Errorf("%w: keys LID %#x, out_reads %d, QPN %#x, PSN %#x", ErrFieldRange, lid, reads, d.QPN, d.PSN)
	}
	d.LID, d.OutReads = uint16(lid), uint16(reads)
	d.RKey = be.Uint32(b[binRKey:])
	d.VAddr = be.Uint64(b[binVAddr:])
	copy(d.GID[:], b[binGID:binGID+16])
	return d, nil
}

// NewRDMACMSession is NewSession for perftest's -R mode: the messages go
// through m (SENDs on the exchange QP rdma_cm connected) instead of TCP,
// the keys travel as the 56-byte binary struct (gidIndex fills its last
// field), and ctx_close_connection ends with its handshake, without the
// "done" that only the Ethernet exchange writes.
func NewRDMACMSession(m Messenger, role Role, timeout time.Duration, gidIndex int) *Session {
	return &Session{s: newMessageStream(m, role, timeout), WaitTimeout: 30 * time.Minute,
		binaryKeys: true, gidIndex: gidIndex}
}

// Handshake is one ctx_hand_shake with local's keys whose answer perftest
// ignores, such as the two around create_rdma_cm_connection.
func (p *Session) Handshake(local PerftestDest) error {
	_, err := p.Keys(local)
	return err
}
