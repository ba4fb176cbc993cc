package mad

// Service ID resolution (IBA vol 1 12.11): a SIDR_REQ asks which UD QP
// serves a service ID, the SIDR_REP answers with its QPN and Q_Key.
// rdma_cm's UDP port space (udaddy) resolves its peers this way, with the
// rdma_cm header at the start of the REQ's private data.

const (
	sidrRequestID = 24

	sidrReqPKey        = 28
	sidrReqServiceID   = 32
	sidrReqPrivateData = 40

	sidrRepStatus      = 28
	sidrRepInfoLength  = 29
	sidrRepQPN         = 32 // 24 bits
	sidrRepServiceID   = 36
	sidrRepQKey        = 44
	sidrRepInfo        = 48
	sidrRepPrivateData = sidrRepInfo + SIDRInfoLen // 120
)

// Room in the SIDR messages.
const (
	SIDRREQPrivateDataLen = Len - sidrReqPrivateData // 216
	SIDRREPPrivateDataLen = Len - sidrRepPrivateData // 136
	SIDRInfoLen           = 72
)

// SIDRStatus is a SIDR_REP's status (IBA table 116).
type SIDRStatus uint8

const (
	SIDRValid          SIDRStatus = 0 // the QPN and Q_Key are the service's
	SIDRUnsupported    SIDRStatus = 1 // no one serves the service ID
	SIDRRejected       SIDRStatus = 2 // the service provider refused
	SIDRNoQP           SIDRStatus = 3
	SIDRRedirect       SIDRStatus = 4
	SIDRUnsupportedVer SIDRStatus = 5
)

// SIDRREQ is a ServiceIDResolutionRequest.
//
//	byte 24-27   request ID
//	byte 28-29   P_Key
//	byte 30-31   reserved
//	byte 32-39   service ID
//	byte 40-255  private data (216 bytes)
type SIDRREQ []byte

// RequestID returns the sender's request ID, which the REP repeats.
func (r SIDRREQ) RequestID() uint32 { return u32(r, sidrRequestID) }

// SetRequestID sets the sender's request ID.
func (r SIDRREQ) SetRequestID(id uint32) { putU32(r, sidrRequestID, id) }

// PKey returns the partition the UD QP is to be in.
func (r SIDRREQ) PKey() uint16 { return u16(r, sidrReqPKey) }

// SetPKey sets the partition.
func (r SIDRREQ) SetPKey(p uint16) { putU16(r, sidrReqPKey, p) }

// ServiceID returns the service to resolve.
func (r SIDRREQ) ServiceID() uint64 { return u64(r, sidrReqServiceID) }

// SetServiceID sets the service to resolve.
func (r SIDRREQ) SetServiceID(s uint64) { putU64(r, sidrReqServiceID, s) }

// PrivateData returns the 216 bytes of private data.
func (r SIDRREQ) PrivateData() []byte { return r[sidrReqPrivateData:Len:Len] }

// SetPrivateData copies p into the private data and zeroes the rest of it.
func (r SIDRREQ) SetPrivateData(p []byte) error { return setPrivateData(r.PrivateData(), p) }

// SIDRREP is a ServiceIDResolutionResponse.
//
//	byte 24-27   request ID (the REQ's)
//	byte 28      status
//	byte 29      additional information length
//	byte 30-31   reserved
//	byte 32-34   QPN, byte 35 reserved
//	byte 36-43   service ID
//	byte 44-47   Q_Key
//	byte 48-119  class port info (additional information, 72 bytes)
//	byte 120-255 private data (136 bytes)
type SIDRREP []byte

// RequestID returns the request ID of the REQ answered.
func (r SIDRREP) RequestID() uint32 { return u32(r, sidrRequestID) }

// SetRequestID sets the request ID of the REQ answered.
func (r SIDRREP) SetRequestID(id uint32) { putU32(r, sidrRequestID, id) }

// Status returns the answer's status.
func (r SIDRREP) Status() SIDRStatus { return SIDRStatus(r[sidrRepStatus]) }

// SetStatus sets the answer's status.
func (r SIDRREP) SetStatus(s SIDRStatus) { r[sidrRepStatus] = uint8(s) }

// InfoLength returns the length of the additional information.
func (r SIDRREP) InfoLength() uint8 { return r[sidrRepInfoLength] }

// QPN returns the service's UD QP.
func (r SIDRREP) QPN() uint32 { return u24(r, sidrRepQPN) }

// SetQPN sets the service's UD QP.
func (r SIDRREP) SetQPN(q uint32) { putU24(r, sidrRepQPN, q) }

// ServiceID returns the service resolved.
func (r SIDRREP) ServiceID() uint64 { return u64(r, sidrRepServiceID) }

// SetServiceID sets the service resolved.
func (r SIDRREP) SetServiceID(s uint64) { putU64(r, sidrRepServiceID, s) }

// QKey returns the Q_Key of the service's QP.
func (r SIDRREP) QKey() uint32 { return u32(r, sidrRepQKey) }

// SetQKey sets the Q_Key of the service's QP.
func (r SIDRREP) SetQKey(k uint32) { putU32(r, sidrRepQKey, k) }

// PrivateData returns the 136 bytes of private data.
func (r SIDRREP) PrivateData() []byte { return r[sidrRepPrivateData:Len:Len] }

// SetPrivateData copies p into the private data and zeroes the rest of it.
func (r SIDRREP) SetPrivateData(p []byte) error { return setPrivateData(r.PrivateData(), p) }
