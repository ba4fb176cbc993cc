package ibtransport

import "slices"

// removeActive takes q off the active list (q moves to another engine).
func (e *Engine) removeActive(q *QP) {
	if !q.inActive {
		return
	}
	if i := slices.Index(e.active, q); i >= 0 {
		e.active = slices.Delete(e.active, i, i+1)
		if i < e.reqNext {
			e.reqNext--
		}
	}
	q.inActive = false
}

// waitWindow queues q to start its next message when the device window
// has room.
func (e *Engine) waitWindow(q *QP) {
	if !q.waitsWindow {
		q.waitsWindow = true
		e.windowWait = append(e.windowWait, q)
	}
}

// leaveWindowWait takes q off the windowWait queue (q moves to another
// engine, whose passes queue it again if it still waits).
func (e *Engine) leaveWindowWait(q *QP) {
	if !q.waitsWindow {
		return
	}
	if i := slices.Index(e.windowWait, q); i >= 0 {
		e.windowWait = slices.Delete(e.windowWait, i, i+1)
	}
	q.waitsWindow = false
}

// admitWaiting moves QPs waiting for the device window back to the end of
// the active list, first come first, as many as the free window could take
// messages of (counting a message as 16 packets: a 64 KiB message at IB
// MTU 4096). The pass cursor comes to them in turn.
func (e *Engine) admitWaiting() {
	free := maxDeviceUnacked - e.unacked
	n := 0
	for ; n < len(e.windowWait) && free > 0; n++ {
		q := e.windowWait[n]
		q.waitsWindow = false
		if !q.destroyed {
			e.activate(q)
			free -= 16
		}
	}
	if n > 0 {
		rest := copy(e.windowWait, e.windowWait[n:])
		clear(e.windowWait[rest:])
		e.windowWait = e.windowWait[:rest]
	}
}

// activate puts q on the active list; engine goroutine only.
func (e *Engine) activate(q *QP) {
	if !q.inActive && !q.destroyed {
		q.inActive = true
		e.active = append(e.active, q)
	}
}

// kick asks the engine to visit q: posters call it after queueing work.
// The lock is taken once per quiet period of the QP, not once per post.
func (e *Engine) kick(q *QP) {
	if q.kicked.CompareAndSwap(false, true) {
		e.kickMu.Lock()
		e.kicks = append(e.kicks, q)
		e.hasKick.Store(true)
		e.kickMu.Unlock()
	}
	// An engine that is awake sees the kick on its next pass. Otherwise it
	// set sleeping before its last look at hasKick (PrepareSleep): one of
	// the two sees the other's store.
	if e.sleeping.Load() {
		e.Wake()
	}
}

// PrepareSleep is called by the engine goroutine before it blocks waiting
// for packets. It reports false, and the engine must not block, when posts
// or commands came in since its last pass. Until Awake, posters ring the
// doorbell.
func (e *Engine) PrepareSleep() bool {
	e.sleeping.Store(true)
	if e.hasKick.Load() || e.hasCmds.Load() || e.hasForwarded() {
		e.sleeping.Store(false)
		return false
	}
	return true
}

// HasQPs reports whether any QP lives on the engine: an application's
// poll leaves the passes of an engine without QPs to its goroutine.
func (e *Engine) HasQPs() bool { return e.nQPs.Load() > 0 }

// HasWork reports whether verbs commands (Do) or packets from the group's
// other engines wait for a pass: they wake the engine goroutine even from
// a nap while an application polls.
func (e *Engine) HasWork() bool { return e.hasCmds.Load() || e.hasForwarded() }

// Awake is called by the engine goroutine when it stopped waiting (for
// packets, or in a nap while an application polled): the next pass reads
// the clock.
func (e *Engine) Awake() {
	e.sleeping.Store(false)
	e.clock.slept()
}

func (e *Engine) takeKicks() {
	if !e.hasKick.Load() {
		return
	}
	e.kickMu.Lock()
	e.hasKick.Store(false)
	for i, q := range e.kicks {
		// Cleared before the QP's queues are looked at, so a post after
		// this kicks again.
		q.kicked.Store(false)
		if q.e != e {
			q.e.kick(q) // the QP moved to another engine since the post
		} else {
			e.activate(q)
		}
		e.kicks[i] = nil
	}
	e.kicks = e.kicks[:0]
	e.kickMu.Unlock()
}

// quiet reports whether the QP has nothing to do until a packet, a post or
// a command arrives: no work request in flight or waiting, no response to
