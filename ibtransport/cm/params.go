package cm

import (
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// REQParams are what the active side asks for (Linux ib_cm_req_param with
// its primary path).
type REQParams struct {
	Peer              ibv.AddressVector // the peer's QP1, also the connection's path
	LocalGID, PeerGID ibv.GID           // primary path SGID and DGID
	ServiceID         uint64
	LocalQPN          uint32
	StartingPSN       uint32 // the first PSN our receive queue expects
	// ResponderResources: RDMA READs and atomics we accept at once;
	// InitiatorDepth: those we issue at once.
	ResponderResources, InitiatorDepth uint8
	PathMTU                            ibv.MTU
	RetryCount, RNRRetryCount          uint8  // 3 bits each; RNR 7 = forever
	Transport                          uint8  // mad.TransportRC, mad.TransportUC or mad.TransportXRC
	PKey                               uint16 // zero: 0xffff
	SRQ                                bool
	// PrivateData, rdma_cm header included; at most mad.REQPrivateDataLen.
	PrivateData []byte

	// Primary path GRH fields.
	TrafficClass, HopLimit uint8
	FlowLabel              uint32

	// Timing exponents (4.096 µs × 2^t) and retries; zero takes the
	// Config's value, which defaults to Linux's.
	PacketLifeTime          uint8
	LocalCMResponseTimeout  uint8 // how long we take to answer the REP
	RemoteCMResponseTimeout uint8 // how long the peer may take to answer the REQ
	MaxCMRetries            uint8
}

// REPParams are the passive side's answer (Linux ib_cm_rep_param).
type REPParams struct {
	LocalQPN    uint32
	StartingPSN uint32 // the first PSN our receive queue expects
	// ResponderResources: RDMA READs and atomics we accept at once;
	// InitiatorDepth: those we issue at once.
	ResponderResources, InitiatorDepth uint8
	FailoverAccepted                   uint8 // 0: accepted (2 bits)
	RNRRetryCount                      uint8 // the one the active side is to use
	EndToEndFlowControl, SRQ           bool
	// PrivateData, at most mad.REPPrivateDataLen.
	PrivateData []byte
}

// check refuses what cannot go into a REQ.
func (p *REQParams) check() error {
	switch {
	case p.Transport != mad.TransportRC && p.Transport != mad.TransportUC && p.Transport != mad.TransportXRC,
		p.PathMTU < ibv.MTU256 || p.PathMTU > ibv.MTU4096,
		len(p.PrivateData) > mad.REQPrivateDataLen,
		p.LocalQPN >= 1<<24, p.StartingPSN >= 1<<24,
		p.RetryCount > 7, p.RNRRetryCount > 7, p.MaxCMRetries > 15,
		p.FlowLabel >= 1<<20,
		p.PacketLifeTime > 31, p.LocalCMResponseTimeout > 31,
		p.RemoteCMResponseTimeout > 31:
		return ErrParams
	}
	return nil
}

// check refuses what cannot go into a REP.
func (p *REPParams) check() error {
	if len(p.PrivateData) > mad.REPPrivateDataLen || p.LocalQPN >= 1<<24 ||
		p.StartingPSN >= 1<<24 || p.RNRRetryCount > 7 || p.FailoverAccepted > 3 {
		return ErrParams
	}
	return nil
}

// withDefaults fills the zero timing fields from the Config.
func (p REQParams) withDefaults(cfg *Config) REQParams {
	if p.PacketLifeTime == 0 {
		p.PacketLifeTime = cfg.PacketLifeTime
	}
	if p.LocalCMResponseTimeout == 0 {
		p.LocalCMResponseTimeout = cfg.CMResponseTimeout
	}
	if p.RemoteCMResponseTimeout == 0 {
		p.RemoteCMResponseTimeout = cfg.CMResponseTimeout
	}
	if p.MaxCMRetries == 0 {
		p.MaxCMRetries = cfg.MaxCMRetries
	}
	if p.PKey == 0 {
		p.PKey = mad.GSIPKey
	}
	return p
}

// ackTimeout is the QP's local ACK timeout for a path of packet lifetime
// plt on a device of ACK delay ackDelay: the round trip, 2 × plt (one more
// in the exponent), made no shorter than the device's delay, as IBA 12.7.34
// asks and cm.c's cm_ack_timeout computes.
func ackTimeout(ackDelay, plt uint8) uint8 {
	t := plt + 1
	if t >= ackDelay {
		if ackDelay >= t-1 {
			t++
		}
	} else {
		t = ackDelay
		if plt+1 >= ackDelay-1 {
			t++
		}
	}
	return min(t, 31)
}
