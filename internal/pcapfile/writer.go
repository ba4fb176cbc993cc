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

// HeaderLen and RecordHeaderLen are the sizes of the file header and of
// each packet record's header, for callers that bound a file's size.
const (
	HeaderLen       = 24
	RecordHeaderLen = 16
)

// NewWriter writes the file header to w, with a snap length of 65535.
func NewWriter(w io.Writer) (*Writer, error) { return NewWriterSnaplen(w, 65535) }

// NewWriterSnaplen writes the file header to w, recording snaplen as the
// most bytes of a packet the file holds.
func NewWriterSnaplen(w io.Writer, snaplen uint32) (*Writer, error) {
	var hdr [HeaderLen]byte
	binary.LittleEndian.PutUint32(hdr[0:], 0xa1b23c4d)
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], snaplen)
	binary.LittleEndian.PutUint32(hdr[20:], LinkTypeEthernet)
	if _, err := w.Write(hdr[:]); err != nil {
		return nil, fmt.Errorf("pcapfile: writing file header: %w", err)
	}
	return &Writer{w: w}, nil
}

// WritePacket appends one frame captured whole at t.
func (w *Writer) WritePacket(t time.Time, frame []byte) error {
	return w.WriteTruncated(t, frame, len(frame))
}

// WriteTruncated appends the first bytes of a frame, data, captured at t;
// origLen is the frame's length on the wire.
func (w *Writer) WriteTruncated(t time.Time, data []byte, origLen int) error {
	var hdr [RecordHeaderLen]byte
	binary.LittleEndian.PutUint32(hdr[0:], uint32(t.Unix()))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(t.Nanosecond()))
	binary.LittleEndian.PutUint32(hdr[8:], uint32(len(data)))
	binary.LittleEndian.PutUint32(hdr[12:], uint32(max(origLen, len(data))))
	if _, err := w.w.Write(hdr[:]); err != nil {
		return fmt.Errorf("pcapfile: writing record: %w", err)
	}
	if _, err := w.w.Write(data); err != nil {
		return fmt.Errorf("pcapfile: writing record: %w", err)
	}
	return nil
}
