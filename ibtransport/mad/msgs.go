package mad

// The replies and the disconnect messages. All but REQ open with the
// sender's and the receiver's communication IDs at bytes 24 and 28.

// Which message an MRA or REJ answers.
const (
	MsgREQ   = 0
	MsgREP   = 1
	MsgOther = 2 // a LAP
)

// Offsets of the fields after the communication IDs.
const (
	offLocalCommID  = 24
	offRemoteCommID = 28

	mraMessage     = 32 // message MRAed(7:6)
	mraTimeout     = 33 // service timeout(7:3)
	mraPrivateData = 34

	rejMessage     = 32 // message rejected(7:6)
	rejARILength   = 33 // ARI length(7:1)
	rejReason      = 34
	rejARI         = 36
	rejPrivateData = rejARI + REJARILen // 108

	repLocalQKey     = 32
	repLocalQPN      = 36 // 24 bits
	repStartingPSN   = 44 // 24 bits
	repRespResources = 48
	repInitDepth     = 49
	repByte50        = 50 // target ACK delay, failover accepted, flow control
	repByte51        = 51 // RNR retry count, SRQ
	repLocalCAGUID   = 52
	repPrivateData   = 60

	rtuPrivateData  = 32
	dreqRemoteQPN   = 32 // 24 bits
	dreqPrivateData = 36
	drepPrivateData = 32
)

// Room for private data in each message, and for the REJ's additional
// rejection information.
const (
	MRAPrivateDataLen  = Len - mraPrivateData  // 222
	REJPrivateDataLen  = Len - rejPrivateData  // 148
	REPPrivateDataLen  = Len - repPrivateData  // 196
	RTUPrivateDataLen  = Len - rtuPrivateData  // 224
	DREQPrivateDataLen = Len - dreqPrivateData // 220
	DREPPrivateDataLen = Len - drepPrivateData // 224
	REJARILen          = 72
)

// MRA is a MessageReceiptAcknowledgement: the sender needs longer to answer.
//
//	byte 24-27   local communication ID
//	byte 28-31   remote communication ID
//	byte 32      message MRAed(7:6) reserved(5:0)
//	byte 33      service timeout(7:3) reserved(2:0)
//	byte 34-255  private data (222 bytes)
type MRA []byte

// LocalCommID returns the sender's communication ID.
func (m MRA) LocalCommID() uint32 { return u32(m, offLocalCommID) }

// SetLocalCommID sets the sender's communication ID.
func (m MRA) SetLocalCommID(id uint32) { putU32(m, offLocalCommID, id) }

// RemoteCommID returns the receiver's communication ID.
func (m MRA) RemoteCommID() uint32 { return u32(m, offRemoteCommID) }

// SetRemoteCommID sets the receiver's communication ID.
func (m MRA) SetRemoteCommID(id uint32) { putU32(m, offRemoteCommID, id) }

// MessageMRAed returns MsgREQ, MsgREP or MsgOther: what the MRA answers.
func (m MRA) MessageMRAed() uint8 { return bits(m, mraMessage, 6, 2) }

// SetMessageMRAed sets what the MRA answers.
func (m MRA) SetMessageMRAed(v uint8) { putBits(m, mraMessage, 6, 2, v) }

// ServiceTimeout returns the exponent of the extra time the sender asks for
// (4.096 µs × 2^t).
func (m MRA) ServiceTimeout() uint8 { return bits(m, mraTimeout, 3, 5) }

// SetServiceTimeout sets the service timeout (5 bits).
func (m MRA) SetServiceTimeout(t uint8) { putBits(m, mraTimeout, 3, 5, t) }

// PrivateData returns the 222 bytes of private data.
func (m MRA) PrivateData() []byte { return m[mraPrivateData:Len:Len] }

// SetPrivateData copies p into the private data and zeroes the rest of it.
func (m MRA) SetPrivateData(p []byte) error { return setPrivateData(m.PrivateData(), p) }

// RejectReason is the reason code of a REJ (IBA table 109).
type RejectReason uint16

