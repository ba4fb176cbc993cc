package roce

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/softnic/softnic/ibtransport"
)

// lrhState is the CRC state after the 8 bytes of ones that stand in for the
// Local Route Header, which RoCEv2 does not carry but the ICRC still covers.
var lrhState = crc32.Update(0, crc32.IEEETable, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// variantFields holds the bytes of a packet that the ICRC does not cover, so
// they can be masked in place and put back.
type variantFields struct {
	ip   [8]byte // IPv4 bytes 0..7 of interest, or IPv6 bytes 0..7
	ipv4 [3]byte // IPv4 TTL and header checksum
	udp  [2]byte
	bth4 byte
}

// ICRC computes the invariant CRC of the RoCEv2 packet whose IP header starts
// at pkt[0] and whose ICRC occupies the last four bytes of pkt (they are not
// covered). The IP header must be a plain IPv4 header (no options) or an
// IPv6 header with UDP as the next header.
//
// The fields that routers may change count as all ones: IPv4 TOS, TTL and
// header checksum; IPv6 traffic class, flow label and hop limit; the UDP
// checksum; and BTH byte 4 (FECN, BECN and reserved bits). To run the CRC in
// one contiguous call (hash/crc32 uses its carry-less multiply path only on
// long inputs) and without a copy, ICRC masks those bytes in pkt itself and
// restores them before it returns; pkt must not be read concurrently.
func ICRC(pkt []byte) uint32 {
	var saved variantFields
	ipLen := maskVariant(pkt, &saved)
	crc := crc32.Update(lrhState, crc32.IEEETable, pkt[:len(pkt)-ibtransport.ICRCLen])
	restoreVariant(pkt, ipLen, &saved)
	return crc
}

func maskVariant(pkt []byte, s *variantFields) (ipLen int) {
	if pkt[0]>>4 == 6 {
		ipLen = ipv6HeaderLen
		copy(s.ip[:], pkt[:8])
		pkt[0] |= 0x0f                            // traffic class, high nibble
		pkt[1], pkt[2], pkt[3] = 0xff, 0xff, 0xff // traffic class low nibble, flow label
		pkt[7] = 0xff                             // hop limit
	} else {
		ipLen = ipv4HeaderLen
		s.ip[1] = pkt[1]
		s.ipv4 = [3]byte{pkt[8], pkt[10], pkt[11]}
		pkt[1] = 0xff                 // TOS
		pkt[8] = 0xff                 // TTL
		pkt[10], pkt[11] = 0xff, 0xff // header checksum
	}
	udp := pkt[ipLen:]
	s.udp = [2]byte{udp[6], udp[7]}
	s.bth4 = udp[udpHeaderLen+4]
	udp[6], udp[7] = 0xff, 0xff // UDP checksum
	udp[udpHeaderLen+4] = 0xff  // BTH FECN, BECN, reserved
	return ipLen
}

func restoreVariant(pkt []byte, ipLen int, s *variantFields) {
	if ipLen == ipv6HeaderLen {
		copy(pkt[:8], s.ip[:])
	} else {
		pkt[1] = s.ip[1]
		pkt[8], pkt[10], pkt[11] = s.ipv4[0], s.ipv4[1], s.ipv4[2]
	}
	udp := pkt[ipLen:]
	udp[6], udp[7] = s.udp[0], s.udp[1]
	udp[udpHeaderLen+4] = s.bth4
}

// putICRC computes the ICRC of pkt (IP header onward) and stores it in the
// last four bytes, least significant byte first as IBA transmits it.
func putICRC(pkt []byte) {
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ibtransport.ICRCLen:], ICRC(pkt))
}
