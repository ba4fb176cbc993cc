package verbs

import (
	"fmt"
	"sync"

	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// engineTMSRQ is a tag matching SRQ of an in-process device, and the TM
// SRQ as the engines see it (ibtransport.TagMatchingSRQ): an SRQ with a
// matching list. List operations run under the group's Do, so that their
// completions enter the CQ as the engines' do; mu guards the list against
// the engine's matching all the same.
type engineTMSRQ struct {
	*engineSRQ
	cq *engineCQ

	mu      sync.Mutex
	entries []tmEntry // by handle index
	free    []uint16  // indices of free entries
	order   []uint16  // live entries' indices, oldest first
	// unexpected counts the tagged messages that matched no entry; an
	// entry added while the program's count was behind it is disarmed
	// until a SYNC brings the two together (tag_matching.md's phases).
	unexpected uint32
}

// tmEntry is a tagged buffer of the list.
type tmEntry struct {
	live      bool
	armed     bool
	gen       uint16 // bumped when the entry is freed: stale handles miss
	recvID    uint64
	tag, mask uint64
	sgl       []ibv.SGE
}

func (p *enginePD) CreateTMSRQ(s *SRQ, init TMSRQInit) (SRQOps, error) {
	cq, ok := init.CQ.ops.(*engineCQ)
	if !ok {
		return nil, fmt.Errorf("create TM SRQ: the CQ is not the engine's: %w", ErrInvalidArgument)
	}
	es := &engineSRQ{s: s, e: p.e}
	es.rq.Init(init.MaxWR, init.MaxSGE)
	t := &engineTMSRQ{engineSRQ: es, cq: cq, entries: make([]tmEntry, init.MaxNumTags)}
	for i := init.MaxNumTags - 1; i >= 0; i-- {
		t.free = append(t.free, uint16(i))
	}
	return t, nil
}

// PostOps on an ordinary SRQ: PostOps refused it already.
func (s *engineSRQ) PostOps(*OpsWR) (uint32, error) { return 0, ErrInvalidArgument }

// tmHandle names entry i of generation gen: never 0.
func tmHandle(i, gen uint16) uint32 { return uint32(gen)<<16 | uint32(i+1) }

func (t *engineTMSRQ) PostOps(wr *OpsWR) (uint32, error) {
	var h uint32
	err := t.e.group.Do(func() error {
		var err error
		h, err = t.postOp(wr)
		return err
	})
	return h, err
}

// postOp performs one operation and completes it; under the group's Do.
func (t *engineTMSRQ) postOp(wr *OpsWR) (uint32, error) {
	t.mu.Lock()
	var h uint32
	st, op := WCSuccess, WCTMSync
	switch wr.Opcode {
	case OpsTagAdd:
		if len(t.free) == 0 {
			t.mu.Unlock()
			return 0, fmt.Errorf("post SRQ ops: %d tags posted: %w", len(t.entries), ErrQueueFull)
		}
		h, op = t.add(wr), WCTMAdd
	case OpsTagDel:
		i, gen := int(wr.Handle&0xffff)-1, uint16(wr.Handle>>16)
		if i < 0 || i >= len(t.entries) {
			t.mu.Unlock()
			return 0, fmt.Errorf("post SRQ ops: DEL of handle %#x: %w", wr.Handle, ErrInvalidArgument)
		}
		op = WCTMDel
		if e := &t.entries[i]; !e.live || e.gen != gen {
			st = WCTMErr // a message took it, or it was deleted
		} else {
			t.release(uint16(i))
		}
	}
	inPhase := wr.UnexpectedCnt == t.unexpected
	if wr.Opcode == OpsTagSync || wr.Flags&OpsTMSync != 0 {
		if inPhase {
			for _, i := range t.order {
				t.entries[i].armed = true
			}
		}
	}
	t.mu.Unlock()
	if wr.Flags&OpsSignaled != 0 || st != WCSuccess {
		wc := WC{WRID: wr.ID, Status: st, Opcode: op}
		if !inPhase {
			wc.Flags = WCTMSyncReq
		}
		t.cq.Push(wc, false)
	}
	return h, nil
}

// add puts wr's buffer at the end of the list; t.mu is held.
func (t *engineTMSRQ) add(wr *OpsWR) uint32 {
	i := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	e := &t.entries[i]
	*e = tmEntry{live: true, armed: wr.UnexpectedCnt == t.unexpected, gen: e.gen, recvID: wr.RecvID,
		tag: wr.Tag, mask: wr.Mask, sgl: append([]ibv.SGE(nil), wr.SGL...)}
	t.order = append(t.order, i)
	return tmHandle(i, e.gen)
}

// release frees entry i; t.mu is held.
func (t *engineTMSRQ) release(i uint16) {
	e := &t.entries[i]
	*e = tmEntry{gen: e.gen + 1}
	for k, j := range t.order {
		if j == i {
			t.order = append(t.order[:k], t.order[k+1:]...)
			break
		}
	}
	t.free = append(t.free, i)
}

// MatchTag takes the oldest armed entry tag matches; on the engine
// goroutine.
func (t *engineTMSRQ) MatchTag(tag uint64) (uint64, []ibv.SGE, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, i := range t.order {
		e := &t.entries[i]
		if e.armed && (tag^e.tag)&e.mask == 0 {
			id, sgl := e.recvID, e.sgl
			t.release(i)
			return id, sgl, true
		}
	}
	return 0, nil, false
}

// Unexpected counts an unexpected tagged message; on the engine goroutine.
func (t *engineTMSRQ) Unexpected() {
	t.mu.Lock()
	t.unexpected++
	t.mu.Unlock()
}

// CQ is the SRQ's CQ.
func (t *engineTMSRQ) CQ() ibtransport.CompletionQueue { return t.cq }

// Tags returns how many tagged buffers the list holds.
func (t *engineTMSRQ) Tags() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.order)
}