// Reject reasons a connection manager sends or has to understand.
const (
	RejectNoQP                  RejectReason = 1
	RejectNoResources           RejectReason = 3
	RejectTimeout               RejectReason = 4
	RejectUnsupported           RejectReason = 5
	RejectInvalidCommID         RejectReason = 6
	RejectInvalidCommInstance   RejectReason = 7
	RejectInvalidServiceID      RejectReason = 8
	RejectInvalidTransportType  RejectReason = 9
	RejectStaleConn             RejectReason = 10
	RejectInvalidGID            RejectReason = 12
	RejectInvalidMTU            RejectReason = 26
	RejectInsufficientResources RejectReason = 27
	RejectConsumer              RejectReason = 28
	RejectInvalidRNRRetry       RejectReason = 29
	RejectDuplicateLocalCommID  RejectReason = 30
	RejectInvalidClassVersion   RejectReason = 31
	RejectInvalidFlowLabel      RejectReason = 32
)

// REJ is a Reject.
//
//	byte 24-27    local communication ID
//	byte 28-31    remote communication ID (0 when rejecting an unknown REQ's sender)
//	byte 32       message rejected(7:6) reserved(5:0)
//	byte 33       rejection information length(7:1) reserved(0)
//	byte 34-35    reason
//	byte 36-107   additional rejection information (ARI, 72 bytes)
//	byte 108-255  private data (148 bytes)
type REJ []byte

// LocalCommID returns the sender's communication ID.
func (r REJ) LocalCommID() uint32 { return u32(r, offLocalCommID) }

// SetLocalCommID sets the sender's communication ID.
func (r REJ) SetLocalCommID(id uint32) { putU32(r, offLocalCommID, id) }

// RemoteCommID returns the receiver's communication ID.
func (r REJ) RemoteCommID() uint32 { return u32(r, offRemoteCommID) }

// SetRemoteCommID sets the receiver's communication ID.
func (r REJ) SetRemoteCommID(id uint32) { putU32(r, offRemoteCommID, id) }

// MessageRejected returns MsgREQ, MsgREP or MsgOther: what is rejected.
func (r REJ) MessageRejected() uint8 { return bits(r, rejMessage, 6, 2) }

// SetMessageRejected sets what is rejected.
func (r REJ) SetMessageRejected(v uint8) { putBits(r, rejMessage, 6, 2, v) }

// ARILength returns the number of valid ARI bytes (7 bits; at most
// REJARILen in a valid REJ).
func (r REJ) ARILength() uint8 { return bits(r, rejARILength, 1, 7) }

// Reason returns the reject reason.
func (r REJ) Reason() RejectReason { return RejectReason(u16(r, rejReason)) }

// SetReason sets the reject reason.
func (r REJ) SetReason(v RejectReason) { putU16(r, rejReason, uint16(v)) }

// ARI returns the valid part of the additional rejection information. The
// REJ must have passed Parse (its ARI length fits).
func (r REJ) ARI() []byte { return r[rejARI : rejARI+int(r.ARILength())] }

// SetARI copies a into the ARI field, zeroes the rest of it and sets the ARI
// length.
func (r REJ) SetARI(a []byte) error {
	if err := setPrivateData(r[rejARI:rejPrivateData], a); err != nil {
		return ErrBadARILength
	}
	putBits(r, rejARILength, 1, 7, uint8(len(a)))
	return nil
}

// PrivateData returns the 148 bytes of private data.
func (r REJ) PrivateData() []byte { return r[rejPrivateData:Len:Len] }

// SetPrivateData copies p into the private data and zeroes the rest of it.
func (r REJ) SetPrivateData(p []byte) error { return setPrivateData(r.PrivateData(), p) }

// REP is a ConnectReply.
//
//	byte 24-27   local communication ID
//	byte 28-31   remote communication ID
//	byte 32-35   local Q_Key
//	byte 36-38   local QPN
//	byte 39      reserved
//	byte 40-42   local EE context number (RD only)
//	byte 43      reserved
//	byte 44-46   starting PSN
//	byte 47      reserved
//	byte 48      responder resources
//	byte 49      initiator depth
//	byte 50      target ACK delay(7:3) failover accepted(2:1) end-to-end flow control(0)
//	byte 51      RNR retry count(7:5) SRQ(4) reserved(3:0)
//	byte 52-59   local CA GUID
//	byte 60-255  private data (196 bytes)
//
// The starting PSN is the first PSN the sender's receive queue expects: the
// active side sends from it.
type REP []byte

