package ibv

import "github.com/softnic/softnic/ibtransport/header"

// QPState is the state of a queue pair (ibv_qp_state).
type QPState uint8

// Queue pair states, numbered as in libibverbs.
const (
	QPSReset QPState = iota
	QPSInit
	QPSRTR
	QPSRTS
	QPSSQD
	QPSSQE
	QPSErr
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string { return nameOf(qpStateNames[:], s, "QPState") }

// MTU is an IB path MTU code (ibv_mtu).
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// AddressVector says where a QP's packets go (ibv_ah_attr with its GRH).
type AddressVector struct {
	DGID         GID
	SGIDIndex    uint8
	FlowLabel    uint32
	HopLimit     uint8
	TrafficClass uint8
}

// QPAttrMask selects the attributes a ModifyQP call sets (ibv_qp_attr_mask).
type QPAttrMask uint32

// Attribute mask bits, with libibverbs' values.
const (
	QPAttrState           QPAttrMask = 1 << 0
	QPAttrCurState        QPAttrMask = 1 << 1
	QPAttrAccessFlags     QPAttrMask = 1 << 3
	QPAttrPKeyIndex       QPAttrMask = 1 << 4
	QPAttrPort            QPAttrMask = 1 << 5
	QPAttrQKey            QPAttrMask = 1 << 6
	QPAttrAV              QPAttrMask = 1 << 7
	QPAttrPathMTU         QPAttrMask = 1 << 8
	QPAttrTimeout         QPAttrMask = 1 << 9
	QPAttrRetryCnt        QPAttrMask = 1 << 10
	QPAttrRNRRetry        QPAttrMask = 1 << 11
	QPAttrRQPSN           QPAttrMask = 1 << 12
	QPAttrMaxQPRdAtomic   QPAttrMask = 1 << 13
	QPAttrMinRNRTimer     QPAttrMask = 1 << 15
	QPAttrSQPSN           QPAttrMask = 1 << 16
	QPAttrMaxDestRdAtomic QPAttrMask = 1 << 17
	QPAttrDestQPN         QPAttrMask = 1 << 20
)

// QPAttr holds QP attributes (ibv_qp_attr).
type QPAttr struct {
	State           QPState
	CurState        QPState
	AccessFlags     Access // remote access the QP allows as a responder
	PKeyIndex       uint16
	Port            uint8
	AV              AddressVector
	PathMTU         MTU
	Timeout         uint8 // retransmit timeout 4.096 µs × 2^Timeout; 0 waits forever
	RetryCnt        uint8 // 0..7; 7 retries forever
	RNRRetry        uint8 // 0..7; 7 retries forever
	RQPSN           header.PSN
	SQPSN           header.PSN
	MaxRdAtomic     uint8 // READ/atomic requests in flight as requester
	MaxDestRdAtomic uint8 // READ/atomic responder resources
	MinRNRTimer     uint8 // RNR NAK timer code this QP sends
	DestQPN         uint32
	QKey            uint32 // UD: the Q_Key received packets must carry
}

// attrSetters copy one attribute each, selected by its mask bit.
var attrSetters = [...]struct {
	mask QPAttrMask
	set  func(dst, src *QPAttr)
}{
	{QPAttrAccessFlags, func(d, s *QPAttr) { d.AccessFlags = s.AccessFlags }},
	{QPAttrPKeyIndex, func(d, s *QPAttr) { d.PKeyIndex = s.PKeyIndex }},
	{QPAttrPort, func(d, s *QPAttr) { d.Port = s.Port }},
	{QPAttrAV, func(d, s *QPAttr) { d.AV = s.AV }},
	{QPAttrPathMTU, func(d, s *QPAttr) { d.PathMTU = s.PathMTU }},
	{QPAttrTimeout, func(d, s *QPAttr) { d.Timeout = s.Timeout }},
	{QPAttrRetryCnt, func(d, s *QPAttr) { d.RetryCnt = s.RetryCnt }},
	{QPAttrRNRRetry, func(d, s *QPAttr) { d.RNRRetry = s.RNRRetry }},
	{QPAttrRQPSN, func(d, s *QPAttr) { d.RQPSN = s.RQPSN & header.PSNMask }},
	{QPAttrSQPSN, func(d, s *QPAttr) { d.SQPSN = s.SQPSN & header.PSNMask }},
	{QPAttrMaxQPRdAtomic, func(d, s *QPAttr) { d.MaxRdAtomic = s.MaxRdAtomic }},
	{QPAttrMaxDestRdAtomic, func(d, s *QPAttr) { d.MaxDestRdAtomic = s.MaxDestRdAtomic }},
	{QPAttrMinRNRTimer, func(d, s *QPAttr) { d.MinRNRTimer = s.MinRNRTimer }},
	{QPAttrDestQPN, func(d, s *QPAttr) { d.DestQPN = s.DestQPN }},
	{QPAttrQKey, func(d, s *QPAttr) { d.QKey = s.QKey }},
}

// Merge copies the attributes of src that mask selects into a, as Modify
// records them (the state aside, which Modify moves itself): a QP's
// attributes as ibv_query_qp returns them.
func (a *QPAttr) Merge(src *QPAttr, mask QPAttrMask) {
	for _, s := range attrSetters {
		if mask&s.mask != 0 {
			s.set(a, src)
		}
	}
}

// QPType is a QP's transport service (ibv_qp_type). RC is the zero value.
type QPType uint8

// QP types.
const (
	QPTypeRC QPType = iota
	QPTypeUC
	QPTypeUD
	// QPTypeRawPacket sends whole Ethernet frames its user built and
	// receives the frames its flows steer to it (IBV_QPT_RAW_PACKET).
	QPTypeRawPacket
	// QPTypeXRCSend is an XRC initiator (IBV_QPT_XRC_SEND): a send queue
	// only, each request naming the responder's SRQ (SendWR.RemoteSRQN).
	QPTypeXRCSend
	// QPTypeXRCRecv is an XRC target (IBV_QPT_XRC_RECV): no queues of its
	// own; the requests it takes land in the XRC SRQs of its XRC domain.
	QPTypeXRCRecv
)

var qpTypeNames = [...]string{"RC", "UC", "UD", "RAW_PACKET", "XRC_SEND", "XRC_RECV"}

// Reliable reports whether QPs of type t are reliable connected: RC and
// the XRC initiator and target.
func (t QPType) Reliable() bool { return t == QPTypeRC || t == QPTypeXRCSend || t == QPTypeXRCRecv }

// IsXRC reports whether t is an XRC initiator or target.
func (t QPType) IsXRC() bool { return t == QPTypeXRCSend || t == QPTypeXRCRecv }

func (t QPType) String() string { return nameOf(qpTypeNames[:], t, "QPType") }

// QPCap are the queue sizes of a QP (ibv_qp_cap).
type QPCap struct {
	MaxSendWR, MaxRecvWR   int
	MaxSendSGE, MaxRecvSGE int
	MaxInlineData          int
}

// Limits of this implementation: what a device takes of a QP and a work
// request.
const (
	MaxQPWR     = 1 << 15
	MaxSGE      = 256
	MaxInline   = 4096
	MaxRdAtomic = 16
)
