package mad

import (
	"github.com/softnic/softnic/ibtransport/ibv"
)

// REQ field offsets (IBA table 106, plus the 24-byte header).
const (
	reqLocalCommID   = 24
	reqServiceID     = 32
	reqLocalCAGUID   = 40
	reqLocalQKey     = 52
	reqLocalQPN      = 56 // 24 bits, then responder resources
	reqRespResources = 59
	reqInitDepth     = 63 // after the local EECN, which RC never uses
	reqByte67        = 67 // remote CM response timeout, transport type, flow control
	reqStartingPSN   = 68 // 24 bits, then byte 71
	reqByte71        = 71 // local CM response timeout, retry count
	reqPKey          = 72
	reqByte74        = 74 // path MTU, RDC exists, RNR retry count
	reqByte75        = 75 // max CM retries, SRQ, extended transport type
	reqPrimaryPath   = 76
	reqAltPath       = reqPrimaryPath + PathLen
	reqPrivateData   = reqAltPath + PathLen // 164

	// REQPrivateDataLen is the room for private data in a REQ.
	REQPrivateDataLen = Len - reqPrivateData
)

// Transport service types of a REQ.
const (
	TransportRC = 0
	TransportUC = 1
	TransportRD = 2
	// TransportXRC (3, "reserved" before the XRC annex) goes with the
	// extended transport type ExtendedTransportXRC, as cm.c sends an XRC
	// initiator's REQ.
	TransportXRC         = 3
	ExtendedTransportXRC = 1
)

// REQ is a ConnectRequest, a whole MAD.
//
//	byte 24-27    local communication ID
//	byte 28-31    reserved
//	byte 32-39    service ID
//	byte 40-47    local CA GUID
//	byte 48-51    reserved
//	byte 52-55    local Q_Key
//	byte 56-58    local QPN
//	byte 59       responder resources
//	byte 60-62    local EECN (RD only)
//	byte 63       initiator depth
//	byte 64-66    remote EECN (RD only)
//	byte 67       remote CM response timeout(7:3) transport service type(2:1) end-to-end flow control(0)
//	byte 68-70    starting PSN
//	byte 71       local CM response timeout(7:3) retry count(2:0)
//	byte 72-73    P_Key
//	byte 74       path MTU(7:4) RDC exists(3) RNR retry count(2:0)
//	byte 75       max CM retries(7:4) SRQ(3) extended transport type(2:0)
//	byte 76-119   primary path (see Path)
//	byte 120-163  alternate path; byte 163 bit 2 is SAP supported
//	byte 164-255  private data (92 bytes)
//
// The starting PSN is the first PSN the sender's receive queue expects: the
// passive side sends from it, as Linux cm.c sets sq_psn from it.
type REQ []byte

// LocalCommID returns the sender's communication ID.
func (r REQ) LocalCommID() uint32 { return u32(r, reqLocalCommID) }

// SetLocalCommID sets the sender's communication ID.
func (r REQ) SetLocalCommID(id uint32) { putU32(r, reqLocalCommID, id) }

// ServiceID returns the service the REQ asks for.
func (r REQ) ServiceID() uint64 { return u64(r, reqServiceID) }

// SetServiceID sets the service ID.
func (r REQ) SetServiceID(id uint64) { putU64(r, reqServiceID, id) }

// LocalCAGUID returns the sender's node GUID.
func (r REQ) LocalCAGUID() uint64 { return u64(r, reqLocalCAGUID) }

// SetLocalCAGUID sets the sender's node GUID.
func (r REQ) SetLocalCAGUID(g uint64) { putU64(r, reqLocalCAGUID, g) }

// LocalQKey returns the sender's Q_Key (UD and RD only; 0 for RC).
func (r REQ) LocalQKey() uint32 { return u32(r, reqLocalQKey) }

// SetLocalQKey sets the sender's Q_Key.
func (r REQ) SetLocalQKey(k uint32) { putU32(r, reqLocalQKey, k) }

// LocalQPN returns the sender's QP number.
func (r REQ) LocalQPN() uint32 { return u24(r, reqLocalQPN) }

// SetLocalQPN sets the sender's QP number.
func (r REQ) SetLocalQPN(q uint32) { putU24(r, reqLocalQPN, q) }

// ResponderResources returns how many incoming RDMA READs and atomics the
// sender accepts at once.
func (r REQ) ResponderResources() uint8 { return r[reqRespResources] }

// SetResponderResources sets the responder resources.
func (r REQ) SetResponderResources(n uint8) { r[reqRespResources] = n }

// InitiatorDepth returns how many RDMA READs and atomics the sender issues
// at once.
func (r REQ) InitiatorDepth() uint8 { return r[reqInitDepth] }

// SetInitiatorDepth sets the initiator depth.
func (r REQ) SetInitiatorDepth(n uint8) { r[reqInitDepth] = n }

