package ibtransport

import (
	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

type jobKind uint8

const (
	jobAck jobKind = iota
	jobRead
	jobAtomic
	jobCancelled // a READ response a replay superseded: skipped
)

// respJob is a response waiting to be sent. Responses go out in PSN order,
// so an ACK never overtakes the READ responses before it.
type respJob struct {
	mr Region // read: the source
	// va is a READ's next source address. An atomic job keeps its
	// original value there instead (origData), which keeps the ring of
	// every idle QP small.
	va        uint64
	psn       header.PSN // (next) PSN to send
	msn       uint32
	remaining uint32
	kind      jobKind
	syn       header.Syndrome
	first     bool
}

// atomicJob returns the job of an atomic ACK carrying orig.
func atomicJob(psn header.PSN, msn uint32, orig uint64) respJob {
	return respJob{kind: jobAtomic, psn: psn, msn: msn, va: orig}
}

// origData returns an atomic job's original value.
func (j *respJob) origData() uint64 { return j.va }

func (r *responder) jobsFull() bool { return r.jobTail-r.jobHead >= uint32(len(r.jobs)) }

// pushJob queues j; the caller checked that the ring has room.
func (r *responder) pushJob(j respJob) {
	r.jobs[r.jobTail%uint32(len(r.jobs))] = j
	r.jobTail++
}

// queueAck queues an ACK or NAK; a plain ACK merges into an ACK already
// waiting at the tail, ACKs being cumulative.
func (r *responder) queueAck(syn header.Syndrome, psn header.PSN) {
	if syn.Kind() == header.SyndromeACK && r.jobTail != r.jobHead {
		j := &r.jobs[(r.jobTail-1)%uint32(len(r.jobs))]
		if j.kind == jobAck && j.syn.Kind() == header.SyndromeACK {
			j.psn, j.msn = psn, r.msn
			return
		}
	}
	if r.jobsFull() {
		return // the requester will time out and ask again
	}
	r.pushJob(respJob{kind: jobAck, syn: syn, psn: psn, msn: r.msn})
}

// nakError answers a request that cannot be executed with a NAK and moves
// the QP to ERR after it (IBA class B/C errors).
func (r *responder) nakError(psn header.PSN, code header.NAKCode, recvStatus ibv.WCStatus) {
	inc(&r.qp.e.Ctr.TxNAKError)
	if r.recvActive {
		r.completeRecv(recvStatus, 0)
	}
	r.jobTail = r.jobHead + min(r.jobTail-r.jobHead, uint32(len(r.jobs)-1))
	r.queueAck(header.NAKSyndrome(code), psn)
	r.errPending = true
}

func (r *responder) rnrNAK(psn header.PSN) {
	inc(&r.qp.e.Ctr.TxRNRNAK)
	inc(&r.qp.ctr.TxRNRNAK)
	r.nakSent = true // the retry after the RNR wait fills the gap
	r.queueAck(header.RNRNAKSyndrome(header.RNRTimer(r.qp.attr.MinRNRTimer)), psn)
}

// idle reports whether no response waits and no error is pending.
func (r *responder) idle() bool { return r.jobHead == r.jobTail && !r.errPending }

// sendResponses sends queued responses in order. It reports whether it
// stopped for the packet budget with responses left.
func (r *responder) sendResponses() bool {
	q := r.qp
	if q.path == nil {
		r.jobHead = r.jobTail
		return false
	}
	for budget := packetBudget; r.jobHead != r.jobTail; budget-- {
		if budget == 0 {
			return true
		}
		buf := q.path.Buffer()
		if buf == nil {
			return false
		}
		j := &r.jobs[r.jobHead%uint32(len(r.jobs))]
		if j.kind == jobCancelled {
			r.jobHead++
			continue
		}
		n, done, ok := r.buildResponse(buf, j)
		if !ok {
			// Deregistered while answering: stop; a retried READ will be
			// NAKed.
			r.jobHead++
			continue
		}
		q.path.Send(n)
		q.countSent(n)
		if done {
			r.jobHead++
		}
	}
	if r.errPending {
		q.fail()
	}
	return false
}

// buildResponse writes j's next packet into buf. done: it was j's last.
func (r *responder) buildResponse(buf []byte, j *respJob) (n int, done, ok bool) {
	p := &r.qp.e.tx
	switch j.kind {
	case jobAck:
		n, _ = header.LayoutPacket(buf, header.OpRCAcknowledge+r.qp.opBase(), 0, p)
		p.AETH.SetSyndrome(j.syn)
		p.AETH.SetMSN(j.msn)
	case jobAtomic:
		n, _ = header.LayoutPacket(buf, header.OpRCAtomicAcknowledge+r.qp.opBase(), 0, p)
		p.AETH.SetSyndrome(header.ACKSyndrome(header.UnlimitedCredits))
		p.AETH.SetMSN(j.msn)
		p.AtomicAckETH.SetOrigData(j.origData())
	case jobRead:
		return r.buildReadResponse(buf, j)
	}
	p.BTH.SetDestQPN(r.qp.destQPN)
	p.BTH.SetPSN(j.psn)
	return n, true, true
}

// buildReadResponse writes the next packet of a READ response and
// advances the job.
func (r *responder) buildReadResponse(buf []byte, j *respJob) (n int, done, ok bool) {
	q := r.qp
	p := &q.e.tx
	payload := min(j.remaining, q.mtu)
	last := j.remaining <= q.mtu
	op := header.OpRCReadResponseMiddle
	switch {
	case j.first && last:
		op = header.OpRCReadResponseOnly
	case j.first:
		op = header.OpRCReadResponseFirst
	case last:
		op = header.OpRCReadResponseLast
	}
	n, _ = header.LayoutPacket(buf, op+q.opBase(), int(payload), p)
	if p.AETH != nil {
		p.AETH.SetSyndrome(header.ACKSyndrome(header.UnlimitedCredits))
		p.AETH.SetMSN(j.msn)
	}
	if payload > 0 && !q.readPayload(j.mr, p.Payload[:payload], j.va) {
		return 0, false, false
	}
	p.BTH.SetDestQPN(q.destQPN)
	p.BTH.SetPSN(j.psn)
	j.va += uint64(payload)
	j.remaining -= payload
	j.psn = j.psn.Add(1)
	j.first = false
	return n, last, true
}
