package mad_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/rocetest"
)

const rpingCapture = "../../roce/testdata/rxe-rping.pcap"

// capturedPacket is one frame of a golden capture, parsed.
type capturedPacket struct {
	frame roce.Frame
	pkt   header.Packet
}

// isMAD reports whether the packet is a datagram to the GSI QP.
func (c *capturedPacket) isMAD() bool { return mad.ToGSI(&c.pkt) }

// loadCapture parses every frame of a golden capture; each must be a good
// RoCEv2 frame.
func loadCapture(t testing.TB, path string) []capturedPacket {
	pkts, err := rocetest.ReadFile(path)
	require.NoError(t, err)
	out := make([]capturedPacket, len(pkts))
	for i, p := range pkts {
		out[i] = capturedPacket{frame: p.Frame, pkt: p.IB}
	}
	return out
}

// capturedMADs returns the packets of the capture that carry MADs.
func capturedMADs(t testing.TB, path string) []capturedPacket {
	var mads []capturedPacket
	for _, c := range loadCapture(t, path) {
		if c.isMAD() {
			mads = append(mads, c)
		}
	}
	return mads
}
