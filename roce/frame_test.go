package roce

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
)

func testEncaps() map[string]Encap {
	base := Encap{
		SrcMAC: [6]byte{0x02, 0, 0, 0, 0, 1}, DstMAC: [6]byte{0x02, 0, 0, 0, 0, 2},
		TrafficClass: 0x68, HopLimit: 64, SrcPort: SourcePort(0x11),
	}
	v4 := base
	v4.Src, v4.Dst = netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	v6 := base
	v6.Src, v6.Dst = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	v6.FlowLabel = 0xabcde
	v4vlan := v4
	v4vlan.HasVLAN, v4vlan.VLAN = true, 0x6064
	v6vlan := v6
	v6vlan.HasVLAN, v6vlan.VLAN = true, 0x0005
	return map[string]Encap{"ipv4": v4, "ipv6": v6, "ipv4-vlan": v4vlan, "ipv6-vlan": v6vlan}
}

// buildFrame builds a frame carrying opcode op with size bytes of payload.
func buildFrame(t testing.TB, e Encap, op header.Opcode, size int) []byte {
	frame := make([]byte, 10000)
	var p header.Packet
	ibLen, err := header.LayoutPacket(frame[e.HeaderLen():], op, size, &p)
	require.NoError(t, err)
	p.BTH.SetDestQPN(0x000011)
	p.BTH.SetPSN(0x123456)
	p.BTH.SetAckReq(true)
	for i := range p.Payload {
		p.Payload[i] = byte(i * 7)
	}
	if p.RETH != nil {
		p.RETH.SetVA(0x7f0000001000)
		p.RETH.SetRKey(0x1234)
		p.RETH.SetDMALength(uint32(size))
	}
	n, err := e.Finish(frame, ibLen)
	require.NoError(t, err)
	require.Equal(t, e.FrameLen(ibLen), n)
	return frame[:n]
}

func TestFrameRoundTrip(t *testing.T) {
	for name, e := range testEncaps() {
		for i := 0; i < 256; i++ {
			op := header.Opcode(i)
			if !op.Valid() {
				continue
			}
			sizes := []int{0}
			if op.Info().HasPayload {
				sizes = []int{0, 1, 3, 256, 1024, 4096}
			}
			for _, size := range sizes {
				b := buildFrame(t, e, op, size)
				var f Frame
				require.NoError(t, ParseFrame(b, &f), "%s %v %d", name, op, size)
				assert.Equal(t, e.Src, f.Src)
				assert.Equal(t, e.Dst, f.Dst)
				assert.Equal(t, e.SrcMAC, f.SrcMAC)
				assert.Equal(t, e.DstMAC, f.DstMAC)
				assert.Equal(t, e.HasVLAN, f.HasVLAN)
				assert.Equal(t, e.VLAN, f.VLAN)
				wantTC := e.TrafficClass
				if op == header.OpCNP {
					wantTC = e.CNPTrafficClass // CNPs carry their own DSCP
				}
				assert.Equal(t, wantTC, f.TrafficClass)
				assert.Equal(t, e.HopLimit, f.HopLimit)
				assert.Equal(t, e.SrcPort, f.SrcPort)
				if e.Src.Is6() {
					assert.Equal(t, e.FlowLabel, f.FlowLabel)
				}
				var p header.Packet
				require.NoError(t, header.ParsePacket(f.IB, &p))
				assert.Equal(t, op, p.Opcode())
				assert.Equal(t, uint32(0x11), p.BTH.DestQPN())
				require.Len(t, p.Payload, size)
				for i, c := range p.Payload {
					require.Equal(t, byte(i*7), c, "payload byte %d", i)
				}
			}
		}
	}
}

func TestICRCIgnoresVariantFields(t *testing.T) {
	for name, e := range testEncaps() {
		b := buildFrame(t, e, header.OpRCWriteOnly, 100)
		var f Frame
		require.NoError(t, ParseFrame(b, &f))
		ip := b[f.IPOffset:]
		// What routers change: TTL/hop limit, TOS/traffic class, flow label,
		// the IPv4 checksum (fixed up), the UDP checksum, and FECN/BECN.
		if e.Src.Is4() {
			ip[1] ^= 0xfc
			ip[8]--
			binary.BigEndian.PutUint16(ip[10:], 0)
			binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip[:20]))
			ip[20+6], ip[20+7] = 0x12, 0x34
			ip[28+4] |= 0xc0
		} else {
			ip[0] ^= 0x0f
			ip[1] ^= 0xff
			ip[3] ^= 0x55
			ip[7]--
			ip[40+6], ip[40+7] = 0x12, 0x34
			ip[48+4] |= 0xc0
		}
		require.NoError(t, ParseFrame(b, &f), name)
		// Anything else is covered.
		b[len(b)-10] ^= 1
		assert.ErrorIs(t, ParseFrame(b, &f), ErrBadICRC, name)
	}
}

