// Package header is the InfiniBand transport's wire format: typed views
// over the transport headers (BTH, RETH, AETH, AtomicETH, AtomicAckETH,
// ImmDt, IETH, DETH), the opcode table, 24-bit PSN arithmetic and AETH
// syndromes, and ParsePacket and LayoutPacket, which find a packet's
// headers. It holds no protocol state; package ibtransport, the engine,
// runs the protocol over it.
//
// A packet starts at the BTH and ends before the ICRC: Ethernet, IP, UDP
// and the ICRC are package roce's.
//
// The views follow gVisor's tcpip/header: a header is a named []byte and
// its fields are read and written in place by methods, so parsing a packet
// copies and allocates nothing:
//
//	var p header.Packet
//	if err := header.ParsePacket(ib, &p); err != nil {
//		return err // errors.Is(err, header.ErrTruncated), ...
//	}
//	fmt.Println(p.BTH.Opcode(), p.BTH.DestQPN(), p.BTH.PSN(), len(p.Payload))
package header
