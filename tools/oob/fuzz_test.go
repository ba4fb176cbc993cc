package oob

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// roundTrip checks that a message that parses formats back to itself, up
// to hex case.
func roundTrip[D message](t *testing.T, parse func([]byte) (D, error), b []byte) {
	d, err := parse(b)
	if err != nil {
		return
	}
	out, err := d.Format()
	require.NoError(t, err, "parsed %+v does not format", d)
	d2, err := parse(out)
	require.NoError(t, err)
	require.Equal(t, d, d2, "round trip")
}

func FuzzParsePingpongDest(f *testing.F) {
	f.Add([]byte(goldenPingpong))
	f.Add([]byte("0000:000000:000000:00000000000000000000000000000000\x00"))
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, ParsePingpongDest, b) })
}

func FuzzParsePerftestDest(f *testing.F) {
	f.Add([]byte(goldenKeys))
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, ParsePerftestDest, b) })
}

func FuzzParseSmallMessages(f *testing.F) {
	f.Add([]byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("3\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseVersion(b)
		if m, err := ParseMTU(b); err == nil {
			require.True(t, m >= 1 && m <= 5, "ParseMTU accepted %d", m)
		}
	})
}

// FuzzSessionAgainstHostilePeer plays a peer that sends arbitrary bytes
// and hangs up: Setup and Run must end with an error or success, never
// panic or hang.
func FuzzSessionAgainstHostilePeer(f *testing.F) {
	f.Add([]byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"+"\x00\x00\x10\x00\x00\x00\x00\x40"+"3\x00"+goldenKeys), uint8(0))
	f.Add([]byte("9.99\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		c, s := net.Pipe()
		defer c.Close()
		go func() {
			// Read whatever comes while writing the hostile stream.
			go io.Copy(io.Discard, s)
			s.Write(data)
			s.Close()
		}()
		p := NewSession(c, Role(which%2), 200*time.Millisecond)
		p.WaitTimeout = 200 * time.Millisecond
		if _, err := p.Setup(PerftestVersion, SysData{4096, 64}, 3); err != nil {
			return
		}
		test := Test(int(which/2) % len(testNames))
		run := p.Run
		if which >= 128 {
			run = p.RunDuplex
		}
		run(test, []PerftestDest{{QPN: 1}}, 1+int(which/64)%2, Hooks{
			Connect: func([]PerftestDest) error { return nil },
			Measure: func(int) (BWReport, error) { return BWReport{}, nil },
		})
	})
}

// FuzzParseBinaryDest: perftest -R's 56-byte keys from a hostile peer parse
// or fail without a panic, and what parses formats back to the same keys.
func FuzzParseBinaryDest(f *testing.F) {
	f.Add(PerftestDest{LID: 0, OutReads: 16, QPN: 0x11, PSN: 0xabcdef, RKey: 0x1234, VAddr: 0x7f0000001000}.FormatBinary(1))
	f.Add(make([]byte, KeysBinLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseBinaryDest(b)
		if err != nil {
			return
		}
		d2, err := ParseBinaryDest(d.FormatBinary(0))
		require.NoError(t, err)
		require.Equal(t, d, d2, "round trip")
	})
}
