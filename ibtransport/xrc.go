package ibtransport

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// XRC (eXtended Reliable Connected, the IBA XRC annex) is RC with the
// receive side split off: an initiator QP (QPTypeXRCSend) has a send
// queue only and names, in each request's XRCETH, the SRQ at the
// responder the request is for; a target QP (QPTypeXRCRecv) has no
// queues at all and delivers each request into that SRQ, which must
// belong to the target's XRC domain. An XRC SRQ brings what the target
// lacks: the receives, the CQ their completions go to, and the
// protection domain whose memory keys RDMA and atomics on the target
// are checked against. Both QPs are RC QPs otherwise (PSNs, ACKs,
// retries), with opcodes of prefix 0xA0.

// XRCSRQ is a shared receive queue of an XRC domain, as the engines see
// it (ibv_create_srq_ex with IBV_SRQT_XRC).
type XRCSRQ struct {
	// Domain names the XRC domain (any non-zero number the layer above
	// gives each domain, unique in the group).
	Domain uint32
	SRQ    SharedRecvQueue
	// CQ takes the completions of the SRQ's receives.
	CQ CompletionQueue
	// Memory resolves the keys of the SRQ's protection domain.
	Memory Memory
	num    uint32
}

// Num returns the SRQ's number (ibv_get_srq_num), which initiators put
// in their requests' XRCETH.
func (x *XRCSRQ) Num() uint32 { return x.num }

// AddXRCSRQ numbers x and makes it reachable by XRC targets of its
// domain. Its receives are taken by the group's first engine, where
// every XRC target lives.
func (g *Group) AddXRCSRQ(x *XRCSRQ) error {
	if x.Domain == 0 || x.SRQ == nil || x.CQ == nil || x.Memory == nil {
		return fmt.Errorf("create XRC SRQ: domain, SRQ, CQ and memory are required: %w", ibv.ErrInvalidArgument)
	}
	return g.Do(func() error {
		for range header.PSNMask {
			g.nextSRQN = (g.nextSRQN + 1) & header.PSNMask
			if g.nextSRQN != 0 && g.xrcSRQs[g.nextSRQN] == nil {
				x.num = g.nextSRQN
				g.xrcSRQs[x.num] = x
				g.srqEngine[x.SRQ] = g.engines[0]
				return nil
			}
		}
		return fmt.Errorf("create XRC SRQ: no free SRQ number: %w", ibv.ErrBusy)
	})
}

// RemoveXRCSRQ makes x unreachable: requests that name it are refused
// from now on. A target in the middle of a message into it completes the
// receive it was filling (flushed) and lets go of the SRQ, its CQ and its
// memory, which may go next; the message's next packet is out of
// sequence (NAK).
func (g *Group) RemoveXRCSRQ(x *XRCSRQ) {
	_ = g.Do(func() error {
		if g.xrcSRQs[x.num] != x {
			return nil
		}
		delete(g.xrcSRQs, x.num)
		delete(g.srqEngine, x.SRQ)
		for _, q := range g.qps {
			if q.typ == ibv.QPTypeXRCRecv && q.srq == x.SRQ {
				q.unbindXRC()
			}
		}
		return nil
	})
}

// unbindXRC lets go of the SRQ an XRC target took its last request's
// receive from. Called under Do.
func (q *QP) unbindXRC() {
	r := &q.resp
	if r.recvActive {
		r.completeRecv(ibv.WCWRFlushErr, 0)
	}
	r.mode = modeIdle
	r.wMR = nil
	q.srq, q.srqRQ, q.recvCQ, q.mem = nil, nil, nil, nil
}

// wireTransport is the transport of the packets a QP of type t sends and
// takes.
func wireTransport(t ibv.QPType) header.Transport {
	switch t {
	case ibv.QPTypeUC:
		return header.TransportUC
	case ibv.QPTypeUD:
		return header.TransportUD
	case ibv.QPTypeXRCSend, ibv.QPTypeXRCRecv:
		return header.TransportXRC
	}
	return header.TransportRC
}

// opBase is added to RC opcodes to make the QP's: XRC's prefix 0xA0.
func (q *QP) opBase() header.Opcode {
	if q.typ.IsXRC() {
		return header.XRCOpcodeBase
	}
	return 0
}

// xrcTransitions derive from RC's the kernel's rules for the initiator
// (no responder resources or RNR timer to set at RTR) and the target
// (only the timeout and send PSN required at RTS, nothing to retry).
var xrcSendTransitions, xrcRecvTransitions = xrcTables()

func xrcTables() (send, recv map[[2]ibv.QPState]transition) {
	send, recv = map[[2]ibv.QPState]transition{}, map[[2]ibv.QPState]transition{}
	rtr, rts := [2]ibv.QPState{ibv.QPSInit, ibv.QPSRTR}, [2]ibv.QPState{ibv.QPSRTR, ibv.QPSRTS}
	for k, t := range transitions {
		send[k], recv[k] = t, t
	}
	moved := ibv.QPAttrMaxDestRdAtomic | ibv.QPAttrMinRNRTimer
	send[rtr] = transition{transitions[rtr].required &^ moved, transitions[rtr].optional | moved}
	moved = ibv.QPAttrRetryCnt | ibv.QPAttrRNRRetry | ibv.QPAttrMaxQPRdAtomic
	recv[rts] = transition{transitions[rts].required &^ moved, transitions[rts].optional | moved}
	return send, recv
}

// checkXRCConfig checks what an XRC QP of init asks for: an initiator
// needs memory and a send CQ and has no receive queue; a target needs its
// domain and has no queues.
func checkXRCConfig(init *QPConfig) error {
	switch {
	case init.Type == ibv.QPTypeXRCSend && (init.Memory == nil || init.SendCQ == nil):
		return fmt.Errorf("create XRC send QP: memory and a send CQ are required: %w", ibv.ErrInvalidArgument)
	case init.SRQ != nil || init.Cap.MaxRecvWR != 0:
		return fmt.Errorf("create %v QP: no receive queue or SRQ: %w", init.Type, ibv.ErrInvalidArgument)
	case init.Type == ibv.QPTypeXRCRecv && init.XRCDomain == 0:
		return fmt.Errorf("create XRC receive QP: an XRC domain is required: %w", ibv.ErrInvalidArgument)
	}
	return nil
}

// bindXRCTarget finds the SRQ the XRCETH of request p names, for an XRC
// target, and makes it the QP's for the packet: its receives, CQ and
// protection domain's memory stand in for the queues and PD a target
// lacks. A packet inside a SEND or WRITE keeps the SRQ its message
// started with. It reports false if the SRQ does not exist or belongs to
// another XRC domain, or a packet inside a message names another SRQ
// than its first.
func (r *responder) bindXRCTarget(p *header.Packet) bool {
	q := r.qp
	x := q.e.g.xrcSRQs[p.XRCETH.SRQN()]
	if x == nil || x.Domain != q.xrcd {
		inc(&q.e.Ctr.RxXRCDomainErr)
		return false
	}
	if r.mode != modeIdle && q.srq != nil {
		return x.SRQ == q.srq // a message keeps to one SRQ
	}
	q.srq, q.srqRQ, q.recvCQ, q.mem = x.SRQ, x.SRQ.RecvQueue(), x.CQ, x.Memory
	return true
}