func TestICRCEqualsCRCOfMaskedPacket(t *testing.T) {
	// An independent statement of Annex 17: CRC-32 of 8 bytes of ones, then the
	// packet with its variant fields replaced by ones, stored little-endian.
	e := testEncaps()["ipv4"]
	b := buildFrame(t, e, header.OpRCSendOnly, 33)
	ip := append([]byte(nil), b[14:len(b)-4]...)
	ip[1], ip[8], ip[10], ip[11] = 0xff, 0xff, 0xff, 0xff
	ip[26], ip[27] = 0xff, 0xff
	ip[32] = 0xff
	want := crc32.ChecksumIEEE(append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ip...))
	assert.Equal(t, want, binary.LittleEndian.Uint32(b[len(b)-4:]))
	// rxe seeds its raw (uninverted) CRC with 0xdebb20e3: the state after the
	// eight bytes of ones.
	assert.Equal(t, uint32(0xdebb20e3), ^lrhState)
}

// malformations are mutations of a good IPv4 frame and the error each must give.
func TestMalformedFrames(t *testing.T) {
	good := buildFrame(t, testEncaps()["ipv4"], header.OpRCWriteFirst, 256)
	fixIPv4 := func(b []byte) {
		binary.BigEndian.PutUint16(b[24:], 0)
		binary.BigEndian.PutUint16(b[24:], ipChecksum(b[14:34]))
	}
	cases := []struct {
		name   string
		mutate func([]byte) []byte
		want   error
	}{
		{"arp", func(b []byte) []byte { b[12], b[13] = 0x08, 0x06; return b }, ErrNotRoCE},
		{"tcp", func(b []byte) []byte { b[23] = 6; fixIPv4(b); return b }, ErrNotRoCE},
		{"other udp port", func(b []byte) []byte { b[36], b[37] = 0x12, 0x34; return b }, ErrNotRoCE},
		{"bad ip version", func(b []byte) []byte { b[14] = 0x55; return b }, ErrBadIPHeader},
		{"bad ip checksum", func(b []byte) []byte { b[24] ^= 1; return b }, ErrBadIPHeader},
		{"ip options", func(b []byte) []byte { b[14] = 0x46; return b }, ErrIPOptions},
		{"more fragments", func(b []byte) []byte { b[20] |= 0x20; fixIPv4(b); return b }, ErrFragment},
		{"fragment offset", func(b []byte) []byte { b[21] = 1; fixIPv4(b); return b }, ErrFragment},
		{"ip length beyond frame", func(b []byte) []byte {
			binary.BigEndian.PutUint16(b[16:], uint16(len(b)))
			fixIPv4(b)
			return b
		}, header.ErrTruncated},
		{"bad udp length", func(b []byte) []byte { b[38]++; return b }, ErrBadUDPLength},
		{"bad icrc", func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }, ErrBadICRC},
		{"payload bit flip", func(b []byte) []byte { b[100] ^= 4; return b }, ErrBadICRC},
	}
	for _, c := range cases {
		b := c.mutate(append([]byte(nil), good...))
		var f Frame
		assert.ErrorIs(t, ParseFrame(b, &f), c.want, c.name)
	}
	// Ethernet padding after the IP packet is ignored.
	padded := append(append([]byte(nil), good...), 0, 0, 0, 0)
	var f Frame
	assert.NoError(t, ParseFrame(padded, &f))

	// Truncated at every offset: a typed error each time, never a panic.
	var counters RxCounters
	for _, e := range testEncaps() {
		b := buildFrame(t, e, header.OpRCReadRequest, 0)
		for cut := 0; cut < len(b); cut++ {
			err := ParseFrame(b[:cut], &f)
			require.Error(t, err)
			require.ErrorIs(t, err, header.ErrTruncated, "cut at %d of %d", cut, len(b))
			counters.Count(err)
		}
	}
	assert.NotZero(t, counters.Truncated.Load())
	assert.Zero(t, counters.Good.Load())
}

func TestTransportErrorsInsideGoodFrames(t *testing.T) {
	// Frames whose encapsulation and ICRC are fine but whose IB packet is bad:
	// the ICRC is recomputed after the damage, as a buggy peer would send.
	e := testEncaps()["ipv6"]
	cases := []struct {
		name   string
		mutate func(bth []byte)
		want   error
	}{
		{"unknown opcode", func(b []byte) { b[0] = 0x1f }, header.ErrUnknownOpcode},
		{"bad version", func(b []byte) { b[1] |= 0x03 }, header.ErrBadVersion},
		{"wrong pad count", func(b []byte) { b[1] |= 0x30 }, header.ErrBadPadCount},
	}
	var counters RxCounters
	for _, c := range cases {
		b := buildFrame(t, e, header.OpRCReadRequest, 0)
		hl := e.HeaderLen()
		c.mutate(b[hl:])
		putICRC(b[14:], 0, false)
		var f Frame
		require.NoError(t, ParseFrame(b, &f), c.name)
		var p header.Packet
		err := header.ParsePacket(f.IB, &p)
		assert.ErrorIs(t, err, c.want, c.name)
		counters.Count(err)
	}
	assert.Equal(t, uint64(3), counters.BadIBHeader.Load())
}

