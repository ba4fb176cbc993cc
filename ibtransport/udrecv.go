package ibtransport

import (
	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// udReceiver is the receive side of UD QPs, one per engine: it checks a
// datagram against its QP, fills the next receive with the GRH and the
// payload, and completes it. It has no per-QP state: every datagram is a
// whole message.
type udReceiver struct {
	e   *Engine
	grh [ibv.GRHLen]byte // scratch
}

// receive handles a UD packet for q, an engine's UD QP in a state that
// receives (Engine.receive checked both).
func (u *udReceiver) receive(q *QP, p *header.Packet, info *RecvInfo) {
	e := u.e
	if p.DETH.QKey() != q.attr.QKey {
		inc(&e.Ctr.RxBadQKey)
		return
	}
	r := &q.resp
	if !r.takeRecv() {
		// UD has no RNR NAK: the datagram is lost.
		inc(&e.Ctr.RxNoRecv)
		return
	}
	st := r.recvBad
	if st == ibv.WCSuccess && uint64(ibv.GRHLen+len(p.Payload)) > r.recvCap {
		// Like rxe: the receive completes in error and the QP goes on
		// (class D; with an SRQ, class E).
		st = ibv.WCLocLenErr
		if q.srq != nil {
			st = ibv.WCRemInvReqErr
		}
	}
	var net ibv.NetworkType
	if st == ibv.WCSuccess {
		net = u.fillGRH(info)
		if st = r.scatterRecv(u.grh[:]); st == ibv.WCSuccess {
			st = r.scatterRecv(p.Payload)
		}
	}
	u.complete(q, p, net, st)
}

// fillGRH writes the GRH of a received datagram into u.grh as rxe and
// mlx5 do: an IPv6 header as it came, or an IPv4 header in the last 20
// bytes after 20 zero bytes. It returns which of the two it was.
func (u *udReceiver) fillGRH(info *RecvInfo) ibv.NetworkType {
	clear(u.grh[:])
	h := info.NetHeader
	if len(h) >= ibv.GRHLen {
		copy(u.grh[:], h)
		return ibv.NetworkIPv6
	}
	copy(u.grh[ibv.GRHLen-20:], h)
	return ibv.NetworkIPv4
}

// complete completes the receive the datagram filled, with status st; net
// is the network header's type fillGRH returned when st is WCSuccess.
func (u *udReceiver) complete(q *QP, p *header.Packet, net ibv.NetworkType, st ibv.WCStatus) {
	r := &q.resp
	wc := ibv.WC{WRID: r.recv.id, Status: st, Opcode: ibv.WCRecv, QPN: q.qpn}
	if st == ibv.WCSuccess {
		inc(&q.e.Ctr.RdmaRecvs)
		inc(&q.ctr.RdmaRecvs)
		wc.ByteLen = uint32(ibv.GRHLen + len(p.Payload))
		wc.SrcQP = p.DETH.SrcQP()
		wc.Flags = ibv.WCWithGRH
		// PKeyIndex stays 0, the index of the datagram's P_Key: the
		// table's one entry, the default partition (Engine.receive
		// dropped any other), whatever index the QP was given.
		wc.NetworkHdrType = net
		wc.SL = net.RoCEPacketType()
		if p.ImmDt != nil {
			wc.Flags |= ibv.WCWithImm
			wc.Imm = p.ImmDt.Imm()
		}
	}
	r.recvActive = false
	q.complete(q.recvCQ, wc, st == ibv.WCSuccess && p.BTH.SolicitedEvent())
}
