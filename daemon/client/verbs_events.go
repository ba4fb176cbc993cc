package client

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// dialedObjects are a dialed device's CQs, QPs and SRQs as the
// daemon's messages name them: events carry the user handle this process
// gave the object (docs/HOST-INTERFACE.md, "Events"), completions the QPN.
type dialedObjects struct {
	next atomic.Uint64 // the last user handle given
	mu   sync.Mutex
	// byHandle holds *dialedCQ, *dialedQP and *dialedSRQ by user handle;
	// byQPN the QPs by number.
	byHandle map[uint64]any
	byQPN    map[uint32]*dialedQP
	// srqs counts the SRQs made: while there are none, completions are
	// not looked up for their SRQ's count.
	srqs atomic.Int32
}

func (o *dialedObjects) init() {
	o.byHandle = map[uint64]any{}
	o.byQPN = map[uint32]*dialedQP{}
}

// handle returns a user handle for a new object, which add publishes once
// the daemon made it.
func (o *dialedObjects) handle() uint64 { return o.next.Add(1) }

func (o *dialedObjects) add(h uint64, obj any) {
	o.mu.Lock()
	o.byHandle[h] = obj
	if q, ok := obj.(*dialedQP); ok {
		o.byQPN[q.q.QPN] = q
	}
	o.mu.Unlock()
}

func (o *dialedObjects) remove(h uint64) {
	o.mu.Lock()
	if q, ok := o.byHandle[h].(*dialedQP); ok && o.byQPN[q.q.QPN] == q {
		delete(o.byQPN, q.q.QPN)
	}
	delete(o.byHandle, h)
	o.mu.Unlock()
}

func (o *dialedObjects) object(h uint64) any {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byHandle[h]
}

func (o *dialedObjects) qp(qpn uint32) *dialedQP {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byQPN[qpn]
}

// noteCompletions learns from polled completions what the daemon does not
// publish: an RC QP that completed a work request in error is in ERR (IBA
// moves it there before the completion; the state word of its ring changes
// only when this process modifies it), and each receive completion of a QP
// on an SRQ took one of the SRQ's receives (SRQ.Len).
func (o *dialedObjects) noteCompletions(wcs []verbs.WC) {
	srqs := o.srqs.Load() > 0
	for i := range wcs {
		wc := &wcs[i]
		// A tagged buffer's completions took no receive of the SRQ, and
		// an incomplete rendezvous leaves the QP as it was.
		failed := wc.Status != verbs.WCSuccess && wc.Status != verbs.WCTMRndvIncomplete
		recv := srqs && wc.Opcode&verbs.WCRecv != 0 && wc.Flags&(verbs.WCTMMatch|verbs.WCTMDataValid) == 0
		if !failed && !recv {
			continue
		}
		q := o.qp(wc.QPN)
		if q == nil {
			continue
		}
		if failed && q.typ.Reliable() {
			q.failed.Store(true)
		}
		if recv && q.srq != nil {
			q.srq.taken.Add(1)
		}
	}
}

// asyncEvent turns the daemon's async event record into the device's
// Event, for the object the user handle names; a QP known to have gone to
// ERR is marked so before the event is seen (QP.State).
func (r *dialed) asyncEvent(handle uint64, typ uint32) {
	switch typ { // a port's record names the port, not an object
	case hostif.EventPortActive:
		r.emit(verbs.Event{Type: verbs.EventPortActive, Port: int(handle)})
		return
	case hostif.EventPortErr:
		r.emit(verbs.Event{Type: verbs.EventPortErr, Port: int(handle)})
		return
	case hostif.EventGIDChange:
		r.emit(verbs.Event{Type: verbs.EventGIDChange, Port: int(handle)})
		return
	}
	obj := r.objects.object(handle)
	cq, _ := obj.(*dialedCQ)
	qp, _ := obj.(*dialedQP)
	srq, _ := obj.(*dialedSRQ)
	var ev verbs.Event
	switch {
	case typ == hostif.EventCQErr && cq != nil:
		ev = verbs.Event{Type: verbs.EventCQErr, CQ: cq.cq}
	case typ == hostif.EventQPFatal && qp != nil:
		qp.failed.Store(true)
		ev = verbs.Event{Type: verbs.EventQPFatal, QP: qp.qp}
	case typ == hostif.EventQPLastWQE && qp != nil:
		qp.failed.Store(true) // raised when a session.QP on an session.SRQ reaches ERR
		ev = verbs.Event{Type: verbs.EventQPLastWQEReached, QP: qp.qp}
	case typ == hostif.EventCommEst && qp != nil:
		ev = verbs.Event{Type: verbs.EventCommEst, QP: qp.qp}
	case typ == hostif.EventSQDrained && qp != nil:
		ev = verbs.Event{Type: verbs.EventSQDrained, QP: qp.qp}
	case typ == hostif.EventSRQLimitReached && srq != nil:
		ev = verbs.Event{Type: verbs.EventSRQLimitReached, SRQ: srq.srq}
	default:
		return // an object already destroyed, or an event verbs has no name for
	}
	r.emit(ev)
}

// readAsync reads the session's async event records until the pipe ends:
// at Close, or when the daemon ended the session, which the device's
// events then say with EventDeviceFatal.
func (r *dialed) readAsync(f *os.File) {
	var rec [hostif.AsyncEventLen]byte
	for {
		if _, err := io.ReadFull(f, rec[:]); err != nil {
			if !r.pipes.closing.Load() {
				r.emit(verbs.Event{Type: verbs.EventDeviceFatal})
			}
			return
		}
		r.asyncEvent(hostif.ParseAsyncEvent(rec))
	}
}

// pipeReaders are the goroutines that read the daemon's pipes (async
// events, completion channels). Close closes their files, which ends them.
type pipeReaders struct {
	mu      sync.Mutex
	files   []*os.File
	wg      sync.WaitGroup
	closing atomic.Bool
}

// start runs read on a duplicate of f that the Go runtime's poller
// watches: the daemon passes blocking descriptors, whose reads closing
// them cannot interrupt. The duplicate shares the pipe's O_NONBLOCK with
// f, which nothing else reads.
func (p *pipeReaders) start(f *os.File, read func(*os.File)) error {
	dup, err := session.PollableDup(f, f.Name())
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing.Load() {
		dup.Close()
		return fmt.Errorf("%s: the device is closed: %w", f.Name(), verbs.ErrInvalidState)
	}
	p.files = append(p.files, dup)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		read(dup)
	}()
	return nil
}

// close ends the readers and waits for them.
func (p *pipeReaders) close() {
	p.mu.Lock()
	p.closing.Store(true)
	files := p.files
	p.files = nil
	p.mu.Unlock()
	for _, f := range files {
		f.Close()
	}
	p.wg.Wait()
}