func TestEncapErrors(t *testing.T) {
	e := testEncaps()["ipv4"]
	e.Dst = netip.MustParseAddr("fd00::2")
	_, err := e.Finish(make([]byte, 200), 16)
	assert.ErrorIs(t, err, ErrAddressFamily)
	e = testEncaps()["ipv4"]
	_, err = e.Finish(make([]byte, 40), 16)
	assert.ErrorIs(t, err, header.ErrTruncated)
}

func TestGIDs(t *testing.T) {
	a := netip.MustParseAddr("192.168.1.7")
	g := GIDFromAddr(a)
	assert.Equal(t, "::ffff:192.168.1.7", g.String())
	assert.True(t, IsIPv4GID(g))
	assert.Equal(t, a, AddrFromGID(g))
	v6 := netip.MustParseAddr("fe80::1:2")
	assert.Equal(t, v6, AddrFromGID(GIDFromAddr(v6)))
	assert.False(t, IsIPv4GID(GIDFromAddr(v6)))
}

func TestUDPSourcePortMatchesRxe(t *testing.T) {
	// Linux 6.1 rdma_rxe, QP 0x11 to QP 0x11, no flow label: every RC frame
	// in testdata/rxe-*.pcap has source port 49441.
	assert.Equal(t, uint16(49441), UDPSourcePort(0, 0x11, 0x11))
	// A flow label given in the address vector is used as it is, folded.
	assert.Equal(t, uint16(0xc000|0x0001^0x3f), UDPSourcePort(0xfc001, 1, 2))
	// The computed flow label fills 20 bits and is symmetric.
	assert.Equal(t, FlowLabel(0x1234, 0xabcd), FlowLabel(0xabcd, 0x1234))
	for q := uint32(1); q < 5000; q += 7 {
		p := UDPSourcePort(0, q, q+1)
		assert.GreaterOrEqual(t, p, uint16(0xc000))
	}
}

func TestSourcePort(t *testing.T) {
	seen := map[uint16]bool{}
	for q := uint32(1); q < 1000; q++ {
		p := SourcePort(q)
		assert.GreaterOrEqual(t, p, uint16(0xc000))
		assert.Equal(t, p, SourcePort(q), "fixed per QP")
		seen[p] = true
	}
	assert.Greater(t, len(seen), 900, "ports spread over QPs")
}

func TestParseAndFinishAllocateNothing(t *testing.T) {
	for name, e := range testEncaps() {
		b := buildFrame(t, e, header.OpRCWriteMiddle, 1024)
		var f Frame
		allocs := testing.AllocsPerRun(500, func() {
			require.NoError(t, ParseFrame(b, &f))
		})
		assert.Zero(t, allocs, name)
		ibLen := len(f.IB)
		allocs = testing.AllocsPerRun(500, func() {
			_, err := e.Finish(b, ibLen)
			require.NoError(t, err)
		})
		assert.Zero(t, allocs, name)
	}
}

func FuzzParseFrame(f *testing.F) {
	for _, e := range testEncaps() {
		for _, op := range []header.Opcode{header.OpRCSendOnly, header.OpRCAcknowledge,
			header.OpRCWriteFirst, header.OpRCFetchAdd, header.OpUDSendOnly} {
			size := 0
			if op.Info().HasPayload {
				size = 21
			}
			f.Add(buildFrame(f, e, op, size))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr Frame
		err := ParseFrame(b, &fr)
		var c RxCounters
		c.Count(err)
		if err != nil {
			require.Zero(t, c.OtherErrors.Load(), "untyped error %v", err)
			return
		}
		var p header.Packet
		_ = header.ParsePacket(fr.IB, &p)
		// A frame that parsed must re-encode to the same bytes' ICRC.
		require.Equal(t, fr.ICRC, ICRC(b[fr.IPOffset:fr.IPOffset+len(fr.IB)+header.ICRCLen+udpHeaderLen+ipHeaderLen(fr)]),
			"ICRC disagrees with itself")
		require.Equal(t, b[fr.IPOffset:fr.IPOffset+ipHeaderLen(fr)], fr.IPHeader, "IPHeader")
	})
}

