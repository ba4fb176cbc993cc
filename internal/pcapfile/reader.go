package pcapfile

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// LinkTypeEthernet is the pcap link type of Ethernet frames.
const LinkTypeEthernet = 1

// maxPacket bounds the size of a record we accept, so that a corrupt length
// field cannot make the reader allocate gigabytes.
const maxPacket = 1 << 20

// ErrFormat marks input that is not a capture file or is corrupt.
var ErrFormat = errors.New("pcapfile: malformed capture")

// Packet is one captured packet. Data is valid until the next call to Next.
type Packet struct {
	Timestamp time.Time
	LinkType  uint32
	// OrigLen is the packet's length on the wire; len(Data) is less when the
	// capture was truncated by a snap length.
	OrigLen int
	Data    []byte
}

// Reader reads packets from a classic pcap or a pcapng stream.
type Reader struct {
	r   *bufio.Reader
	ng  bool
	bo  binary.ByteOrder
	buf []byte

	// classic pcap
	linkType uint32
	nanos    bool

	// pcapng: per-interface link types and timestamp resolutions
	ifLinkType []uint32
	ifTsUnit   []time.Duration
}

// NewReader reads the file header from r and returns a Reader positioned at
// the first packet.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("%w: reading magic: %v", ErrFormat, err)
	}
	rd := &Reader{r: br}
	switch {
	case magic[0] == 0x0a && magic[1] == 0x0d && magic[2] == 0x0d && magic[3] == 0x0a:
		rd.ng = true
		return rd, nil // the section header block is read by Next
	case binary.LittleEndian.Uint32(magic) == 0xa1b2c3d4:
		rd.bo = binary.LittleEndian
	case binary.BigEndian.Uint32(magic) == 0xa1b2c3d4:
		rd.bo = binary.BigEndian
	case binary.LittleEndian.Uint32(magic) == 0xa1b23c4d:
		rd.bo, rd.nanos = binary.LittleEndian, true
	case binary.BigEndian.Uint32(magic) == 0xa1b23c4d:
		rd.bo, rd.nanos = binary.BigEndian, true
	default:
		return nil, fmt.Errorf("%w: unknown magic % x", ErrFormat, magic)
	}
	var hdr [24]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: file header: %v", ErrFormat, err)
	}
	rd.linkType = rd.bo.Uint32(hdr[20:]) & 0x0fffffff
	return rd, nil
}

// Next returns the next packet, or io.EOF at the end of the file. A file
// cut short in the middle of a classic record (a capture killed while it
// wrote) ends with an error that is both ErrFormat and
// io.ErrUnexpectedEOF.
func (rd *Reader) Next() (*Packet, error) {
	if rd.ng {
		return rd.nextNG()
	}
	var hdr [16]byte
	if _, err := io.ReadFull(rd.r, hdr[:]); err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("%w: record header: %w", ErrFormat, err)
	}
	sec, frac := rd.bo.Uint32(hdr[0:]), rd.bo.Uint32(hdr[4:])
	incl, orig := rd.bo.Uint32(hdr[8:]), rd.bo.Uint32(hdr[12:])
	if incl > maxPacket {
		return nil, fmt.Errorf("%w: record of %d bytes", ErrFormat, incl)
	}
	data, err := rd.read(int(incl))
	if err != nil {
		return nil, err
	}
	ns := int64(frac) * 1000
	if rd.nanos {
		ns = int64(frac)
	}
	return &Packet{Timestamp: time.Unix(int64(sec), ns).UTC(), LinkType: rd.linkType, OrigLen: int(orig), Data: data}, nil
}

func (rd *Reader) read(n int) ([]byte, error) {
	if cap(rd.buf) < n {
		rd.buf = make([]byte, n)
	}
	rd.buf = rd.buf[:n]
	if _, err := io.ReadFull(rd.r, rd.buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // a header announced these bytes
		}
		return nil, fmt.Errorf("%w: record body: %w", ErrFormat, err)
	}
	return rd.buf, nil
}

// pcapng block types.
const (
	blockSectionHeader  = 0x0a0d0d0a
	blockInterface      = 0x00000001
	blockSimplePacket   = 0x00000003
	blockEnhancedPacket = 0x00000006
)

