package mad_test

import (
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/internal/pcapfile"
	"github.com/softnic/softnic/roce"
)

const rpingCapture = "../../roce/testdata/rxe-rping.pcap"

// capturedPacket is one frame of a golden capture, parsed.
type capturedPacket struct {
	frame roce.Frame
	pkt   ibtransport.Packet
}

// isMAD reports whether the packet is a datagram to the GSI QP.
func (c *capturedPacket) isMAD() bool { return mad.ToGSI(&c.pkt) }

// loadCapture parses every frame of a golden capture; each must be a good
// RoCEv2 frame.
func loadCapture(t testing.TB, path string) []capturedPacket {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rd, err := pcapfile.NewReader(f)
	require.NoError(t, err)
	var out []capturedPacket
	for {
		p, err := rd.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		var c capturedPacket
		require.NoError(t, roce.ParseFrame(append([]byte(nil), p.Data...), &c.frame))
		require.NoError(t, ibtransport.ParsePacket(c.frame.IB, &c.pkt))
		out = append(out, c)
	}
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
