package header

import (
	"bytes"
	"testing"
)

func TestParseTMH(t *testing.T) {
	b := make([]byte, TMHLen+RVHLen)
	h := TMH(b[:TMHLen])
	h.SetOpcode(TMRndv)
	h.SetAppCtx(0xa1b2c3d4)
	h.SetTag(0x0102030405060708)
	r := RVH(b[TMHLen:])
	r.SetVA(0x1122334455667788)
	r.SetRKey(0x99)
	r.SetLength(4096)
	if !bytes.Equal(b[:16], []byte{1, 0, 0, 0, 0xa1, 0xb2, 0xc3, 0xd4, 1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("TMH bytes % x", b[:16])
	}
	got, ok := ParseTMH(b)
	if !ok || got.Opcode() != TMRndv || got.Tag() != 0x0102030405060708 || got.AppCtx() != 0xa1b2c3d4 {
		t.Fatalf("ParseTMH = %v %v", got, ok)
	}
	if v := RVHOf(b); v.VA() != 0x1122334455667788 || v.RKey() != 0x99 || v.Length() != 4096 {
		t.Fatalf("RVH %x %x %d", v.VA(), v.RKey(), v.Length())
	}
	if _, ok := ParseTMH(b[:TMHLen+RVHLen-1]); ok {
		t.Fatal("a rendezvous request without its whole RVH parsed")
	}
	if _, ok := ParseTMH(b[:TMHLen-1]); ok {
		t.Fatal("15 bytes parsed as a TM header")
	}
	h.SetOpcode(TMEager)
	if _, ok := ParseTMH(b[:TMHLen]); !ok {
		t.Fatal("an eager header of 16 bytes did not parse")
	}
}

// FuzzParseTMH feeds arbitrary payloads to the TM header view: it must
// never panic or read past the payload, and what it accepts must hold
// its headers whole.
func FuzzParseTMH(f *testing.F) {
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34})
	f.Add(make([]byte, 20))
	f.Add(append([]byte{1}, make([]byte, 40)...))
	f.Add([]byte{1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, ok := ParseTMH(b)
		if !ok {
			return
		}
		_ = h.Tag() + uint64(h.AppCtx())
		if len(h) != TMHLen {
			t.Fatalf("TMH of %d bytes", len(h))
		}
		if h.Opcode() == TMRndv {
			r := RVHOf(b)
			_ = r.VA() + uint64(r.RKey()) + uint64(r.Length())
		}
	})
}
