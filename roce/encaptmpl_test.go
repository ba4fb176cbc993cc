package roce

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
)

// finishBoth lays out an op packet of size payload bytes in two frames and
// finishes one with Finish, the other from e's template.
func finishBoth(t testing.TB, e Encap, op header.Opcode, size int) (want, got []byte, wantErr, gotErr error) {
	a, b := make([]byte, 10000), make([]byte, 10000)
	var p header.Packet
	ibLen, err := header.LayoutPacket(a[e.HeaderLen():], op, size, &p)
	require.NoError(t, err)
	p.BTH.SetDestQPN(0x000011)
	p.BTH.SetPSN(0xabcdef)
	for i := range p.Payload {
		p.Payload[i] = byte(i*13 + 1)
	}
	copy(b, a)
	tmpl := e.template()
	n, wantErr := e.Finish(a, ibLen)
	m, gotErr := tmpl.finish(&e, b, ibLen)
	return a[:n], b[:m], wantErr, gotErr
}

// A frame finished from the template is the frame Finish writes, byte for
// byte, for both families, tagged or not, every length the checksum's
// carries depend on, CNPs (their own traffic class) and rxe's FLUSH ICRC.
func TestTemplateFinishMatchesFinish(t *testing.T) {
	ops := []header.Opcode{header.OpRCWriteOnly, header.OpRCAcknowledge, header.OpCNP, header.OpRCFlush, header.OpUDSendOnly}
	for name, e := range testEncaps() {
		e.CNPTrafficClass = 0xc0
		for _, rxe := range []bool{false, true} {
			e.RxeFlushICRC = rxe
			for _, op := range ops {
				sizes := []int{0, 1, 3, 64, 1000, 4096}
				if !op.Info().HasPayload {
					sizes = []int{0}
				}
				for _, size := range sizes {
					t.Run(fmt.Sprintf("%s/rxe=%v/%v/%d", name, rxe, op, size), func(t *testing.T) {
						want, got, wantErr, gotErr := finishBoth(t, e, op, size)
						require.NoError(t, wantErr)
						require.NoError(t, gotErr)
						require.Equal(t, want, got)
					})
				}
			}
		}
	}
}

// The IPv4 checksum from the template's sum is the one summed over the
// header, over every total length and the TOS and TTL values that make
// the sum carry.
func TestTemplateIPv4Checksum(t *testing.T) {
	e := testEncaps()["ipv4"]
	for _, tc := range []uint8{0, 0x68, 0xff} {
		for _, hop := range []uint8{1, 64, 255} {
			e.TrafficClass, e.HopLimit = tc, hop
			tmpl := e.template()
			frame := make([]byte, 10000)
			for ibLen := header.BTHLen; ibLen <= 9000; ibLen += 7 {
				n, err := tmpl.finish(&e, frame, ibLen)
				require.NoError(t, err)
				ip := ipv4Header(frame[ethHeaderLen:n])
				require.True(t, ip.ChecksumValid(), "tos %#x ttl %d ibLen %d", tc, hop, ibLen)
			}
		}
	}
}

// What Finish refuses the template refuses alike: mixed families, and a
// frame too short.
func TestTemplateFinishErrors(t *testing.T) {
	e := testEncaps()["ipv4"]
	e.Dst = netip.MustParseAddr("fd00::2")
	_, _, wantErr, gotErr := finishBoth(t, e, header.OpRCWriteOnly, 64)
	require.ErrorIs(t, wantErr, ErrAddressFamily)
	require.ErrorIs(t, gotErr, ErrAddressFamily)

	e = testEncaps()["ipv6-vlan"]
	tmpl := e.template()
	frame := make([]byte, e.FrameLen(100)-1)
	_, err := tmpl.finish(&e, frame, 100)
	require.ErrorIs(t, err, header.ErrTruncated)
}

func BenchmarkTemplateFinish(b *testing.B) {
	for _, name := range []string{"ipv4", "ipv6-vlan"} {
		e := testEncaps()[name]
		frame := buildFrame(b, e, header.OpRCWriteMiddle, 64)
		ibLen := len(frame) - e.HeaderLen() - header.ICRCLen
		tmpl := e.template()
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tmpl.finish(&e, frame, ibLen); err != nil {
					require.NoError(b, err)
				}
			}
		})
	}
}