// RemoteCMResponseTimeout returns the exponent of how long the sender waits
// for the reply (4.096 µs × 2^t).
func (r REQ) RemoteCMResponseTimeout() uint8 { return bits(r, reqByte67, 3, 5) }

// SetRemoteCMResponseTimeout sets it (5 bits).
func (r REQ) SetRemoteCMResponseTimeout(t uint8) { putBits(r, reqByte67, 3, 5, t) }

// TransportServiceType returns TransportRC, TransportUC or TransportRD.
func (r REQ) TransportServiceType() uint8 { return bits(r, reqByte67, 1, 2) }

// SetTransportServiceType sets the transport service type (2 bits).
func (r REQ) SetTransportServiceType(t uint8) { putBits(r, reqByte67, 1, 2, t) }

// EndToEndFlowControl reports the end-to-end flow control bit.
func (r REQ) EndToEndFlowControl() bool { return flag(r, reqByte67, 0) }

// SetEndToEndFlowControl sets the end-to-end flow control bit.
func (r REQ) SetEndToEndFlowControl(v bool) { putFlag(r, reqByte67, 0, v) }

// StartingPSN returns the first PSN the sender's receive queue expects.
func (r REQ) StartingPSN() uint32 { return u24(r, reqStartingPSN) }

// SetStartingPSN sets the starting PSN.
func (r REQ) SetStartingPSN(p uint32) { putU24(r, reqStartingPSN, p) }

// LocalCMResponseTimeout returns the exponent of how long the sender takes
// to answer (4.096 µs × 2^t).
func (r REQ) LocalCMResponseTimeout() uint8 { return bits(r, reqByte71, 3, 5) }

// SetLocalCMResponseTimeout sets it (5 bits).
func (r REQ) SetLocalCMResponseTimeout(t uint8) { putBits(r, reqByte71, 3, 5, t) }

// RetryCount returns the transport retry count for the QPs (3 bits).
func (r REQ) RetryCount() uint8 { return bits(r, reqByte71, 0, 3) }

// SetRetryCount sets the retry count.
func (r REQ) SetRetryCount(n uint8) { putBits(r, reqByte71, 0, 3, n) }

// PKey returns the partition key of the connection.
func (r REQ) PKey() uint16 { return u16(r, reqPKey) }

// SetPKey sets the partition key.
func (r REQ) SetPKey(k uint16) { putU16(r, reqPKey, k) }

// PathMTU returns the path MTU (the IB enum: 1 = 256 ... 5 = 4096).
func (r REQ) PathMTU() ibv.MTU { return ibv.MTU(bits(r, reqByte74, 4, 4)) }

// SetPathMTU sets the path MTU.
func (r REQ) SetPathMTU(m ibv.MTU) { putBits(r, reqByte74, 4, 4, uint8(m)) }

// RDCExists reports the RD channel bit (RD only).
func (r REQ) RDCExists() bool { return flag(r, reqByte74, 3) }

// SetRDCExists sets the RD channel bit.
func (r REQ) SetRDCExists(v bool) { putFlag(r, reqByte74, 3, v) }

// RNRRetryCount returns the RNR retry count for the QPs (3 bits, 7 = forever).
func (r REQ) RNRRetryCount() uint8 { return bits(r, reqByte74, 0, 3) }

// SetRNRRetryCount sets the RNR retry count.
func (r REQ) SetRNRRetryCount(n uint8) { putBits(r, reqByte74, 0, 3, n) }

// MaxCMRetries returns how often the sender resends the REQ (4 bits).
func (r REQ) MaxCMRetries() uint8 { return bits(r, reqByte75, 4, 4) }

// SetMaxCMRetries sets the maximum number of CM retries.
func (r REQ) SetMaxCMRetries(n uint8) { putBits(r, reqByte75, 4, 4, n) }

// SRQ reports whether the sender's QP uses a shared receive queue.
func (r REQ) SRQ() bool { return flag(r, reqByte75, 3) }

// SetSRQ sets the SRQ bit.
func (r REQ) SetSRQ(v bool) { putFlag(r, reqByte75, 3, v) }

// ExtendedTransportType returns the extended transport type (3 bits; 0 but
// for XRC).
func (r REQ) ExtendedTransportType() uint8 { return bits(r, reqByte75, 0, 3) }

// SetExtendedTransportType sets the extended transport type.
func (r REQ) SetExtendedTransportType(t uint8) { putBits(r, reqByte75, 0, 3, t) }

// PrimaryPath returns the view of the primary path.
func (r REQ) PrimaryPath() Path { return Path(r[reqPrimaryPath:reqAltPath:reqAltPath]) }

// AlternatePath returns the view of the alternate path (all zero when the
// connection has none, as on RoCE).
func (r REQ) AlternatePath() Path { return Path(r[reqAltPath:reqPrivateData:reqPrivateData]) }

// SAPSupported reports the SAP supported bit, in the alternate path's last byte.
func (r REQ) SAPSupported() bool { return flag(r, reqPrivateData-1, 2) }

