package perftest

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/softnic/softnic/verbs"
)

// waitOne waits for one completion on cq.
func (r *runCtx) waitOne(cq *verbs.CQ, wc []verbs.WC, what string, done uint64) error {
	if _, err := SpinPoll(r.ctx, cq, wc[:1], r.pin); err != nil {
		return fmt.Errorf("poll %s CQ: %w", what, context.Cause(r.ctx))
	}
	if wc[0].Status != verbs.WCSuccess {
		return wcError(what, &wc[0], done)
	}
	r.progress.Add(1)
	return nil
}

// awaitWrite waits for the peer's RDMA WRITE that sets buf[at] to want. It
// reads the byte only once the region's remote-write sequence moved past
// *seen: the engine publishes the sequence after the bytes landed, so the
// read never races the transport (the peer writes again only after this
// side answered). It runs the device's engine between looks, yields the
// CPU when that found nothing, and gives up when ctx ends.
func (r *runCtx) awaitWrite(ctx context.Context, seen *uint64, buf []byte, at int, want byte) error {
	if r.dev.Verbs.Remote() {
		return r.awaitRemoteWrite(ctx, buf, at, want)
	}
	for i := 0; ; i++ {
		if s := r.mr.RemoteWriteSeq(); s != *seen {
			*seen = s
			if buf[at] == want {
				return nil
			}
			continue
		}
		if i&63 == 63 && ctx.Err() != nil {
			return ctx.Err()
		}
		// Run the engine here: the WRITE lands in this thread, with no
		// hand-off from the engine goroutine. Yield only when it had
		// nothing to do.
		if !r.dev.Verbs.Poll() {
			pollYield(r.pin)
		}
	}
}

// awaitRemoteWrite is awaitWrite on a device reached through the daemon,
// which writes buf from its own process: there is no sequence to watch, so
// it reads the byte itself, as perftest does, with an atomic load of its
// word (buf is 8-byte aligned).
func (r *runCtx) awaitRemoteWrite(ctx context.Context, buf []byte, at int, want byte) error {
	word := (*uint32)(unsafe.Pointer(&buf[at&^3]))
	var b [4]byte
	for i := 0; ; i++ {
		binary.NativeEndian.PutUint32(b[:], atomic.LoadUint32(word))
		if b[at&3] == want {
			return nil
		}
		if i&63 == 63 && ctx.Err() != nil {
			return ctx.Err()
		}
		pollYield(r.pin)
	}
}

// runLatWrite is run_iter_lat_write: each side RDMA-writes size bytes
// whose last byte is the iteration number, and waits for the peer's
// write to change the last byte of its own receive area. The client
// writes first.
func (r *runCtx) runLatWrite(size uint64) ([]int64, error) {
	p := r.p
	qp := r.qps[0]
	buf := r.mr.Bytes()
	postAt := int(r.sendArea(0) + size - 1)
	pollAt := int(r.recvArea(0) + size - 1)
	if pollAt >= len(buf) || postAt < 0 {
		return nil, fmt.Errorf("message size %d does not fit the buffer", size)
	}
	posted := make([]int64, p.Iters)
	sge := make([]verbs.SGE, 1)
	var wr verbs.SendWR
	wc := make([]verbs.WC, 1)
	start := time.Now()
	var scnt, rcnt, ccnt, seen uint64
	for scnt < p.Iters || ccnt < p.Iters || rcnt < p.Iters {
		if rcnt < p.Iters && !(scnt < 1 && p.Server) {
			rcnt++
			if err := r.awaitWrite(r.ctx, &seen, buf, pollAt, byte(rcnt)); err != nil {
				return nil, context.Cause(r.ctx)
			}
			r.progress.Add(1)
		}
		if scnt < p.Iters {
			posted[scnt] = int64(time.Since(start))
			scnt++
			buf[postAt] = byte(scnt)
			r.sendWR(&wr, sge, 0, 0, size)
			wr.Flags |= verbs.SendSignaled
			if err := r.postWait(qp, &wr); err != nil {
				return nil, err
			}
		}
		if ccnt < p.Iters {
			if err := r.waitOne(r.scq, wc, "send", ccnt); err != nil {
				return nil, err
			}
			ccnt++
		}
	}
	return posted, nil
}

// runLatRead is run_iter_lat for READ: one signaled read at a time.
func (r *runCtx) runLatRead(size uint64) ([]int64, error) {
	qp := r.qps[0]
	posted := make([]int64, r.p.Iters)
	sge := make([]verbs.SGE, 1)
	var wr verbs.SendWR
	wc := make([]verbs.WC, 1)
	start := time.Now()
	for k := uint64(0); k < r.p.Iters; k++ {
		r.sendWR(&wr, sge, 0, 0, size)
		wr.Flags |= verbs.SendSignaled
		posted[k] = int64(time.Since(start))
		if err := r.postWait(qp, &wr); err != nil {
			return nil, err
		}
		if err := r.waitOne(r.scq, wc, "send", k); err != nil {
			return nil, err
		}
	}
	return posted, nil
}

// runLatSend is run_iter_lat_send: wait for the peer's message (the
// client sends first), repost the receive, send, and wait for the send's
// completion when it is signaled (every CQMod-th and the last).
func (r *runCtx) runLatSend(size uint64) ([]int64, error) {
	p := r.p
	posted := make([]int64, p.Iters)
	b := newLatBufs()
	cqMod := uint64(max(p.CQMod, 1))
	start := time.Now()
	var scnt, rcnt uint64
	rposted := r.recvsPosted()
	for scnt < p.Iters || rcnt < p.Iters {
		if rcnt < p.Iters && !(scnt < 1 && !p.Server) {
			if err := r.waitOne(r.rcq, b.wc, "receive", rcnt); err != nil {
				return nil, err
			}
			rcnt++
			if rposted[0] < p.Iters {
				if err := r.repost(0, rposted, size, b.rsge); err != nil {
					return nil, err
				}
			}
		}
		if scnt < p.Iters {
			posted[scnt] = int64(time.Since(start))
			scnt++
			signaled := scnt%cqMod == 0 || scnt == p.Iters
			if err := r.postLatSend(&b.wr, b.sge, size, signaled); err != nil {
				return nil, err
			}
			if signaled {
				if err := r.waitOne(r.scq, b.wc, "send", scnt); err != nil {
					return nil, err
				}
			}
		}
	}
	return posted, nil
}

// postLatSend posts the send of a send_lat iteration on the QP,
// signaled or not.
func (r *runCtx) postLatSend(wr *verbs.SendWR, sge []verbs.SGE, size uint64, signaled bool) error {
	r.sendWR(wr, sge, 0, 0, size)
	if signaled {
		wr.Flags |= verbs.SendSignaled
	}
	return r.postWait(r.qps[0], wr)
}

// latBufs are the work request, scatter lists and completion slot a
// latency loop reuses in every iteration.
type latBufs struct {
	wr   verbs.SendWR
	sge  []verbs.SGE // the send's
	rsge []verbs.SGE // the receives'
	wc   []verbs.WC
}

func newLatBufs() *latBufs {
	return &latBufs{sge: make([]verbs.SGE, 1), rsge: make([]verbs.SGE, 1), wc: make([]verbs.WC, 1)}
}
