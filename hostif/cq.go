package hostif

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// CompletionQueue is a completion queue in shared memory: the daemon
// writes entries, the client polls them. Each side uses its own methods;
// the daemon's side has one writer at a time (its caller serialises the
// engines).
type CompletionQueue struct {
	mem  []byte
	mask uint32
	// next is the daemon's next entry to write, or the client's next to
	// poll.
	next uint32
}

// NewCompletionQueue returns the queue in mem, of depth entries.
func NewCompletionQueue(mem []byte, depth int) (*CompletionQueue, error) {
	if err := checkRing(mem, depth, CQEntrySize); err != nil {
		return nil, err
	}
	return &CompletionQueue{mem: mem, mask: uint32(depth - 1)}, nil
}

// Depth returns the number of entries.
func (c *CompletionQueue) Depth() int { return int(c.mask) + 1 }

func (c *CompletionQueue) entry(i uint32) []byte {
	off := HeaderSize + int(i&c.mask)*CQEntrySize
	return c.mem[off : off+CQEntrySize : off+CQEntrySize]
}

// Daemon side.

// Push writes wc as the next entry and reports false when the CQ has no
// room, or when the client's consumer index is ahead of what was written
// (it broke its queue): the CQ overran.
func (c *CompletionQueue) Push(wc *ibv.WC) bool {
	if c.next-atomic.LoadUint32(word(c.mem, offCQCons)) > c.mask {
		return false
	}
	e := c.entry(c.next)
	le := binary.LittleEndian
	le.PutUint64(e[offCQWRID:], wc.WRID)
	e[offCQStatus], e[offCQOpcode], e[offCQFlags], e[offCQSL] = uint8(wc.Status), uint8(wc.Opcode), uint8(wc.Flags), wc.SL
	le.PutUint32(e[offCQByteLen:], wc.ByteLen)
	if wc.Flags&ibv.WCWithInv != 0 {
		le.PutUint32(e[offCQImm:], wc.InvalidatedRKey)
	} else {
		binary.BigEndian.PutUint32(e[offCQImm:], wc.Imm)
	}
	le.PutUint32(e[offCQQPN:], wc.QPN)
	le.PutUint32(e[offCQSrcQP:], wc.SrcQP)
	le.PutUint16(e[offCQPKeyIndex:], wc.PKeyIndex)
	le.PutUint16(e[offCQSLID:], wc.SLID)
	e[offCQDLIDPathBits], e[offCQNetworkType] = wc.DLIDPathBits, uint8(wc.NetworkHdrType)
	e[offCQDiscarded] = 0 // the client may have marked the slot's last entry
	le.PutUint64(e[offCQTimestamp:], wc.Timestamp)
	le.PutUint64(e[offCQTmTag:], wc.TMTag)
	le.PutUint32(e[offCQTmPriv:], wc.TMPriv)
	c.next++
	atomic.StoreUint32(word(e, offCQSequence), c.next)
	return true
}

// MoveTo moves the completions written and not yet polled into dst, at
// the same indices, with the consumer index, the overrun mark and the arm:
// dst goes on where c stops, and c is written no more (resize_cq). It
// reports false, moving nothing, when dst has no room for them or the
// consumer index cannot be believed. The arm is taken from c (c's arm word
// is left 0), so an arm the client makes in c after the move is one it
// made during the resize, which the client then moves itself (Follow).
func (c *CompletionQueue) MoveTo(dst *CompletionQueue) bool {
	cons := atomic.LoadUint32(word(c.mem, offCQCons))
	if n := c.next - cons; n > c.mask+1 || n > dst.mask+1 {
		return false
	}
	for i := cons; i != c.next; i++ {
		copy(dst.entry(i), c.entry(i)) // sequence i + 1 included
	}
	atomic.StoreUint32(word(dst.mem, offCQCons), cons)
	atomic.StoreUint32(word(dst.mem, offOverrun), atomic.LoadUint32(word(c.mem, offOverrun)))
	atomic.StoreUint32(word(dst.mem, offOptions), atomic.LoadUint32(word(c.mem, offOptions)))
	if a := atomic.SwapUint32(word(c.mem, offArmed), ArmNone); a != ArmNone {
		atomic.StoreUint32(word(dst.mem, offArmed), a)
	}
	dst.next = c.next
	return true
}

// Held returns how many completions the daemon wrote that the client has
// not polled, as far as the consumer index says; a consumer index ahead of
// what was written gives more than the depth.
func (c *CompletionQueue) Held() int {
	return int(c.next - atomic.LoadUint32(word(c.mem, offCQCons)))
}

