// Package ibtransport implements the InfiniBand transport layer that softnic
// speaks inside RoCEv2 frames: typed views over the transport headers (BTH,
// RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH), the opcode table,
// 24-bit PSN arithmetic, AETH syndromes, and the protocol engine: reliable
// connected QPs split, as in Linux rxe, into requester, responder and
// completer, and unreliable-datagram QPs (ud.go, udrecv.go).
//
// The package knows nothing of Ethernet, IP or UDP: it sees IB packets that
// start with the BTH and end before the ICRC, and GIDs; UD receives copy
// the IP header roce hands up, unparsed, into the GRH. Package roce wraps
// and unwraps them.
//
// Nor does it own the verbs objects the protocol works with: protection
// domains, memory regions, completion queues and shared receive queues
// belong to package verbs. The engine reaches them through the small
// interfaces of verbsobjects.go: Memory resolves an lkey or rkey to a
// bounds- and access-checked Region, the responder and the completer push
// work completions into a CompletionQueue, and the responder takes receives
// from a QP's own RecvQueue or a SharedRecvQueue's. A QP is created with
// Group.CreateQP from a QPConfig naming them. The work request and
// completion types (SendWR, RecvWR, SGE, WC) and the QP attributes are this
// package's: they are the engine's vocabulary, and verbs gives them their
// libibverbs names.
//
// A device runs one Engine per receive queue of its link, in a Group: each
// engine is single-threaded and owns the QPs placed on it, which is where
// both ends' engines pick the same from the connection's pair of QP
// numbers (EngineFor), so that on links that pair their queues a connection
// stays on one engine a side; a packet that arrives at another engine is
// copied to its QP's. State every engine reads (the QP table, the memory
// keys) changes only under Group.Do, with all engines paused.
//
// Header views follow gVisor's tcpip/header: a header is a named []byte and
// its fields are read and written in place by methods, so parsing a packet
// copies and allocates nothing:
//
//	var p ibtransport.Packet
//	if err := ibtransport.ParsePacket(ib, &p); err != nil {
//		return err // errors.Is(err, ibtransport.ErrTruncated), ...
//	}
//	fmt.Println(p.BTH.Opcode(), p.BTH.DestQPN(), p.BTH.PSN(), len(p.Payload))
package ibtransport
