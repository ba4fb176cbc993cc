package capture

import (
	"encoding/binary"
	"sync/atomic"
	"time"
)

// captureRing is one lane's share of a packet capture (capture.go): the
// lane, its only producer, copies up to snaplen bytes of each frame into
// buf as a pcap record; the capture's writer goroutine, its only consumer,
// writes runs of records from buf to the file as they are, with one
// system call and no copy of its own. The two meet through the head and
// tail positions alone, so the packet path takes no lock, makes no system
// call and allocates nothing; a frame that finds no room is counted in
// dropped and left out.
//
// A record is a classic pcap record: a recordHeader-byte header (seconds,
// nanoseconds, bytes kept, the frame's length; little-endian, as
// pcapfile.Writer's file header says) and the bytes kept. A record never
// wraps: one that does not fit before buf's end starts at its beginning,
// and the rest of the end is skipped, marked by a header whose length is
// skipMark when there is room for one.
type captureRing struct {
	buf     []byte
	snaplen int
	// head is the consumer's position, tail the producer's: byte counts
	// since the start that only grow; the offset in buf is the position
	// modulo len(buf).
	head atomic.Uint64
	tail atomic.Uint64
	// dropped counts the frames the ring had no room for.
	dropped atomic.Uint64
}

const (
	recordHeader = 16
	skipMark     = ^uint32(0)
	// minRingRecords is how many records of the largest size a ring holds
	// at least: a smaller ring shortens the snap length.
	minRingRecords = 8
)

// newCaptureRing returns a ring of size bytes keeping up to snaplen bytes
// of each frame.
func newCaptureRing(size, snaplen int) *captureRing {
	snaplen = min(snaplen, size/minRingRecords-recordHeader)
	return &captureRing{buf: make([]byte, size), snaplen: max(snaplen, 0)}
}

// Frame copies frame into the lane's part of the capture (roce.Tap), if
// it still takes frames and the lane's copying is within its share of the
// lane's time (Config.Share).
func (c *laneCapture) Frame(frame []byte) {
	if c.detached.Load() {
		return
	}
	now := c.now()
	if !c.withinShare(now) {
		c.overShare.Add(1)
		return
	}
	var kept bool
	if c.file != nil {
		kept = c.file.put(frame, now)
	} else {
		kept = c.ring.put(frame, now)
	}
	if kept {
		c.charge(c.now() - now)
	}
}

// A lane spends at most its share (Config.Share, by default
// DefaultShare percent) of the time copying frames into the
// capture, on average, and drops the frames past it: its allowance, in
// nanoseconds of copying, grows by the share of the time that passes, up
// to shareBurst, and each copy spends what it took. Copying a whole
// frame costs the lane half a microsecond or more (the capture's memory
// is not in the cache, and the copy pushes out what the engine uses), and
// on the engine that bounds a transfer (the sender's) a capture of every
// frame cut write_bw by 30-35 %, more than the quarter it may cost. The
// time is the wall clock's, so a lane that other work keeps off its CPU
// has its allowance grow meanwhile: a tenth of the time then let the
// capture cost 0.71-0.80, a twentieth 0.88-0.89 on the sender only.
// A burst of up to
// shareBurst of copying (tens of thousands of frames) is kept whole, and
// so is every frame at lower rates.
//
// A copy is charged at most maxCopyCharge (the copy of a 9 KiB frame takes
// a few microseconds), so that a lane's thread losing its CPU in the middle
// of one does not cost the capture what follows.
const (
	DefaultShare  = 5
	shareBurst    = int64(20 * time.Millisecond)
	maxCopyCharge = int64(20 * time.Microsecond)
)

// charge counts a copy that took d nanoseconds against the lane's
// allowance.
func (c *laneCapture) charge(d int64) { c.allowance -= min(d, maxCopyCharge) }

// withinShare adds to the lane's allowance for the time since its last
// call and says whether the lane may copy another frame at now.
func (c *laneCapture) withinShare(now int64) bool {
	c.allowance = min(c.allowance+(now-c.last)*c.sharePct/100, shareBurst)
	c.last = now
	return c.allowance > 0
}

// now is the time in Unix nanoseconds: the capture's start on the wall
// clock plus the monotonic time since, one clock read (tens of
// nanoseconds) where time.Now makes two.
func (c *laneCapture) now() int64 { return c.wall0 + int64(time.Since(c.start)) }

// put copies the start of frame into the ring, stamped with now (Unix
// nanoseconds), or counts it as dropped when the ring is full; it reports
// whether it copied.
func (r *captureRing) put(frame []byte, now int64) bool {
	n := min(len(frame), r.snaplen)
	need := uint64(recordHeader + n)
	size := uint64(len(r.buf))
	tail := r.tail.Load() // only put moves it
	off := tail % size
	skip := uint64(0)
	if size-off < need {
		skip = size - off
	}
	if tail+skip+need-r.head.Load() > size {
		r.dropped.Add(1)
		return false
	}
	if skip >= recordHeader {
		binary.LittleEndian.PutUint32(r.buf[off+8:], skipMark)
	}
	if skip > 0 {
		tail, off = tail+skip, 0
	}
	rec := r.buf[off : off+need]
	putRecordHeader(rec, now, n, len(frame))
	copy(rec[recordHeader:], frame[:n])
	r.tail.Store(tail + need)
	return true
}

// records returns the oldest run of whole records that lie one after the
// other in buf, at most room bytes of them (room < 0: no bound), and how
// many records it holds; an empty run when the ring is empty or the next
// record is larger than room. The run stays valid until release.
func (r *captureRing) records(room int64) (run []byte, n int) {
	size := uint64(len(r.buf))
	head, tail := r.head.Load(), r.tail.Load()
	for head != tail {
		off := head % size
		if size-off >= recordHeader && binary.LittleEndian.Uint32(r.buf[off+8:]) != skipMark {
			break
		}
		head += size - off // skip the end of buf
		r.head.Store(head)
	}
	start := head % size
	end := start
	for pos := head; pos != tail; {
		off := pos % size
		if off < start || size-off < recordHeader || binary.LittleEndian.Uint32(r.buf[off+8:]) == skipMark {
			break // wrapped or skipped: the next run
		}
		next := off + recordHeader + uint64(binary.LittleEndian.Uint32(r.buf[off+8:]))
		if room >= 0 && int64(next-start) > room {
			break
		}
		end, pos, n = next, pos+next-off, n+1
		if end == size {
			break
		}
	}
	return r.buf[start:end], n
}

// nextRecordLen is the length of the oldest record, 0 if there is none.
func (r *captureRing) nextRecordLen() int64 {
	run, n := r.records(-1)
	if n == 0 {
		return 0
	}
	return recordHeader + int64(binary.LittleEndian.Uint32(run[8:]))
}

// release takes out a run records returned, giving its room back to put.
func (r *captureRing) release(run []byte) {
	r.head.Add(uint64(len(run)))
}
