package pcapfile

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// Writer writes a classic little-endian pcap file with nanosecond
// timestamps and Ethernet link type.
type Writer struct {
	w io.Writer
}

// NewWriter writes the file header to w.
func NewWriter(w io.Writer) (*Writer, error) {
	var hdr [24]byte
	binary.LittleEndian.PutUint32(hdr[0:], 0xa1b23c4d)
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], 65535)
	binary.LittleEndian.PutUint32(hdr[20:], LinkTypeEthernet)
	if _, err := w.Write(hdr[:]); err != nil {
		return nil, fmt.Errorf("pcapfile: writing file header: %w", err)
	}
	return &Writer{w: w}, nil
}

// WritePacket appends one frame captured at t.
func (w *Writer) WritePacket(t time.Time, frame []byte) error {
	var hdr [16]byte
	binary.LittleEndian.PutUint32(hdr[0:], uint32(t.Unix()))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(t.Nanosecond()))
	binary.LittleEndian.PutUint32(hdr[8:], uint32(len(frame)))
	binary.LittleEndian.PutUint32(hdr[12:], uint32(len(frame)))
	if _, err := w.w.Write(hdr[:]); err != nil {
		return fmt.Errorf("pcapfile: writing record: %w", err)
	}
	if _, err := w.w.Write(frame); err != nil {
		return fmt.Errorf("pcapfile: writing record: %w", err)
	}
	return nil
}
