package ibtransport

// Reading another process's memory (a daemon client's region) costs a
// system call, whatever the size: one per packet payload halved the
// daemon's bandwidth. So the engine queues the payload reads of the packets
// it builds in a pass, for regions that offer it (DeferredRegion), and the
// port has them done together, one call per process, before those packets
// leave: it holds the packets until SettleReads, then finishes (ICRC) and
// sends them in order.

// VecRead is one read of a batch: len(Dst) bytes at Addr.
type VecRead struct {
	Dst  []byte
	Addr uint64
}

// VectorReader reads many ranges of one memory in one go.
type VectorReader interface {
	// ReadVec does every read; on an error some may not have been done.
	ReadVec(reads []VecRead) error
}

// DeferredRegion is a Region whose reads are cheaper together.
type DeferredRegion interface {
	Region
	// Deferred checks what ReadAt checks for n bytes at va and returns the
	// memory that reads them, and the address there.
	Deferred(n int, va uint64) (VectorReader, uint64, bool)
}

// lazyRead is a queued payload read and the QP whose packet it fills.
type lazyRead struct {
	src VectorReader
	rd  VecRead
	qp  *QP
}

// ReadsPending reports whether packets built since the last SettleReads
// wait for their payloads: the port holds them, and every packet after
// them, until SettleReads.
func (e *Engine) ReadsPending() bool { return len(e.lazy) > 0 }

// SettleReads does the queued payload reads, one VectorReader call per run
// of reads from one memory. Where a call fails (the process exited or
// unmapped the memory), drop is told each payload it did not fill, so that
// the port discards that packet, and the QPs that sent them go to the error
// state at the start of the next Process (not here: the port may settle in
// the middle of a QP's transmission), as when a region is deregistered
// under a work request.
func (e *Engine) SettleReads(drop func(payload []byte)) {
	for start := 0; start < len(e.lazy); {
		src := e.lazy[start].src
		end := start + 1
		for end < len(e.lazy) && e.lazy[end].src == src {
			end++
		}
		e.vec = e.vec[:0]
		for _, l := range e.lazy[start:end] {
			e.vec = append(e.vec, l.rd)
		}
		if src.ReadVec(e.vec) != nil {
			for _, l := range e.lazy[start:end] {
				drop(l.rd.Dst)
				e.readFailed = append(e.readFailed, l.qp)
			}
		}
		start = end
	}
	clear(e.lazy) // drop the references to frames and QPs
	e.lazy = e.lazy[:0]
}

// readPayload copies n bytes at va of mr into dst for a packet being
// built: now, or queued until SettleReads if mr defers its reads.
func (q *QP) readPayload(mr Region, dst []byte, va uint64) bool {
	d, ok := mr.(DeferredRegion)
	if !ok {
		return mr.ReadAt(dst, va)
	}
	src, addr, ok := d.Deferred(len(dst), va)
	if !ok {
		return false
	}
	q.e.lazy = append(q.e.lazy, lazyRead{src: src, rd: VecRead{Dst: dst, Addr: addr}, qp: q})
	return true
}

// failReadQPs moves the QPs whose payloads could not be read to the error
// state.
func (e *Engine) failReadQPs() {
	for _, q := range e.readFailed {
		if !q.destroyed {
			q.fail()
		}
	}
	clear(e.readFailed)
	e.readFailed = e.readFailed[:0]
}
