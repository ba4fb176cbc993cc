package oob

import "testing"

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
