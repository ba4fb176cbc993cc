package cm

import (
	"encoding/binary"

	"github.com/softnic/softnic/ibtransport/mad"
)

// The builders below make each message the way cm.c's cm_format_* do. Each
// returns a fresh MAD: sent messages are kept for resending and never
// changed. Private data lengths were checked by the callers, so the
// setters' errors cannot happen.

func newMAD(attr mad.AttrID, tid uint64) mad.MAD {
	m := mad.MAD(make([]byte, mad.Len))
	m.InitCM(attr, tid)
	return m
}

// buildREQ makes the active side's REQ; RoCE has no LIDs, so both are the
// permissive LID, and no alternate path.
func (m *Manager) buildREQ(c *Conn, p *REQParams) mad.MAD {
	msg := newMAD(mad.AttrREQ, c.tid)
	r := mad.REQ(msg)
	r.SetLocalCommID(c.localID)
	r.SetServiceID(p.ServiceID)
	r.SetLocalCAGUID(m.cfg.CAGUID)
	r.SetLocalQPN(p.LocalQPN)
	r.SetResponderResources(p.ResponderResources)
	r.SetInitiatorDepth(p.InitiatorDepth)
	r.SetRemoteCMResponseTimeout(p.RemoteCMResponseTimeout)
	r.SetTransportServiceType(p.Transport)
	if p.Transport == mad.TransportXRC {
		r.SetExtendedTransportType(mad.ExtendedTransportXRC)
	}
	r.SetStartingPSN(p.StartingPSN)
	r.SetLocalCMResponseTimeout(p.LocalCMResponseTimeout)
	r.SetRetryCount(p.RetryCount)
	r.SetPKey(p.PKey)
	r.SetPathMTU(p.PathMTU)
	r.SetRNRRetryCount(p.RNRRetryCount)
	r.SetMaxCMRetries(p.MaxCMRetries)
	r.SetSRQ(p.SRQ)
	path := r.PrimaryPath()
	path.SetLocalLID(0xffff)
	path.SetRemoteLID(0xffff)
	path.SetLocalGID(p.LocalGID)
	path.SetRemoteGID(p.PeerGID)
	path.SetFlowLabel(p.FlowLabel)
	path.SetTrafficClass(p.TrafficClass)
	path.SetHopLimit(p.HopLimit)
	path.SetSubnetLocal(p.HopLimit <= 1)
	path.SetLocalACKTimeout(ackTimeout(m.cfg.ACKDelay, p.PacketLifeTime))
	_ = r.SetPrivateData(p.PrivateData)
	return msg
}

// buildREP makes the passive side's REP, carrying the REQ's transaction ID.
func (m *Manager) buildREP(c *Conn, p *REPParams) mad.MAD {
	msg := newMAD(mad.AttrREP, c.tid)
	r := mad.REP(msg)
	r.SetLocalCommID(c.localID)
	r.SetRemoteCommID(c.remoteID)
	r.SetLocalQPN(p.LocalQPN)
	r.SetStartingPSN(p.StartingPSN)
	r.SetResponderResources(p.ResponderResources)
	r.SetInitiatorDepth(p.InitiatorDepth)
	r.SetTargetACKDelay(m.cfg.ACKDelay)
	r.SetFailoverAccepted(p.FailoverAccepted)
	r.SetEndToEndFlowControl(p.EndToEndFlowControl)
	r.SetRNRRetryCount(p.RNRRetryCount)
	r.SetSRQ(p.SRQ)
	r.SetLocalCAGUID(m.cfg.CAGUID)
	_ = r.SetPrivateData(p.PrivateData)
	return msg
}

func (m *Manager) buildRTU(c *Conn, privateData []byte) mad.MAD {
	msg := newMAD(mad.AttrRTU, c.tid)
	r := mad.RTU(msg)
	r.SetLocalCommID(c.localID)
	r.SetRemoteCommID(c.remoteID)
	_ = r.SetPrivateData(privateData)
	return msg
}

func (m *Manager) buildMRA(c *Conn, what, serviceTimeout uint8, privateData []byte) mad.MAD {
	msg := newMAD(mad.AttrMRA, c.tid)
	r := mad.MRA(msg)
	r.SetLocalCommID(c.localID)
	r.SetRemoteCommID(c.remoteID)
	r.SetMessageMRAed(what)
	r.SetServiceTimeout(serviceTimeout)
	_ = r.SetPrivateData(privateData)
	return msg
}

// buildREJ rejects c's current message. As cm.c's cm_format_rej, a REJ of a
// REQ not yet MRAed carries no local ID of ours.
func (m *Manager) buildREJ(c *Conn, reason mad.RejectReason, ari, privateData []byte) mad.MAD {
	msg := newMAD(mad.AttrREJ, c.tid)
	r := mad.REJ(msg)
	r.SetLocalCommID(c.localID)
	r.SetRemoteCommID(c.remoteID)
	switch c.state {
	case StateREQRcvd:
		r.SetLocalCommID(0)
		r.SetMessageRejected(mad.MsgREQ)
	case StateMRAREQSent:
		r.SetMessageRejected(mad.MsgREQ)
	case StateREPRcvd, StateMRAREPSent:
		r.SetMessageRejected(mad.MsgREP)
	default:
		r.SetMessageRejected(mad.MsgOther)
	}
	r.SetReason(reason)
	_ = r.SetARI(ari)
	_ = r.SetPrivateData(privateData)
	return msg
}

// buildDREQ makes a DREQ with a transaction ID of its own.
func (m *Manager) buildDREQ(c *Conn, privateData []byte) mad.MAD {
	msg := newMAD(mad.AttrDREQ, m.tid(c.localID))
	r := mad.DREQ(msg)
	r.SetLocalCommID(c.localID)
	r.SetRemoteCommID(c.remoteID)
	r.SetRemoteQPN(c.remoteQPN)
	_ = r.SetPrivateData(privateData)
	return msg
}

// buildDREP answers a DREQ of transaction tid; the IDs are ours and the
// peer's, as the DREQ named them the other way round.
func buildDREP(tid uint64, local, remote uint32) mad.MAD {
	msg := newMAD(mad.AttrDREP, tid)
	r := mad.DREP(msg)
	r.SetLocalCommID(local)
	r.SetRemoteCommID(remote)
	return msg
}

// rejectUnknownREQ answers a REQ no connection exists for, as cm.c's
// cm_issue_rej: the IDs swapped from the REQ's, its transaction ID.
func rejectUnknownREQ(req mad.REQ, reason mad.RejectReason) mad.MAD {
	msg := newMAD(mad.AttrREJ, mad.MAD(req).Header().TID())
	r := mad.REJ(msg)
	r.SetRemoteCommID(req.LocalCommID())
	r.SetMessageRejected(mad.MsgREQ)
	r.SetReason(reason)
	return msg
}

func guidBytes(g uint64) [8]byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], g)
	return b
}
