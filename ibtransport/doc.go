// Package ibtransport implements the InfiniBand transport layer that softnic
// speaks inside RoCEv2 frames, the protocol engine: reliable connected QPs
// split, as in Linux rxe, into requester, responder and completer,
// unreliable connected QPs (uc.go, ucrecv.go) and unreliable-datagram QPs
// (ud.go, udrecv.go). The wire format it reads and writes, header views,
// opcodes and PSNs, is package header's.
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
// completion types (SendWR, RecvWR, SGE, WC), the QP attributes and the
// errors are package ibv's: the vocabulary the engine shares with verbs,
// which gives them their libibverbs names, and with the daemon's host
// interface and client, which need no engine.
//
// A device runs one Engine per receive queue of its link, in a Group: each
// engine is single-threaded and owns the QPs placed on it, which is where
// both ends' engines pick the same from the connection's pair of QP
// numbers (EngineFor), so that on links that pair their queues a connection
// stays on one engine a side; a packet that arrives at another engine is
// copied to its QP's. State every engine reads (the QP table, the memory
// keys) changes only under Group.Do, with all engines paused.
package ibtransport