// WantsTimestamps reports whether the client asked for timestamps
// (SetTimestamps): a clock read for each entry costs the daemon about
// 70 ns, so it reads none for a client that does not read them.
func (c *CompletionQueue) WantsTimestamps() bool {
	return atomic.LoadUint32(word(c.mem, offOptions))&CQTimestamps != 0
}

// SetOverrun marks the CQ overrun for the client.
func (c *CompletionQueue) SetOverrun() { atomic.StoreUint32(word(c.mem, offOverrun), 1) }

// TakeArm reports whether the CQ is armed for a completion that is
// solicited or not, and disarms it if so: the daemon then notifies the
// channel once. Errors notify like solicited completions.
func (c *CompletionQueue) TakeArm(solicited bool) bool {
	a := word(c.mem, offArmed)
	v := atomic.LoadUint32(a)
	if v == ArmNone || (v == ArmSolicited && !solicited) {
		return false
	}
	return atomic.CompareAndSwapUint32(a, v, ArmNone)
}

// Client side.

// Poll moves up to len(wcs) completions into wcs, returns how many, and
// publishes the new consumer index.
func (c *CompletionQueue) Poll(wcs []ibv.WC) int {
	n := 0
	for n < len(wcs) {
		e := c.entry(c.next)
		if atomic.LoadUint32(word(e, offCQSequence)) != c.next+1 {
			break
		}
		if e[offCQDiscarded] != 0 { // dropped by its QP's reset
			c.next++
			atomic.StoreUint32(word(c.mem, offCQCons), c.next)
			continue
		}
		decodeWC(e, &wcs[n])
		c.next++
		n++
	}
	if n > 0 {
		atomic.StoreUint32(word(c.mem, offCQCons), c.next)
	}
	return n
}

func decodeWC(e []byte, wc *ibv.WC) {
	le := binary.LittleEndian
	*wc = ibv.WC{WRID: le.Uint64(e[offCQWRID:]), Status: ibv.WCStatus(e[offCQStatus]),
		Opcode: ibv.WCOpcode(e[offCQOpcode]), Flags: ibv.WCFlags(e[offCQFlags]), SL: e[offCQSL],
		ByteLen: le.Uint32(e[offCQByteLen:]), QPN: le.Uint32(e[offCQQPN:]), SrcQP: le.Uint32(e[offCQSrcQP:]),
		PKeyIndex: le.Uint16(e[offCQPKeyIndex:]), SLID: le.Uint16(e[offCQSLID:]), DLIDPathBits: e[offCQDLIDPathBits],
		NetworkHdrType: ibv.NetworkType(e[offCQNetworkType]), Timestamp: le.Uint64(e[offCQTimestamp:]),
		TMTag: le.Uint64(e[offCQTmTag:]), TMPriv: le.Uint32(e[offCQTmPriv:])}
	if wc.Flags&ibv.WCWithInv != 0 {
		wc.InvalidatedRKey = le.Uint32(e[offCQImm:])
	} else {
		wc.Imm = binary.BigEndian.Uint32(e[offCQImm:])
	}
}

// Follow goes on polling in c where old stopped, after the daemon
// moved old's completions to c (MoveTo): an arm the client made in old
// during the move is made in c too. An arm the daemon took in c meanwhile
// then comes again: one event more, never one less.
func (c *CompletionQueue) Follow(old *CompletionQueue) {
	c.next = old.next
	if a := atomic.SwapUint32(word(old.mem, offArmed), ArmNone); a != ArmNone {
		atomic.StoreUint32(word(c.mem, offArmed), a)
	}
}

// SetTimestamps asks the daemon to stamp each entry's timestamp; the
// client sets it before a QP uses the CQ.
func (c *CompletionQueue) SetTimestamps() {
	a := word(c.mem, offOptions)
	atomic.StoreUint32(a, atomic.LoadUint32(a)|CQTimestamps)
}

// Arm asks for a notification of the next completion, or with
// solicitedOnly of the next solicited or error one (ibv_req_notify_cq).
func (c *CompletionQueue) Arm(solicitedOnly bool) {
	v := uint32(ArmNext)
	if solicitedOnly {
		v = ArmSolicited
	}
	atomic.StoreUint32(word(c.mem, offArmed), v)
}

// Overrun reports whether the daemon marked the CQ overrun.
func (c *CompletionQueue) Overrun() bool { return atomic.LoadUint32(word(c.mem, offOverrun)) != 0 }
