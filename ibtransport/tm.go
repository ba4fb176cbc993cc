package ibtransport

import (
	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// TagMatchingSRQ is a tag matching SRQ (IBV_SRQT_TM) as the engine sees it:
// besides its ordinary receives, which take the unexpected and untagged
// messages, a list of tagged buffers, each taken by the first tagged SEND
// whose tag it matches (rdma-core Documentation/tag_matching.md).
type TagMatchingSRQ interface {
	SharedRecvQueue
	// MatchTag removes the oldest enabled entry of the list that tag
	// matches and returns its receive ID and buffer, which the caller then
	// owns; ok is false when none does.
	MatchTag(tag uint64) (wrID uint64, sgl []ibv.SGE, ok bool)
	// Unexpected counts a tagged message that matched no entry: tag
	// matching stays off for entries added after it until the owner
	// reports it has seen it (a SYNC).
	Unexpected()
	// CQ is the SRQ's CQ, which takes its QPs' receive completions.
	CQ() CompletionQueue
}

// sendTMInternal marks a send WQE that the responder of a QP on a TM SRQ
// posted for a rendezvous (the READ of the sender's data, the FIN after
// it): it completes into tmState, never to the send CQ. Posters' flags
// never carry it (postSendLocked clears it).
const sendTMInternal ibv.SendFlags = 1 << 7

// tmSQReserve is the room a QP on a TM SRQ has in its send queue beyond
// what its owner asked, for the rendezvous READs and FINs (two each), as
// a TM SRQ takes over its QPs' send queues on ConnectX.
const tmSQReserve = 16

// finLen is a FIN message's length: the request's TMH and RVH.
const finLen = header.TMHLen + header.RVHLen

// tmState is a QP's tag matching state, for a QP on a TM SRQ only.
type tmState struct {
	srq TagMatchingSRQ
	// The message being received: its completion's opcode and flags, and
	// for a matched one its tag and app_ctx; skip is the bytes of the
	// first packet the buffer does not take (the TMH of a matched EAGER).
	op    ibv.WCOpcode
	flags ibv.WCFlags
	tag   uint64
	priv  uint32
	skip  int
	// A matched rendezvous request: its headers, kept until the message's
	// last packet, when the READ is posted; discard drops the message's
	// payload, which the buffer does not take.
	rndv    bool
	discard bool
	hdr     [finLen]byte
	// rndvs are the rendezvous READs posted and not yet completed, in
	// send queue order.
	rndvs []tmRndv
}

// tmRndv is a rendezvous in progress: its tagged buffer's completion.
type tmRndv struct {
	wrID   uint64
	length uint32
}

// startTM begins a SEND on a QP of a TM SRQ: it reads the TM header of the
// message's first packet and takes a tagged buffer it matches, or an
// ordinary receive. A payload that holds no TM header goes to an ordinary
// receive whole, as IBV_WC_RECV: the peer did not speak tag matching.
func (r *responder) startTM(p *header.Packet, psn header.PSN) bool {
	t := r.tm
	t.op, t.flags, t.tag, t.priv, t.skip, t.rndv, t.discard = ibv.WCRecv, 0, 0, 0, 0, false, false
	h, ok := header.ParseTMH(p.Payload)
	if ok {
		switch h.Opcode() {
		case header.TMNoTag:
			t.op = ibv.WCTMNoTag
		case header.TMEager, header.TMRndv:
			if h.Opcode() == header.TMRndv && !r.qp.sqRoom(2) {
				r.rnrNAK(psn) // the READ and FIN need send queue room
				return false
			}
			if r.matchTM(h, p.Payload) {
				return true
			}
			t.srq.Unexpected()
			t.op = ibv.WCTMRecv
		}
	}
	return r.checkResource(psn)
}

// matchTM takes the tagged buffer h's tag matches, if any, as the active
// receive.
func (r *responder) matchTM(h header.TMH, payload []byte) bool {
	t := r.tm
	id, sgl, ok := t.srq.MatchTag(h.Tag())
	if !ok {
		return false
	}
	t.op, t.tag, t.priv = ibv.WCTMRecv, h.Tag(), h.AppCtx()
	if h.Opcode() == header.TMRndv {
		t.flags, t.rndv, t.discard = ibv.WCTMMatch, true, true
		copy(t.hdr[:], payload[:finLen])
	} else {
		t.flags, t.skip = ibv.WCTMMatch|ibv.WCTMDataValid, header.TMHLen
	}
	r.useRecv(id, sgl)
	return true
}

// tmPayload returns the part of a packet's payload the active receive
// takes.
func (r *responder) tmPayload(p *header.Packet) []byte {
	t := r.tm
	if t == nil {
		return p.Payload
	}
	if t.discard {
		return nil
	}
	b := p.Payload[min(t.skip, len(p.Payload)):]
	t.skip = 0
	return b
}

// finishTM completes a SEND's receive on a TM SRQ's QP; for a matched
// rendezvous request it posts the READ and the FIN.
func (r *responder) finishTM(p *header.Packet, flags ibv.WCFlags, imm, inv uint32) {
	t := r.tm
	if t.rndv {
		r.startRndv(p)
		return
	}
	wc := r.recvWC(ibv.WCSuccess, t.op, r.recvOff)
	wc.Flags, wc.TMTag, wc.TMPriv = t.flags|flags, t.tag, t.priv
	wc.Imm, wc.InvalidatedRKey = imm, inv
	r.pushRecvWC(wc, p.BTH.SolicitedEvent())
}

// startRndv answers a matched rendezvous request: a MATCH completion now,
// then the READ of the sender's data into the tagged buffer and the FIN
// that tells the sender it is done; the buffer's DATA_VALID completion
// comes with the READ's (tmRetired). A buffer too small for the data, or
// a send queue that filled since the request began, gets the request's
// headers instead and IBV_WC_TM_RNDV_INCOMPLETE, as ConnectX gives them,
// for the program to finish the rendezvous itself.
func (r *responder) startRndv(p *header.Packet) {
	t := r.tm
	rvh := header.RVH(t.hdr[header.TMHLen:])
	wc := r.recvWC(ibv.WCSuccess, ibv.WCTMRecv, 0)
	wc.Flags, wc.TMTag, wc.TMPriv = ibv.WCTMMatch, t.tag, t.priv
	if uint64(rvh.Length()) > r.recvCap || !r.qp.sqRoom(2) {
		wc.Status, wc.Flags = ibv.WCTMRndvIncomplete, ibv.WCTMMatch|ibv.WCTMDataValid
		t.discard = false
		if st := r.scatterRecv(t.hdr[:]); st != ibv.WCSuccess {
			wc.Status = st
		}
		wc.ByteLen = r.recvOff
		r.pushRecvWC(wc, p.BTH.SolicitedEvent())
		return
	}
	sgl := append([]ibv.SGE(nil), r.recv.sge...)
	r.pushRecvWC(wc, p.BTH.SolicitedEvent())
	t.rndvs = append(t.rndvs, tmRndv{wrID: wc.WRID, length: rvh.Length()})
	fin := t.hdr
	header.TMH(fin[:header.TMHLen]).SetOpcode(header.TMFin)
	r.qp.postRndv(sgl, rvh, fin[:])
}

// pushRecvWC completes the active receive with wc.
func (r *responder) pushRecvWC(wc ibv.WC, solicited bool) {
	r.recvActive = false
	inc(&r.qp.e.Ctr.RdmaRecvs)
	inc(&r.qp.ctr.RdmaRecvs)
	r.qp.complete(r.recvCQ(), wc, solicited)
}

// recvCQ is where the QP's receive completions go: a TM SRQ's own CQ, or
// the QP's receive CQ.
func (r *responder) recvCQ() CompletionQueue {
	if r.tm != nil {
		return r.tm.srq.CQ()
	}
	return r.qp.recvCQ
}

// sqRoom reports whether the send queue has n free slots; on the engine
// goroutine.
func (q *QP) sqRoom(n uint32) bool {
	return q.sq.tail.Load()-q.sq.head.Load()+n <= uint32(len(q.sq.slots))
}

// postRndv posts a rendezvous's READ into sgl and its FIN, marked
// internal; the caller checked the room (sqRoom).
func (q *QP) postRndv(sgl []ibv.SGE, rvh header.RVH, fin []byte) {
	sq := &q.sq
	read := ibv.SendWR{Opcode: ibv.WRRDMARead, RemoteAddr: rvh.VA(), RKey: rvh.RKey(), SGL: trimSGL(sgl, rvh.Length())}
	// The FIN waits for the READ's completion (fenced): the sender may
	// reuse its buffer once the FIN is in, so the data must be out first.
	send := ibv.SendWR{Opcode: ibv.WRSend, Flags: ibv.SendInline | ibv.SendFence, InlineData: fin}
	sq.mu.Lock()
	for _, wr := range []*ibv.SendWR{&read, &send} {
		t := sq.tail.Load()
		i := t & sq.mask
		s := &sq.slots[i]
		*s = sendWQE{id: 0, remoteAddr: wr.RemoteAddr, rkey: wr.RKey, opcode: wr.Opcode, flags: wr.Flags | sendTMInternal}
		s.length = uint32(sq.copyData(i, s, wr))
		if m := q.mirrors.Load(); m != nil && m.sq != nil {
			m.sq.skipped.Add(^uint32(0)) // the owner's ring never held it
		}
		sq.tail.Store(t + 1)
	}
	sq.mu.Unlock()
	q.home.Load().kick(q)
}

// trimSGL returns the first n bytes of sgl.
func trimSGL(sgl []ibv.SGE, n uint32) []ibv.SGE {
	out := sgl[:0:0]
	for _, s := range sgl {
		if n == 0 {
			break
		}
		s.Length = min(s.Length, n)
		n -= s.Length
		out = append(out, s)
	}
	return out
}

// tmRetired completes an internal WQE the completer retired with st: a
// rendezvous READ gives its tagged buffer's DATA_VALID completion (or its
// error); a FIN completes nothing.
func (q *QP) tmRetired(op ibv.WROpcode, st ibv.WCStatus) {
	t := q.resp.tm
	if op != ibv.WRRDMARead || t == nil || len(t.rndvs) == 0 {
		return
	}
	rv := t.rndvs[0]
	t.rndvs = t.rndvs[1:]
	// As ConnectX's second completion (mlx5's TM_EXPECTED), it carries
	// no TM header: the MATCH completion gave the tag.
	wc := ibv.WC{WRID: rv.wrID, Status: st, Opcode: ibv.WCTMRecv, QPN: q.qpn, SrcQP: q.destQPN}
	if st == ibv.WCSuccess {
		wc.Flags, wc.ByteLen = ibv.WCTMDataValid, rv.length
	}
	q.complete(t.srq.CQ(), wc, false)
}