func (rd *Reader) nextNG() (*Packet, error) {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(rd.r, hdr[:]); err != nil {
			if err == io.EOF {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("%w: block header: %v", ErrFormat, err)
		}
		if binary.LittleEndian.Uint32(hdr[:]) == blockSectionHeader {
			// The byte-order magic that follows decides the section's order.
			bom, err := rd.r.Peek(4)
			if err != nil {
				return nil, fmt.Errorf("%w: section header: %v", ErrFormat, err)
			}
			switch {
			case binary.LittleEndian.Uint32(bom) == 0x1a2b3c4d:
				rd.bo = binary.LittleEndian
			case binary.BigEndian.Uint32(bom) == 0x1a2b3c4d:
				rd.bo = binary.BigEndian
			default:
				return nil, fmt.Errorf("%w: byte-order magic % x", ErrFormat, bom)
			}
			rd.ifLinkType, rd.ifTsUnit = rd.ifLinkType[:0], rd.ifTsUnit[:0]
		}
		if rd.bo == nil {
			return nil, fmt.Errorf("%w: pcapng block before the section header", ErrFormat)
		}
		typ, total := rd.bo.Uint32(hdr[0:]), rd.bo.Uint32(hdr[4:])
		if total < 12 || total%4 != 0 || total > maxPacket+64 {
			return nil, fmt.Errorf("%w: block length %d", ErrFormat, total)
		}
		body, err := rd.read(int(total) - 8)
		if err != nil {
			return nil, err
		}
		body = body[:len(body)-4] // trailing copy of the length
		switch typ {
		case blockInterface:
			if len(body) < 8 {
				return nil, fmt.Errorf("%w: short interface block", ErrFormat)
			}
			rd.ifLinkType = append(rd.ifLinkType, uint32(rd.bo.Uint16(body[0:])))
			rd.ifTsUnit = append(rd.ifTsUnit, rd.tsUnit(body[8:]))
		case blockEnhancedPacket:
			if len(body) < 20 {
				return nil, fmt.Errorf("%w: short enhanced packet block", ErrFormat)
			}
			ifc := rd.bo.Uint32(body[0:])
			if int(ifc) >= len(rd.ifLinkType) {
				return nil, fmt.Errorf("%w: packet on undeclared interface %d", ErrFormat, ifc)
			}
			ts := uint64(rd.bo.Uint32(body[4:]))<<32 | uint64(rd.bo.Uint32(body[8:]))
			capLen, orig := rd.bo.Uint32(body[12:]), rd.bo.Uint32(body[16:])
			if uint64(capLen) > uint64(len(body)-20) {
				return nil, fmt.Errorf("%w: captured length %d beyond its block", ErrFormat, capLen)
			}
			unit := rd.ifTsUnit[ifc]
			t := time.Unix(0, 0).Add(time.Duration(ts) * unit).UTC()
			return &Packet{Timestamp: t, LinkType: rd.ifLinkType[ifc], OrigLen: int(orig), Data: body[20 : 20+capLen]}, nil
		case blockSimplePacket:
			if len(body) < 4 || len(rd.ifLinkType) == 0 {
				return nil, fmt.Errorf("%w: bad simple packet block", ErrFormat)
			}
			orig := int(rd.bo.Uint32(body[0:]))
			data := body[4:]
			if orig < len(data) {
				data = data[:orig]
			}
			return &Packet{LinkType: rd.ifLinkType[0], OrigLen: orig, Data: data}, nil
		}
		// Other blocks (statistics, name resolution, custom) are skipped.
	}
}

// tsUnit reads the if_tsresol option from an interface block's options.
func (rd *Reader) tsUnit(opts []byte) time.Duration {
	unit := time.Microsecond
	for len(opts) >= 4 {
		code, n := rd.bo.Uint16(opts[0:]), int(rd.bo.Uint16(opts[2:]))
		if code == 0 || 4+n > len(opts) {
			break
		}
		if code == 9 && n >= 1 { // if_tsresol
			v := opts[4]
			if v&0x80 == 0 && v <= 9 {
				unit = time.Second
				for i := byte(0); i < v; i++ {
					unit /= 10
				}
			}
		}
		opts = opts[4+(n+3)&^3:]
	}
	return unit
}
