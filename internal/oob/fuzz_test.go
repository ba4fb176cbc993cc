package oob

import (
	"io"
	"net"
	"testing"
	"time"
)

func FuzzParsePingpongDest(f *testing.F) {
	f.Add([]byte(goldenPingpong))
	f.Add([]byte("0000:000000:000000:00000000000000000000000000000000\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParsePingpongDest(b)
		if err != nil {
			return
		}
		// A message that parses formats back to itself, up to hex case.
		out, err := d.Format()
		if err != nil {
			t.Fatalf("parsed %+v does not format: %v", d, err)
		}
		if d2, err := ParsePingpongDest(out); err != nil || d2 != d {
			t.Fatalf("round trip %+v -> %+v, %v", d, d2, err)
		}
	})
}

func FuzzParsePerftestDest(f *testing.F) {
	f.Add([]byte(goldenKeys))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParsePerftestDest(b)
		if err != nil {
			return
		}
		out, err := d.Format()
		if err != nil {
			t.Fatalf("parsed %+v does not format: %v", d, err)
		}
		if d2, err := ParsePerftestDest(out); err != nil || d2 != d {
			t.Fatalf("round trip %+v -> %+v, %v", d, d2, err)
		}
	})
}

func FuzzParseSmallMessages(f *testing.F) {
	f.Add([]byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("3\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseVersion(b)
		if m, err := ParseMTU(b); err == nil && (m < 1 || m > 5) {
			t.Fatalf("ParseMTU accepted %d", m)
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
