package roce

// RoCEv2 uses the UDP source port as flow entropy for ECMP: a QP keeps one
// port so its packets stay on one path and so in order. Linux (rxe and
// mlx5 alike, through rdma_get_udp_sport) derives the port from the GRH flow
// label, and when the address vector has none, from a flow label computed
// from the two QP numbers; UDPSourcePort does the same, so that softnic's
// frames are indistinguishable from theirs.

// udpSportMin is the bottom of the range RoCEv2 source ports are taken from.
const udpSportMin = 0xc000

// FlowLabel returns the flow label Linux computes for a connection between
// two QPs when the address vector sets none: the 20 low bits of their
// product, folded.
func FlowLabel(localQPN, remoteQPN uint32) uint32 {
	v := uint64(localQPN) * uint64(remoteQPN)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & 0xfffff)
}

// UDPSourcePort returns the source port for a QP connection with the given
// flow label (0 when the address vector has none) and QP numbers: the flow
// label folded into 14 bits above 0xC000.
func UDPSourcePort(flowLabel, localQPN, remoteQPN uint32) uint16 {
	if flowLabel == 0 {
		flowLabel = FlowLabel(localQPN, remoteQPN)
	}
	low := flowLabel & 0x3fff
	low ^= (flowLabel & 0xfc000) >> 14
	return uint16(low | udpSportMin)
}

// SourcePort returns a source port for qpn when the remote QP is not known
// (datagram QPs): a 14-bit multiplicative hash of the QP number above 0xC000,
// as Linux rxe uses for them.
func SourcePort(qpn uint32) uint16 {
	const goldenRatio32 = 0x61c88647
	return udpSportMin | uint16((qpn*goldenRatio32)>>(32-14))
}
