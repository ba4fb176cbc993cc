// Package rocetest reads golden captures for tests: every frame of a pcap
// file parsed as RoCEv2 down to its IB headers.
package rocetest

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/internal/pcapfile"
	"github.com/softnic/softnic/roce"
)

// Packet is one frame of a capture: its RoCEv2 layers (ICRC checked) and
// its IB packet. Both view a copy of the frame the Packet owns.
type Packet struct {
	Frame roce.Frame
	IB    header.Packet
}

// ReadFile parses every frame of the pcap file at path; a frame that is not
// good RoCEv2 is an error.
func ReadFile(path string) ([]Packet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rd, err := pcapfile.NewReader(f)
	if err != nil {
		return nil, err
	}
	var out []Packet
	for i := 1; ; i++ {
		p, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var c Packet
		// The reader reuses its buffer: the views need their own copy.
		if err := roce.ParseFrame(append([]byte(nil), p.Data...), &c.Frame); err != nil {
			return nil, fmt.Errorf("%s frame %d: %w", path, i, err)
		}
		if err := header.ParsePacket(c.Frame.IB, &c.IB); err != nil {
			return nil, fmt.Errorf("%s frame %d: %w", path, i, err)
		}
		out = append(out, c)
	}
}