// LocalCommID returns the sender's communication ID.
func (r REP) LocalCommID() uint32 { return u32(r, offLocalCommID) }

// SetLocalCommID sets the sender's communication ID.
func (r REP) SetLocalCommID(id uint32) { putU32(r, offLocalCommID, id) }

// RemoteCommID returns the receiver's communication ID.
func (r REP) RemoteCommID() uint32 { return u32(r, offRemoteCommID) }

// SetRemoteCommID sets the receiver's communication ID.
func (r REP) SetRemoteCommID(id uint32) { putU32(r, offRemoteCommID, id) }

// LocalQKey returns the sender's Q_Key (UD and RD only; 0 for RC).
func (r REP) LocalQKey() uint32 { return u32(r, repLocalQKey) }

// SetLocalQKey sets the sender's Q_Key.
func (r REP) SetLocalQKey(k uint32) { putU32(r, repLocalQKey, k) }

// LocalQPN returns the sender's QP number.
func (r REP) LocalQPN() uint32 { return u24(r, repLocalQPN) }

// SetLocalQPN sets the sender's QP number.
func (r REP) SetLocalQPN(q uint32) { putU24(r, repLocalQPN, q) }

// StartingPSN returns the first PSN the sender's receive queue expects.
func (r REP) StartingPSN() uint32 { return u24(r, repStartingPSN) }

// SetStartingPSN sets the starting PSN.
func (r REP) SetStartingPSN(p uint32) { putU24(r, repStartingPSN, p) }

// ResponderResources returns the RDMA READs and atomics the sender accepts
// at once.
func (r REP) ResponderResources() uint8 { return r[repRespResources] }

// SetResponderResources sets the responder resources.
func (r REP) SetResponderResources(n uint8) { r[repRespResources] = n }

// InitiatorDepth returns the RDMA READs and atomics the sender issues at once.
func (r REP) InitiatorDepth() uint8 { return r[repInitDepth] }

// SetInitiatorDepth sets the initiator depth.
func (r REP) SetInitiatorDepth(n uint8) { r[repInitDepth] = n }

// TargetACKDelay returns the exponent of the sender's ACK turnaround.
func (r REP) TargetACKDelay() uint8 { return bits(r, repByte50, 3, 5) }

// SetTargetACKDelay sets the target ACK delay (5 bits).
func (r REP) SetTargetACKDelay(t uint8) { putBits(r, repByte50, 3, 5, t) }

// FailoverAccepted returns the failover field (2 bits; 0 = accepted).
func (r REP) FailoverAccepted() uint8 { return bits(r, repByte50, 1, 2) }

// SetFailoverAccepted sets the failover field.
func (r REP) SetFailoverAccepted(v uint8) { putBits(r, repByte50, 1, 2, v) }

// EndToEndFlowControl reports the end-to-end flow control bit.
func (r REP) EndToEndFlowControl() bool { return flag(r, repByte50, 0) }

// SetEndToEndFlowControl sets the end-to-end flow control bit.
func (r REP) SetEndToEndFlowControl(v bool) { putFlag(r, repByte50, 0, v) }

// RNRRetryCount returns the RNR retry count the REQ's sender is to use.
func (r REP) RNRRetryCount() uint8 { return bits(r, repByte51, 5, 3) }

// SetRNRRetryCount sets the RNR retry count (3 bits).
func (r REP) SetRNRRetryCount(n uint8) { putBits(r, repByte51, 5, 3, n) }

// SRQ reports whether the sender's QP uses a shared receive queue.
func (r REP) SRQ() bool { return flag(r, repByte51, 4) }

// SetSRQ sets the SRQ bit.
func (r REP) SetSRQ(v bool) { putFlag(r, repByte51, 4, v) }

// LocalCAGUID returns the sender's node GUID.
func (r REP) LocalCAGUID() uint64 { return u64(r, repLocalCAGUID) }

// SetLocalCAGUID sets the sender's node GUID.
func (r REP) SetLocalCAGUID(g uint64) { putU64(r, repLocalCAGUID, g) }

// PrivateData returns the 196 bytes of private data.
func (r REP) PrivateData() []byte { return r[repPrivateData:Len:Len] }

// SetPrivateData copies p into the private data and zeroes the rest of it.
func (r REP) SetPrivateData(p []byte) error { return setPrivateData(r.PrivateData(), p) }
