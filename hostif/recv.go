package hostif

import (
	"encoding/binary"
	"fmt"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// EncodeRecv writes wr into the receive entry e.
func EncodeRecv(e []byte, wr *ibv.RecvWR) error {
	if recvHeader+sgeSize*len(wr.SGL) > len(e) {
		return fmt.Errorf("%w: %d SGEs in entries of %d", ErrBadEntry, len(wr.SGL), len(e))
	}
	binary.LittleEndian.PutUint64(e[offRecvWRID:], wr.ID)
	binary.LittleEndian.PutUint32(e[offRecvCount:], uint32(len(wr.SGL)))
	binary.LittleEndian.PutUint32(e[offRecvReserved:], 0)
	putSGL(e[recvHeader:], wr.SGL)
	return nil
}

// RecvDecoder decodes one queue's receive entries for the daemon, like
// SendDecoder.
type RecvDecoder struct {
	entry []byte
	sgl   []ibv.SGE
}

// NewRecvDecoder returns a decoder for entries of stride bytes with up to
// maxSGE SGEs.
func NewRecvDecoder(stride, maxSGE int) *RecvDecoder {
	return &RecvDecoder{entry: make([]byte, stride), sgl: make([]ibv.SGE, maxSGE)}
}

// Decode copies the entry e out of shared memory and decodes the copy.
func (d *RecvDecoder) Decode(e []byte, wr *ibv.RecvWR) error {
	b := d.entry
	if len(e) != len(b) {
		return fmt.Errorf("%w: entry of %d bytes, stride %d", ErrBadEntry, len(e), len(b))
	}
	copy(b, e)
	count := binary.LittleEndian.Uint32(b[offRecvCount:])
	switch {
	case binary.LittleEndian.Uint32(b[offRecvReserved:]) != 0:
		return fmt.Errorf("%w: reserved bytes set", ErrBadEntry)
	case count > uint32(len(d.sgl)) || recvHeader+sgeSize*int(count) > len(b):
		return fmt.Errorf("%w: %d SGEs, at most %d", ErrBadEntry, count, len(d.sgl))
	}
	*wr = ibv.RecvWR{ID: binary.LittleEndian.Uint64(b[offRecvWRID:]), SGL: getSGL(d.sgl[:count], b[recvHeader:])}
	return nil
}
