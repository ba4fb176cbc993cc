package roce

import "unsafe"

// Frames whose payloads the engine has yet to read (a daemon client's
// memory: ibtransport.DeferredRegion) are held by the lane, with every
// frame built after them so that none overtakes another, until release has
// the engine do the reads; then each is finished (its ICRC covers the
// payload) and queued on the link in order.

// heldFrame is a TX frame built but not yet finished.
type heldFrame struct {
	path    *path
	buf     []byte
	n       int // IB packet length
	dropped bool
}

// holding reports whether a frame built now must be held.
func (ln *lane) holding() bool { return len(ln.held) > 0 || ln.eng.ReadsPending() }

// hold keeps the frame in ln.txBuf, n bytes of IB packet, until release.
func (p *path) hold(n int) {
	ln := p.ln
	ln.held = append(ln.held, heldFrame{path: p, buf: ln.txBuf, n: n})
	ln.txBuf = nil
}

// release has the engine read the held frames' payloads, then finishes and
// queues each frame whose payload could be read.
func (ln *lane) release() {
	if !ln.holding() {
		return
	}
	ln.eng.SettleReads(ln.dropPayload)
	for i := range ln.held {
		h := &ln.held[i]
		if h.dropped {
			ln.spare = append(ln.spare, h.buf)
			ln.ctr.TxErrors.Add(1)
			continue
		}
		h.path.finish(h.buf, h.n)
	}
	clear(ln.held)
	ln.held = ln.held[:0]
}

// dropPayload marks the frame holding payload as not to be sent: the
// engine could not read it.
func (ln *lane) dropPayload(payload []byte) {
	for i := range ln.held {
		if within(ln.held[i].buf, payload) {
			ln.held[i].dropped = true
			return
		}
	}
	for i := range ln.loopQ {
		if within(ln.loopQ[i].buf, payload) {
			ln.loopQ[i].dropped = true
			return
		}
	}
}

// within reports whether b lies inside buf.
func within(buf, b []byte) bool {
	if len(b) == 0 || len(buf) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= lo && p < lo+uintptr(cap(buf))
}
