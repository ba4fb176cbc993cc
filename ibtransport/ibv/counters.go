package ibv

import (
	"reflect"
	"sync/atomic"
)

// Counters count a transport engine's events; they may be read while the
// engine runs. The engine goroutine that owns them is their only writer
// (a load and a store, no locked add): packages counters and verbs name them for `softnic stat` and the
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
	RxXRCDomainErr   atomic.Uint64 // XRC requests naming no SRQ, or one of another XRC domain than the target's
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

// QPCountersRef names one QP's counters: what the engine's
// Group.QPCounterRefs lists.
type QPCountersRef struct {
	QPN uint32
	Ctr *QPCounters
}

// AddCounters adds every atomic counter of *src to the same field of *dst,
// going into nested structs: dst and src are pointers to the same struct
// type, whose fields are atomic.Uint64, atomic.Int64 or such structs.
func AddCounters(dst, src any) {
	addCounters(reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem())
}

func addCounters(dst, src reflect.Value) {
	for i := range dst.NumField() {
		d, s := dst.Field(i).Addr().Interface(), src.Field(i).Addr().Interface()
		switch d := d.(type) {
		case *atomic.Uint64:
			d.Add(s.(*atomic.Uint64).Load())
		case *atomic.Int64:
			d.Add(s.(*atomic.Int64).Load())
		default:
			if dst.Field(i).Kind() == reflect.Struct {
				addCounters(dst.Field(i), src.Field(i))
			}
		}
	}
}
