package ibtransport

import "github.com/softnic/softnic/ibtransport/ibv"

// Reaching another process's memory (a daemon client's region) costs a
// system call, whatever the size: one per packet halved the daemon's
// bandwidth. So for regions that offer it (DeferredRegion) the engine
// queues the copies between packets and memory and has them done together,
// one call per run of copies to one process's memory:
//
//   - payloads of packets being built (reads) until the port's
//     SettleReads, which the port calls before those packets leave: it holds
//     them meanwhile and finishes them (ICRC) afterwards;
//   - payloads of received packets (writes) until the port's SettleWrites,
//     which it calls before the received frames' buffers are reused, and
//     until any completion is posted (a completion says the data is there),
//     any atomic executes, and any read is done.
//
// For such a region RemoteWritten comes when a WRITE's last packet is
// queued, before its bytes land: only a poller in this process could watch
// the count, and the memory is another's.
//
// Where a batch fails (the process exited or unmapped the memory), the QPs
// whose copies it held go to the error state at the start of the next
// Process, as when a region is deregistered under a work request; a
// packet whose payload could not be read is dropped by the port.

// VectorMemory copies many ranges of one memory in one go; on an error
// some of the copies may not have been done.
type VectorMemory interface {
	ReadVec(pieces []ibv.Piece) error  // Addr to Buf
	WriteVec(pieces []ibv.Piece) error // Buf to Addr
}

// DeferredRegion is a Region whose copies are cheaper together.
type DeferredRegion interface {
	Region
	// Deferred checks what ReadAt or WriteAt check for n bytes at va and
	// returns the memory that copies them, and the address there.
	Deferred(n int, va uint64) (VectorMemory, uint64, bool)
}

// deferredCopy is a queued copy and the QP it is for.
type deferredCopy struct {
	mem VectorMemory
	pc  ibv.Piece
	qp  *QP
}

// copyQueue is a queue of deferred copies in one direction.
type copyQueue struct {
	copies []deferredCopy
	batch  []ibv.Piece
}

// ReadsPending reports whether packets built since the last SettleReads
// wait for their payloads: the port holds them, and every packet after
// them, until SettleReads.
func (e *Engine) ReadsPending() bool { return len(e.reads.copies) > 0 }

// SettleReads does the queued payload reads (after the queued writes, which
// they may read back). drop is told each payload a failed read did not
// fill, so that the port discards that packet.
func (e *Engine) SettleReads(drop func(payload []byte)) {
	e.SettleWrites()
	e.reads.settle(e, VectorMemory.ReadVec, drop)
}

// SettleWrites does the queued writes of received payloads.
func (e *Engine) SettleWrites() {
	if len(e.writes.copies) > 0 {
		e.writes.settle(e, VectorMemory.WriteVec, nil)
	}
}

// settle does the queue's copies, one op call per run of copies to one
// memory.
func (cq *copyQueue) settle(e *Engine, op func(VectorMemory, []ibv.Piece) error, drop func([]byte)) {
	for start := 0; start < len(cq.copies); {
		mem := cq.copies[start].mem
		end := start + 1
		for end < len(cq.copies) && cq.copies[end].mem == mem {
			end++
		}
		cq.batch = cq.batch[:0]
		for _, c := range cq.copies[start:end] {
			cq.batch = append(cq.batch, c.pc)
		}
		if op(mem, cq.batch) != nil {
			for _, c := range cq.copies[start:end] {
				if drop != nil {
					drop(c.pc.Buf)
				}
				e.copyFailed = append(e.copyFailed, c.qp)
			}
		}
		start = end
	}
	clear(cq.copies) // drop the references to frames and QPs
	cq.copies = cq.copies[:0]
	clear(cq.batch)
}

// failCopyQPs moves the QPs whose copies failed to the error state.
func (e *Engine) failCopyQPs() {
	for _, q := range e.copyFailed {
		if !q.destroyed {
			q.fail()
		}
	}
	clear(e.copyFailed)
	e.copyFailed = e.copyFailed[:0]
}

// readPayload copies the len(dst) bytes at va of mr into dst, a packet
// being built: now, or queued until SettleReads if mr defers copies.
func (q *QP) readPayload(mr Region, dst []byte, va uint64) bool {
	if d, ok := mr.(DeferredRegion); ok {
		return q.deferCopy(&q.e.reads, d, dst, va)
	}
	return mr.ReadAt(dst, va)
}

// writePayload copies src, a received packet's payload, to va of mr: now,
// or queued until SettleWrites if mr defers copies.
func (q *QP) writePayload(mr Region, src []byte, va uint64) bool {
	if d, ok := mr.(DeferredRegion); ok {
		return q.deferCopy(&q.e.writes, d, src, va)
	}
	return mr.WriteAt(src, va)
}

// deferCopy checks the copy between buf and va of d and queues it on cq.
func (q *QP) deferCopy(cq *copyQueue, d DeferredRegion, buf []byte, va uint64) bool {
	mem, addr, ok := d.Deferred(len(buf), va)
	if ok {
		cq.copies = append(cq.copies, deferredCopy{mem: mem, pc: ibv.Piece{Buf: buf, Addr: addr}, qp: q})
	}
	return ok
}
