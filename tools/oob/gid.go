package oob

import (
	"fmt"
	"net/netip"
)

// gidText prints a GID the way ibv_rc_pingpong does, with glibc's
// inet_ntop(AF_INET6): like net/netip, except that glibc also writes an
// IPv4-compatible address (::a.b.c.d, first 96 bits zero and word 6 not
// zero) with a dotted tail.
func gidText(g [16]byte) string {
	zero12 := true
	for _, b := range g[:12] {
		if b != 0 {
			zero12 = false
			break
		}
	}
	if zero12 && (g[12] != 0 || g[13] != 0) {
		return fmt.Sprintf("::%d.%d.%d.%d", g[12], g[13], g[14], g[15])
	}
	return netip.AddrFrom16(g).String()
}

// GIDText is gidText for callers printing addresses like ibv_rc_pingpong.
func GIDText(g [16]byte) string { return gidText(g) }
