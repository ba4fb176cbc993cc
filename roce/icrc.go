package roce

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/softnic/softnic/ibtransport/header"
)

// lrhState is the CRC state after the 8 bytes of ones that stand in for the
// Local Route Header, which RoCEv2 does not carry but the ICRC still covers.
var lrhState = crc32.Update(0, crc32.IEEETable, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// variantFields holds the bytes of a packet that the ICRC does not cover, so
// they can be masked in place and put back.
type variantFields struct {
	ipv6     [ipv6SrcAddr]byte // IPv6: version through hop limit
	ipv4TOS  byte
	ipv4TTL  byte
	ipv4Sum  [2]byte
	udpSum   [2]byte
	bthFlags byte
}

// bthFlags is the BTH byte of FECN, BECN and reserved bits, which switches
// may set on the way.
const bthFlags = 4

// ICRC computes the invariant CRC of the RoCEv2 packet whose IP header starts
// at pkt[0] and whose ICRC occupies the last four bytes of pkt (they are not
// covered). The IP header must be a plain IPv4 header (no options) or an
// IPv6 header with UDP as the next header.
//
// The fields that routers may change count as all ones: IPv4 TOS, TTL and
// header checksum; IPv6 traffic class, flow label and hop limit; the UDP
// checksum; and BTH byte 4 (FECN, BECN and reserved bits). To run the CRC in
// one contiguous call (hash/crc32 uses its carry-less multiply path only on
// long inputs; see updateCRC) and without a copy, ICRC masks those bytes in pkt itself and
// restores them before it returns; pkt must not be read concurrently.
func ICRC(pkt []byte) uint32 {
	var saved variantFields
	ipLen := maskVariant(pkt, &saved)
	crc := updateCRC(lrhState, pkt[:len(pkt)-header.ICRCLen])
	restoreVariant(pkt, ipLen, &saved)
	return crc
}

func maskVariant(pkt []byte, s *variantFields) (ipLen int) {
	if pkt[ipv4VersionIHL]>>4 == 6 {
		ipLen = ipv6HeaderLen
		copy(s.ipv6[:], pkt)
		vtf := binary.BigEndian.Uint32(pkt[ipv6VersionTCFlow:])
		binary.BigEndian.PutUint32(pkt[ipv6VersionTCFlow:], vtf|0x0fffffff) // traffic class, flow label
		pkt[ipv6HopLimit] = 0xff
	} else {
		ipLen = ipv4HeaderLen
		s.ipv4TOS, s.ipv4TTL = pkt[ipv4TOS], pkt[ipv4TTL]
		s.ipv4Sum = [2]byte(pkt[ipv4Checksum:])
		pkt[ipv4TOS], pkt[ipv4TTL] = 0xff, 0xff
		pkt[ipv4Checksum], pkt[ipv4Checksum+1] = 0xff, 0xff
	}
	udp := pkt[ipLen:]
	s.udpSum = [2]byte(udp[udpChecksum:])
	s.bthFlags = udp[udpHeaderLen+bthFlags]
	udp[udpChecksum], udp[udpChecksum+1] = 0xff, 0xff
	udp[udpHeaderLen+bthFlags] = 0xff
	return ipLen
}

func restoreVariant(pkt []byte, ipLen int, s *variantFields) {
	if ipLen == ipv6HeaderLen {
		copy(pkt, s.ipv6[:])
	} else {
		pkt[ipv4TOS], pkt[ipv4TTL] = s.ipv4TOS, s.ipv4TTL
		pkt[ipv4Checksum], pkt[ipv4Checksum+1] = s.ipv4Sum[0], s.ipv4Sum[1]
	}
	udp := pkt[ipLen:]
	udp[udpChecksum], udp[udpChecksum+1] = s.udpSum[0], s.udpSum[1]
	udp[udpHeaderLen+bthFlags] = s.bthFlags
}

// RxeFlushICRC computes the ICRC that Linux rdma_rxe (6.2 through at least
// 6.12) gives an RC FLUSH packet, pkt as for ICRC: IBA's CRC over the
// masked headers, continued over the IB transport headers (BTH through
// RETH) once more, unmasked, before the final inversion. rxe's opcode table
// (rxe_opcode.c) sets no offset[RXE_PAYLOAD] for IB_OPCODE_RC_FLUSH, so
// rxe_hdr.h's payload_addr() is the BTH and payload_size() the 32 header
// bytes, which rxe_icrc.c's rxe_icrc_check and rxe_icrc_generate hash
// after rxe_icrc_hdr has hashed the headers. IBA-correct devices
// (ConnectX) drop such a packet; DeviceConfig.RxeFlushICRC sends and takes
// it for rxe's sake.
func RxeFlushICRC(pkt []byte) uint32 { return rxeFlushICRC(pkt, ICRC(pkt)) }

// rxeFlushICRC continues iba, pkt's IBA ICRC, into rxe's FLUSH variant.
// CRC-32's state after some bytes is its value over them (hash/crc32's
// Update takes and returns the finished value), so the chain needs no
// access to the inversion.
func rxeFlushICRC(pkt []byte, iba uint32) uint32 {
	ib := ipv4HeaderLen + udpHeaderLen
	if pkt[ipv4VersionIHL]>>4 == 6 {
		ib = ipv6HeaderLen + udpHeaderLen
	}
	return updateCRC(iba, pkt[ib:len(pkt)-header.ICRCLen])
}

// putICRC computes the ICRC of pkt (IP header onward) and stores it in the
// last four bytes, least significant byte first as IBA transmits it. With
// rxeFlush set and pkt an RC FLUSH (op), the ICRC is rxe's variant
// (RxeFlushICRC).
func putICRC(pkt []byte, op header.Opcode, rxeFlush bool) {
	crc := ICRC(pkt)
	if rxeFlush && op == header.OpRCFlush {
		crc = rxeFlushICRC(pkt, crc)
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-header.ICRCLen:], crc)
}
