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
	// CE reports that the packet arrived marked Congestion Experienced
	// (ECN codepoint 11 in its IP header): the notification point answers
	// with a CNP (cnp.go).
	CE bool
}

// Counters count engine events; they may be read while the engine runs.
// The engine goroutine that owns them is their only writer (inc, add):
// packages counters and verbs name them for `softnic stat` and the
// daemon's metrics, by their rdma tags (Linux's names where rxe or
// `rdma statistic` have one) or their Go names in snake case. A field
// added here shows up there with no other change.
type Counters struct {
	RxPackets        atomic.Uint64 `rdma:"rcvd_pkts"`              // IB packets received, at the engine the link gave them to
	TxPackets        atomic.Uint64 `rdma:"sent_pkts"`              // IB packets sent: requests, responses and ACKs
	RxDuplicate      atomic.Uint64 `rdma:"duplicate_request"`      // duplicate requests (re-ACKed or replayed)
	RxOutOfSeq       atomic.Uint64 `rdma:"out_of_seq_request"`     // requests ahead of the expected PSN
	RNRNAKsHandled   atomic.Uint64 `rdma:"rcvd_rnr_err"`           // RNR NAKs received
	TxRNRNAK         atomic.Uint64 `rdma:"send_rnr_err"`           // RNR NAKs sent
	RxNAKSeq         atomic.Uint64 `rdma:"rcvd_seq_err"`           // PSN sequence error NAKs received
	Retransmits      atomic.Uint64 `rdma:"completer_retry_err"`    // go-back-N restarts (timeout, NAK, response gap, RNR)
	RetryExceeded    atomic.Uint64 `rdma:"retry_exceeded_err"`     // WQEs failed: transport retries exhausted
	RNRRetryExceeded atomic.Uint64 `rdma:"retry_rnr_exceeded_err"` // WQEs failed: RNR retries exhausted
	RdmaSends        atomic.Uint64 `rdma:"rdma_sends"`             // SEND work requests completed
	RdmaRecvs        atomic.Uint64 `rdma:"rdma_recvs"`             // receive work requests completed
	Timeouts         atomic.Uint64 `rdma:"local_ack_timeout_err"`  // retransmit timer expiries (mlx5's name)
	TxNAKSeq         atomic.Uint64 // PSN sequence error NAKs sent
	TxNAKError       atomic.Uint64 // NAKs for invalid request, access and operational errors
	RxBadPacket      atomic.Uint64 // failed ParsePacket
	RxUnsupported    atomic.Uint64 // not an RC, UC or UD opcode
	RxWrongService   atomic.Uint64 // an opcode of another transport service than the QP's
	RxBadQKey        atomic.Uint64 `rdma:"rx_bad_qkey"` // UD packets whose Q_Key is not the QP's (IBA 10.2.4)
	RxNoRecv         atomic.Uint64 // UD and UC messages dropped for lack of a posted receive
	RxUCPSNGap       atomic.Uint64 `rdma:"rx_uc_psn_gap"` // UC packets after a PSN gap: the message in progress is dropped
	RxUCOpSeq        atomic.Uint64 // UC packets out of the opcode sequence: the message in progress is dropped
	RxUCResync       atomic.Uint64 // UC packets dropped while waiting for a FIRST or ONLY
	RxUCAccess       atomic.Uint64 // UC WRITEs dropped for an rkey, bounds or access violation
	RxUCLength       atomic.Uint64 // UC packets dropped for a payload length the message does not allow
	TxUDTooLong      atomic.Uint64 // UD sends longer than the MTU, completed without a packet (C10-93.1.1)
	RxNoQP           atomic.Uint64 // unknown destination QP
	RxFiltered       atomic.Uint64 // QP not ready, or GIDs not the QP's path
	RxBadPKey        atomic.Uint64 `rdma:"rx_bad_pkey"` // P_Key not the default partition
	RxBadResponse    atomic.Uint64 // responses that fit no outstanding request
	TxWindowStalls   atomic.Uint64 // new requests held back by the device-wide window
	Forwarded        atomic.Uint64 // packets received for another engine's QP, passed on to it
	ForwardDrops     atomic.Uint64 // such packets dropped: the engines' ring was full
	Followed         atomic.Uint64 // QPs moved to this engine, at which their packets arrived
	// Congestion control (cnp.go, dcqcn.go), ConnectX's counters.
	NPECNMarked  atomic.Uint64 `rdma:"np_ecn_marked_roce_packets"` // packets received marked CE
	NPCNPSent    atomic.Uint64 `rdma:"np_cnp_sent"`                // CNPs sent
	RPCNPHandled atomic.Uint64 `rdma:"rp_cnp_handled"`             // CNPs received that the rate limiter acted on
	RPCNPIgnored atomic.Uint64 `rdma:"rp_cnp_ignored"`             // CNPs received and ignored (reaction point off, QP not a connected RC QP, wrong path)
}

// QPCounters count one QP's traffic and recovery, by the names of the
// device-wide Counters of the same meaning. Only the engine goroutine that
// owns the QP writes them (a QP changes engines only while all are
// paused), so an increment is a load and a store on a line no other CPU
// writes; any goroutine may read them.
type QPCounters struct {
	TxPackets        atomic.Uint64 `rdma:"sent_pkts"`
	RxPackets        atomic.Uint64 `rdma:"rcvd_pkts"`
	TxBytes          atomic.Uint64 `rdma:"sent_bytes"` // IB packets' bytes, BTH to pad
	RxBytes          atomic.Uint64 `rdma:"rcvd_bytes"`
	RxDuplicate      atomic.Uint64 `rdma:"duplicate_request"`
	RxOutOfSeq       atomic.Uint64 `rdma:"out_of_seq_request"`
	RNRNAKsHandled   atomic.Uint64 `rdma:"rcvd_rnr_err"`
	TxRNRNAK         atomic.Uint64 `rdma:"send_rnr_err"`
	RxNAKSeq         atomic.Uint64 `rdma:"rcvd_seq_err"`
	Retransmits      atomic.Uint64 `rdma:"completer_retry_err"`
	RetryExceeded    atomic.Uint64 `rdma:"retry_exceeded_err"`
	RNRRetryExceeded atomic.Uint64 `rdma:"retry_rnr_exceeded_err"`
	RdmaSends        atomic.Uint64 `rdma:"rdma_sends"`
	RdmaRecvs        atomic.Uint64 `rdma:"rdma_recvs"`
	Timeouts         atomic.Uint64 `rdma:"local_ack_timeout_err"`
	TxNAKSeq         atomic.Uint64
}

// inc adds one to a counter that has a single writer at a time: cheaper
// than an atomic add (no locked instruction), still safe to read anywhere.
func inc(c *atomic.Uint64) { c.Store(c.Load() + 1) }

// add adds n to a counter that has a single writer at a time.
func add(c *atomic.Uint64, n uint64) { c.Store(c.Load() + n) }
