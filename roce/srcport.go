package roce

// SourcePort returns the UDP source port for the queue pair qpn. RoCEv2
// uses the source port as flow entropy for ECMP; keeping it fixed per QP
// keeps a QP's packets on one path and so in order. Like Linux rxe, the port
// is 0xC000 plus a 14-bit multiplicative hash of the QP number.
func SourcePort(qpn uint32) uint16 {
	const goldenRatio32 = 0x61c88647
	return 0xc000 | uint16((qpn*goldenRatio32)>>(32-14))
}