// SetSAPSupported sets the SAP supported bit.
func (r REQ) SetSAPSupported(v bool) { putFlag(r, reqPrivateData-1, 2, v) }

// PrivateData returns the 92 bytes of private data.
func (r REQ) PrivateData() []byte { return r[reqPrivateData:Len:Len] }

// SetPrivateData copies p into the private data and zeroes the rest of it.
func (r REQ) SetPrivateData(p []byte) error { return setPrivateData(r.PrivateData(), p) }

// CMAHeader returns the rdma_cm header at the start of the private data.
func (r REQ) CMAHeader() CMAHeader {
	const end = reqPrivateData + CMAHeaderLen
	return CMAHeader(r[reqPrivateData:end:end])
}

// PathLen is the length of a path description in a REQ.
const PathLen = 44

// Path is a path description of a REQ (offsets from its start).
//
//	byte 0-1    local port LID (0xffff on RoCE)
//	byte 2-3    remote port LID
//	byte 4-19   local port GID
//	byte 20-35  remote port GID
//	byte 36-39  flow label(31:12) reserved(11:6) packet rate(5:0)
//	byte 40     traffic class
//	byte 41     hop limit
//	byte 42     SL(7:4) subnet local(3) reserved(2:0)
//	byte 43     local ACK timeout(7:3) reserved(2:0)
type Path []byte

// Path offsets.
const (
	pathLocalLID  = 0
	pathRemoteLID = 2
	pathLocalGID  = 4
	pathRemoteGID = 20
	pathFlow      = 36
	pathRate      = 39
	pathTClass    = 40
	pathHopLimit  = 41
	pathSL        = 42
	pathACK       = 43
)

// LocalLID returns the sender's port LID.
func (p Path) LocalLID() uint16 { return u16(p, pathLocalLID) }

// SetLocalLID sets the sender's port LID.
func (p Path) SetLocalLID(l uint16) { putU16(p, pathLocalLID, l) }

// RemoteLID returns the receiver's port LID.
func (p Path) RemoteLID() uint16 { return u16(p, pathRemoteLID) }

// SetRemoteLID sets the receiver's port LID.
func (p Path) SetRemoteLID(l uint16) { putU16(p, pathRemoteLID, l) }

// LocalGID returns the sender's port GID.
func (p Path) LocalGID() ibv.GID { return ibv.GID(p[pathLocalGID:pathRemoteGID]) }

// SetLocalGID sets the sender's port GID.
func (p Path) SetLocalGID(g ibv.GID) { copy(p[pathLocalGID:], g[:]) }

// RemoteGID returns the receiver's port GID.
func (p Path) RemoteGID() ibv.GID { return ibv.GID(p[pathRemoteGID:pathFlow]) }

// SetRemoteGID sets the receiver's port GID.
func (p Path) SetRemoteGID(g ibv.GID) { copy(p[pathRemoteGID:], g[:]) }

// FlowLabel returns the 20-bit flow label.
func (p Path) FlowLabel() uint32 { return u32(p, pathFlow) >> 12 }

// SetFlowLabel sets the flow label (low 20 bits of f).
func (p Path) SetFlowLabel(f uint32) {
	putU32(p, pathFlow, u32(p, pathFlow)&0xfff|f<<12)
}

// PacketRate returns the 6-bit static rate enum.
func (p Path) PacketRate() uint8 { return bits(p, pathRate, 0, 6) }

// SetPacketRate sets the packet rate enum.
func (p Path) SetPacketRate(r uint8) { putBits(p, pathRate, 0, 6, r) }

// TrafficClass returns the GRH traffic class.
func (p Path) TrafficClass() uint8 { return p[pathTClass] }

// SetTrafficClass sets the traffic class.
func (p Path) SetTrafficClass(t uint8) { p[pathTClass] = t }

// HopLimit returns the GRH hop limit.
func (p Path) HopLimit() uint8 { return p[pathHopLimit] }

// SetHopLimit sets the hop limit.
func (p Path) SetHopLimit(h uint8) { p[pathHopLimit] = h }

// SL returns the service level (4 bits).
func (p Path) SL() uint8 { return bits(p, pathSL, 4, 4) }

// SetSL sets the service level.
func (p Path) SetSL(s uint8) { putBits(p, pathSL, 4, 4, s) }

// SubnetLocal reports whether the path stays in one subnet (no GRH needed).
func (p Path) SubnetLocal() bool { return flag(p, pathSL, 3) }

// SetSubnetLocal sets the subnet local bit.
func (p Path) SetSubnetLocal(v bool) { putFlag(p, pathSL, 3, v) }

// LocalACKTimeout returns the QP's ACK timeout exponent (4.096 µs × 2^t).
func (p Path) LocalACKTimeout() uint8 { return bits(p, pathACK, 3, 5) }

// SetLocalACKTimeout sets the local ACK timeout (5 bits).
func (p Path) SetLocalACKTimeout(t uint8) { putBits(p, pathACK, 3, 5, t) }
