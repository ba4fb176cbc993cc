package roce

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// TestParseGRH reads GRHs as a UD receive fills them: an IPv4 header after
// 20 zero bytes, an IPv6 header, and an IPv6 header whose last 20 bytes
// look like an IPv4 header.
func TestParseGRH(t *testing.T) {
	src4, dst4 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	src6, dst6 := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")

	v4 := make([]byte, ibv.GRHLen)
	ip4 := ipv4Header(v4[ibv.GRHLen-ipv4HeaderLen:])
	ip4.encode(0x68, 9, 100, src4.As4(), dst4.As4())
	ip4.setChecksum()
	want4 := GRH{Version: 4, SGID: GIDFromAddr(src4), DGID: GIDFromAddr(dst4), TrafficClass: 0x68, HopLimit: 9}
	h, ok := ParseGRH(v4)
	assert.True(t, ok)
	assert.Equal(t, want4, h, "IPv4")

	// Before an IPv4 header, libibverbs takes the header for IPv4 whatever
	// its checksum.
	bad := append([]byte(nil), v4...)
	ipv4Header(bad[ibv.GRHLen-ipv4HeaderLen:])[ipv4Checksum] ^= 1
	h, ok = ParseGRH(bad)
	assert.True(t, ok)
	assert.Equal(t, want4, h, "IPv4, bad checksum, zero first 20 bytes")

	v6 := make([]byte, ibv.GRHLen)
	ipv6Header(v6).encode(0x68, 0xabcde, 7, 100, src6.As16(), dst6.As16())
	want6 := GRH{Version: 6, SGID: GIDFromAddr(src6), DGID: GIDFromAddr(dst6), TrafficClass: 0x68, HopLimit: 7, FlowLabel: 0xabcde}
	h, ok = ParseGRH(v6)
	assert.True(t, ok)
	assert.Equal(t, want6, h, "IPv6")

	// An IPv4 header with a valid checksum in the last 20 bytes wins over
	// an IPv6 first byte; with a bad checksum the GRH is IPv6.
	both := append([]byte(nil), v4...)
	both[0] = 6 << 4
	h, ok = ParseGRH(both)
	assert.True(t, ok)
	assert.Equal(t, want4, h, "IPv6 first byte, IPv4 header with a good checksum")
	ipv4Header(both[ibv.GRHLen-ipv4HeaderLen:])[ipv4Checksum] ^= 1
	h, ok = ParseGRH(both)
	assert.True(t, ok)
	assert.Equal(t, uint8(6), h.Version, "IPv6 first byte, IPv4 header with a bad checksum")
	assert.Equal(t, ibv.GID(both[8:24]), h.SGID)
	assert.Equal(t, ibv.GID(both[24:40]), h.DGID)

	_, ok = ParseGRH(make([]byte, ibv.GRHLen))
	assert.False(t, ok, "neither IPv4 nor IPv6")
	_, ok = ParseGRH(v4[:ibv.GRHLen-1])
	assert.False(t, ok, "short")
}
