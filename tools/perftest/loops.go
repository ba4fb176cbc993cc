package perftest

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/softnic/softnic/verbs"
)

// Values perftest's atomic work requests carry (perftest_resources.h).
const (
	atomicAddValue  = 1
	atomicSwapValue = 0
)

// offset returns where message k of size bytes goes within a QP's area:
// perftest steps by INC(size) and wraps at the cycle buffer when messages
// are at most half a cycle buffer (increase_loc_addr, increase_rem_addr),
// and otherwise always uses the area's start.
func (r *runCtx) offset(k uint64, size uint64) uint64 {
	if size > r.cycle/2 {
		return 0
	}
	step := inc(size, r.cacheLine)
	per := r.cycle / step
	if per == 0 {
		return 0
	}
	return (k % per) * step
}

// sendArea and recvArea are the offsets of QP q's areas in the buffer:
// perftest's send buffers come first, and the address a QP advertises is
// its receive area (set_up_connection).
func (r *runCtx) sendArea(q int) uint64 { return uint64(q) * r.area }
func (r *runCtx) recvArea(q int) uint64 { return uint64(len(r.qps)+q) * r.area }

// sendWR fills wr for message k of QP q.
func (r *runCtx) sendWR(wr *verbs.SendWR, sge []verbs.SGE, q int, k, size uint64) {
	off := r.offset(k, size)
	sge[0] = r.mr.SGE(int(r.sendArea(q)+off), int(size))
	*wr = verbs.SendWR{ID: uint64(q), SGL: sge}
	switch r.p.Verb() {
	case VerbSend:
		wr.Opcode = verbs.WRSend
	case VerbWrite:
		wr.Opcode = verbs.WRRDMAWrite
	case VerbRead:
		wr.Opcode = verbs.WRRDMARead
	case VerbAtomic:
		if r.p.Atomic == CmpAndSwap {
			wr.Opcode, wr.CompareAdd, wr.Swap = verbs.WRAtomicCmpAndSwp, 0, atomicSwapValue
		} else {
			wr.Opcode, wr.CompareAdd = verbs.WRAtomicFetchAndAdd, atomicAddValue
		}
	}
	if r.p.Verb() != VerbSend {
		wr.RemoteAddr, wr.RKey = r.remote[q].VAddr+off, r.remote[q].RKey
	}
	if r.p.InlineSize > 0 && size <= uint64(r.p.InlineSize) && (r.p.Verb() == VerbSend || r.p.Verb() == VerbWrite) {
		wr.Flags |= verbs.SendInline
		wr.InlineData = r.mr.Bytes()[r.sendArea(q)+off : r.sendArea(q)+off+size]
	}
}

// wcError reports a failed completion like NOTIFY_COMP_ERROR_SEND.
func wcError(what string, wc *verbs.WC, done uint64) error {
	return fmt.Errorf("%s completion with error: status %v, after %d completions", what, wc.Status, done)
}

// post posts wr, reporting whether the send queue had room.
func post(qp *verbs.QP, wr *verbs.SendWR) (bool, error) {
	if err := qp.PostSend(wr); err != nil {
		if errors.Is(err, verbs.ErrQueueFull) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// postWait posts wr, retrying while the send queue is full: the engine
// may publish a completion a moment before it frees the slot.
func (r *runCtx) postWait(qp *verbs.QP, wr *verbs.SendWR) error {
	for {
		ok, err := post(qp, wr)
		if ok || err != nil {
			return err
		}
		if r.ctx.Err() != nil {
			return context.Cause(r.ctx)
		}
		runtime.Gosched()
	}
}

// postRecvs posts RxDepth receives of size bytes on every QP
// (ctx_set_recv_wqes), stepping through the receive area.
func (r *runCtx) postRecvs(size uint64) error {
	sge := make([]verbs.SGE, 1)
	for q, qp := range r.qps {
		for k := 0; k < r.p.RxDepth; k++ {
			if err := r.postRecv(qp, q, uint64(k), size, sge); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *runCtx) postRecv(qp *verbs.QP, q int, k, size uint64, sge []verbs.SGE) error {
	sge[0] = r.mr.SGE(int(r.recvArea(q)+r.offset(k, size)), int(size))
	if err := qp.PostRecv(&verbs.RecvWR{ID: uint64(q), SGL: sge}); err != nil {
		return fmt.Errorf("post receive: %w", err)
	}
	return nil
}

// causeOf prefers the run context's cause (a stall) to err.
func causeOf(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}