func ipHeaderLen(f Frame) int {
	if f.Src.Is4() {
		return ipv4HeaderLen
	}
	return ipv6HeaderLen
}

func BenchmarkICRC(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		e := testEncaps()["ipv4"]
		frame := buildFrame(b, e, header.OpRCWriteMiddle, size)
		pkt := frame[14:]
		b.Run(fmt.Sprintf("payload=%d", size), func(b *testing.B) {
			b.SetBytes(int64(len(pkt)))
			b.ReportAllocs()
			for b.Loop() {
				_ = ICRC(pkt)
			}
		})
	}
}

func BenchmarkParseFrame(b *testing.B) {
	frame := buildFrame(b, testEncaps()["ipv4"], header.OpRCWriteMiddle, 4096)
	var f Frame
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseFrame(frame, &f); err != nil {
			require.NoError(b, err) // only on failure: testify's t.Helper would weigh on every iteration
		}
	}
}

// Whatever encapsulation Finish writes, ParseFrame reads back: every header
// view's encode and accessors agree, for both families, with and without a
// VLAN tag.
func FuzzEncapRoundTrip(f *testing.F) {
	f.Add(true, false, uint16(0), uint8(0x68), uint8(64), uint32(0), uint16(0xc011), []byte("0123456789abcdef"))
	f.Add(false, true, uint16(0x6064), uint8(0xff), uint8(1), uint32(0xfffff), uint16(1), []byte("0123456789abcdefghij"))
	f.Fuzz(func(t *testing.T, v4, vlan bool, tci uint16, tc, hop uint8, flow uint32, sport uint16, ib []byte) {
		if len(ib) < header.BTHLen || len(ib) > 4096 {
			return
		}
		if !vlan {
			tci = 0 // not on the wire, so not parsed back
		}
		e := Encap{SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, HasVLAN: vlan, VLAN: tci,
			Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"),
			TrafficClass: tc, CNPTrafficClass: tc, HopLimit: hop, FlowLabel: flow & 0xfffff, SrcPort: sport}
		if v4 {
			e.Src, e.Dst, e.FlowLabel = netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), 0
		}
		frame := make([]byte, e.FrameLen(len(ib)))
		copy(frame[e.HeaderLen():], ib)
		same := append([]byte(nil), frame...)
		n, err := e.Finish(frame, len(ib))
		require.NoError(t, err)
		// The path's template writes the same frame (encaptmpl.go).
		tmpl := e.template()
		m, err := tmpl.finish(&e, same, len(ib))
		require.NoError(t, err)
		require.Equal(t, frame[:n], same[:m])
		var fr Frame
		require.NoError(t, ParseFrame(frame[:n], &fr))
		got := Encap{SrcMAC: fr.SrcMAC, DstMAC: fr.DstMAC, HasVLAN: fr.HasVLAN, VLAN: fr.VLAN, Src: fr.Src, Dst: fr.Dst,
			TrafficClass: fr.TrafficClass, HopLimit: fr.HopLimit, FlowLabel: fr.FlowLabel, SrcPort: fr.SrcPort}
		// A CNP (an ib of opcode 0x81) goes with CNPTrafficClass, here the
		// same.
		got.CNPTrafficClass = fr.TrafficClass
		require.Equal(t, e, got)
		require.Equal(t, ib, fr.IB)
		require.Equal(t, e.ipOffset(), fr.IPOffset)
		require.Equal(t, frame[fr.IPOffset:fr.IPOffset+ipHeaderLen(fr)], fr.IPHeader)
	})
}

func BenchmarkFinish(b *testing.B) {
	for _, name := range []string{"ipv4", "ipv6-vlan"} {
		e := testEncaps()[name]
		frame := buildFrame(b, e, header.OpRCWriteMiddle, 1024)
		ibLen := len(frame) - e.HeaderLen() - header.ICRCLen
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Finish(frame, ibLen); err != nil {
					require.NoError(b, err) // only on failure, as in BenchmarkParseFrame
				}
			}
		})
	}
}

// ipChecksum agrees with the plain RFC 1071 sum of 16-bit words.
func TestIPChecksum(t *testing.T) {
	plain := func(h []byte) uint16 {
		var sum uint32
		for i := 0; i+1 < len(h); i += 2 {
			sum += uint32(h[i])<<8 | uint32(h[i+1])
		}
		for sum > 0xffff {
			sum = sum>>16 + sum&0xffff
		}
		return ^uint16(sum)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 64 {
		for range 200 {
			h := make([]byte, n)
			for i := range h {
				h[i] = byte(rng.IntN(256))
			}
			if n > 0 && rng.IntN(4) == 0 {
				for i := range h {
					h[i] = 0xff // all ones: the sum that folds to 0xffff
				}
			}
			require.Equal(t, plain(h), ipChecksum(h), "% x", h)
		}
	}
}
