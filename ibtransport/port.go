package ibtransport

import "sync/atomic"

// Port is what an Engine sends through: the RoCE device, which knows the
// link, the addresses and the framing.
type Port interface {
	// Path prepares transmission for local QP qpn to av, with IB packets of
	// up to pathMTU bytes of payload. It fails when av cannot be reached or
	// such packets do not fit the link.
	Path(av *AddressVector, qpn uint32, pathMTU int) (TxPath, error)
	// ActiveMTU is the port's active IB MTU in bytes: the largest message
	// a UD QP sends.
	ActiveMTU() int
}

// TxPath sends the IB packets of one QP. The engine builds each packet in
// place in the buffer Buffer returns; the port wraps it and queues it. A
// packet sent while Engine.ReadsPending is true may still lack its payload:
// the port holds it, and those after it, until it has called
// Engine.SettleReads (lazyread.go).
type TxPath interface {
	// Buffer returns room for one IB packet (BTH through pad, ICRC
	// excluded), or nil when the link has no free buffer now.
	Buffer() []byte
	// Send sends the first n bytes of the buffer last returned.
	Send(n int)
}

// RecvInfo describes where a received IB packet came from.
type RecvInfo struct {
	SGID, DGID GID
	// DGIDIndex is the index of DGID in the device's GID table.
	DGIDIndex int
	// NetHeader is the packet's network header as received: an IPv4
	// header (20 bytes) or an IPv6 header (40). UD receives copy it into
	// the GRH; it is valid only during the Receive call.
	NetHeader []byte
}

// Counters count engine events; they may be read while the engine runs.
type Counters struct {
	RxPackets      atomic.Uint64
	RxBadPacket    atomic.Uint64 // failed ParsePacket
	RxUnsupported  atomic.Uint64 // not an RC, UC or UD opcode
	RxWrongService atomic.Uint64 // an opcode of another transport service than the QP's
	RxBadQKey      atomic.Uint64 // UD packets whose Q_Key is not the QP's (IBA 10.2.4)
	RxNoRecv       atomic.Uint64 // UD and UC messages dropped for lack of a posted receive
	RxUCPSNGap     atomic.Uint64 // UC packets after a PSN gap: the message in progress is dropped
	RxUCOpSeq      atomic.Uint64 // UC packets out of the opcode sequence: the message in progress is dropped
	RxUCResync     atomic.Uint64 // UC packets dropped while waiting for a FIRST or ONLY
	RxUCAccess     atomic.Uint64 // UC WRITEs dropped for an rkey, bounds or access violation
	RxUCLength     atomic.Uint64 // UC packets dropped for a payload length the message does not allow
	TxUDTooLong    atomic.Uint64 // UD sends longer than the MTU, completed without a packet (C10-93.1.1)
	RxNoQP         atomic.Uint64 // unknown destination QP
	RxFiltered     atomic.Uint64 // QP not ready, or GIDs not the QP's path
	RxBadPKey      atomic.Uint64 // P_Key not the default partition
	RxDuplicate    atomic.Uint64 // duplicate requests (re-ACKed or replayed)
	RxOutOfSeq     atomic.Uint64 // requests ahead of the expected PSN
	RxBadResponse  atomic.Uint64 // responses that fit no outstanding request
	TxPackets      atomic.Uint64
	TxNAKSeq       atomic.Uint64
	TxRNRNAK       atomic.Uint64
	TxNAKError     atomic.Uint64 // NAKs for invalid request, access and operational errors
	Retransmits    atomic.Uint64 // go-back-N restarts (timeout, NAK, response gap, RNR)
	Timeouts       atomic.Uint64
	TxWindowStalls atomic.Uint64 // new requests held back by the device-wide window
	RNRNAKsHandled atomic.Uint64
	Forwarded      atomic.Uint64 // packets received for another engine's QP, passed on to it
	ForwardDrops   atomic.Uint64 // such packets dropped: the engines' ring was full
	Followed       atomic.Uint64 // QPs moved to this engine, at which their packets arrived
}
