package ibtransport

import (
	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// The responder's side of IBTA 1.5's ATOMIC_WRITE and FLUSH, as Linux rxe
// has them since 6.2 (rxe_resp.c): both are answered by an RDMA READ
// RESPONSE ONLY without payload whose AETH acknowledges them, both take a
// responder resource so that a duplicate is answered again without being
// executed again, and both execute only after everything before them: the
// responder takes requests in PSN order, and SettleWrites lands the
// payloads of earlier WRITEs that wait in the deferred copies first.

// checkQPAccess refuses, with an invalid request NAK as rxe's
// check_op_valid does, a request the QP's access flags do not allow.
func (r *responder) checkQPAccess(psn header.PSN, a ibv.Access) bool {
	if r.qp.attr.AccessFlags&a != a {
		r.nakError(psn, header.NAKInvalidRequest, ibv.WCRemInvReqErr)
		return false
	}
	return true
}

// executeAtomicWrite stores the request's 8 bytes into the aligned word at
// the RETH's address, in a region granting remote write (as rxe asks; no
// atomic right is needed).
func (r *responder) executeAtomicWrite(p *header.Packet, psn header.PSN) {
	if !r.checkQPAccess(psn, ibv.AccessRemoteWrite) || !r.checkRdAtomic(psn) {
		return
	}
	va, rkey := p.RETH.VA(), p.RETH.RKey()
	if p.RETH.DMALength() != 8 || len(p.Payload) != 8 {
		r.nakError(psn, header.NAKInvalidRequest, ibv.WCRemInvReqErr)
		return
	}
	mr := r.qp.mem.RemoteRegion(r.qp, rkey, va, 8, ibv.AccessRemoteWrite)
	if mr == nil {
		r.nakError(psn, header.NAKRemoteAccessError, ibv.WCRemAccessErr)
		return
	}
	if va&7 != 0 {
		r.nakError(psn, header.NAKInvalidRequest, ibv.WCRemInvReqErr) // IBA A19.4.2
		return
	}
	var b [8]byte
	copy(b[:], p.Payload)
	r.qp.e.SettleWrites() // the word lands after every earlier WRITE's bytes
	if !mr.AtomicWrite(va, b) {
		r.nakError(psn, header.NAKRemoteAccessError, ibv.WCRemAccessErr)
		return
	}
	mr.RemoteWritten()
	r.acceptZeroRead(psn)
}

// executeFlush makes what earlier requests placed visible: once
// SettleWrites has run, every byte a peer wrote is in the region's memory,
// where the application and any other device see it (global placement).
// softnic's memory is not persistent: a persistent flush finds no region
// granting it and is NAKed, as rxe's is on memory that is not pmem.
func (r *responder) executeFlush(p *header.Packet, psn header.PSN) {
	t, level := p.FETH.PlacementType(), p.FETH.SelectivityLevel()
	var need ibv.Access
	if t&header.FlushGlobal != 0 {
		need |= ibv.AccessFlushGlobal
	}
	if t&header.FlushPersistent != 0 {
		need |= ibv.AccessFlushPersistent
	}
	if !r.checkQPAccess(psn, need) || r.jobsFull() {
		return
	}
	rkey, va, n := p.RETH.RKey(), p.RETH.VA(), p.RETH.DMALength()
	ok := false
	switch level {
	case header.FlushMR: // the whole region: no range to check
		ok = r.qp.mem.RemoteKeyGrants(rkey, need)
	case header.FlushRange:
		ok = n <= 1<<31 && r.qp.mem.RemoteRegion(r.qp, rkey, va, n, need) != nil
	}
	if !ok {
		r.nakError(psn, header.NAKRemoteAccessError, ibv.WCRemAccessErr)
		return
	}
	r.qp.e.SettleWrites()
	r.acceptZeroRead(psn)
}

// acceptZeroRead records the executed ATOMIC_WRITE or FLUSH at psn and
// queues its response.
func (r *responder) acceptZeroRead(psn header.PSN) {
	*r.allocResource() = resource{used: true, zeroRead: true, firstPSN: psn, lastPSN: psn}
	r.msn++
	r.advance(psn, 1)
	r.pushJob(zeroReadJob(psn, r.msn))
}

// replayZeroRead answers a duplicate ATOMIC_WRITE or FLUSH whose resource
// is still held; without one the duplicate is dropped (class D, as rxe).
func (r *responder) replayZeroRead(psn header.PSN) {
	if r.jobsFull() {
		return
	}
	for i := range r.res {
		res := &r.res[i]
		if res.used && res.zeroRead && res.firstPSN == psn {
			r.pushJob(zeroReadJob(psn, r.msn))
			return
		}
	}
}

// zeroReadJob is the response of an ATOMIC_WRITE or FLUSH: an RDMA READ
// RESPONSE ONLY of no bytes, with an ACK AETH.
func zeroReadJob(psn header.PSN, msn uint32) respJob {
	return respJob{kind: jobRead, psn: psn, msn: msn, first: true}
}
