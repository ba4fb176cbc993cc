package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// captureFile is a capture into a regular file whose records the lanes
// copy, once, to where they lie in the file's byte stream: into a ring
// that the capture's writer goroutine writes out with O_DIRECT, so the
// kernel copies nothing (capdirect.go). A capture through per-lane rings
// and write(2) (capring.go) copies every frame twice, and the kernel's
// copy into the page cache is the dearer of the two; a shared mapping of
// the file, which the lanes' copies would land in directly, costs its
// writer more still in faulting in and zeroing the pages.
//
// The stream's bytes at file offset p live in window p/window of the
// ring, slots[(p/window) % len(slots)]. The lanes take their records'
// places one after the other from pos with a compare-and-swap, so the file
// holds no gap; a lane whose record would end past ready, how far the
// writer has made room, drops the frame and counts it, never waits, and
// makes no system call. A record may straddle two windows: the lane
// copies it in two parts.
//
// Whether a record is complete the writer learns from each lane's
// inflight: the lane stores the position it read from pos there before it
// takes that place, and idleLane when its copy is done. Every record below
// committed, the least of pos and every lane's inflight, is complete.
type captureFile struct {
	window  uint64 // a multiple of the page size
	slots   []atomic.Pointer[captureWindow]
	snaplen int
	// limit is the most bytes the file may take, 0 for no limit.
	limit uint64

	// pos is the file offset of the next record; stopBit is set in it
	// once no more records may be added: the next frame would pass limit
	// (full) or the capture is stopping.
	pos   atomic.Uint64
	ready atomic.Uint64
	full  atomic.Bool

	lanes []*fileLane
	out   *directOut
}

// captureWindow is one window of the stream's bytes.
type captureWindow struct {
	mem []byte
}

// fileLane is one lane's share of a captureFile, on cache lines of its
// own: the lane writes its fields for every frame.
type fileLane struct {
	_        [64]byte
	f        *captureFile
	inflight atomic.Uint64 // idleLane, or at most the offset of the lane's record being copied
	written  atomic.Uint64
	dropped  atomic.Uint64
	_        [64]byte
}

const (
	stopBit  = uint64(1) << 63
	idleLane = ^uint64(0)
)

// errNoFileCapture says a file cannot take a captureFile (not a regular
// file, or on a file system without direct I/O); the capture then writes
// it through rings.
var errNoFileCapture = errors.New("roce: capture file cannot be written with direct I/O")

// newCaptureFile starts a capture into file (emptied), header first. The
// room the writer keeps ahead of the lanes takes about ahead bytes.
func newCaptureFile(file *os.File, header []byte, ahead, snaplen int, limit int64, lanes int) (*captureFile, error) {
	st, err := file.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil, errNoFileCapture
	}
	f := newCaptureStream(ahead, snaplen, limit, lanes)
	if f.out, err = newDirectOut(f, file, header); err != nil {
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EFBIG) || errors.Is(err, unix.EDQUOT) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", errNoFileCapture, err)
	}
	return f, nil
}

// windowsAhead is how many windows the room ahead of the lanes is cut
// into: the writer writes a window at a time, and 2 MiB writes (of
// 32 MiB ahead) cost its writer half what 1 MiB writes do, where 4 and 8
// MiB ones cost no less and left the lanes without room more often
// (BenchmarkCaptureCost).
const windowsAhead = 16

// newCaptureStream sizes a captureFile's windows and makes its lanes'
// shares; its directOut is the caller's to add.
func newCaptureStream(ahead, snaplen int, limit int64, lanes int) *captureFile {
	page := unix.Getpagesize()
	window := max(ahead/windowsAhead/page*page, page)
	f := &captureFile{
		window:  uint64(window),
		slots:   make([]atomic.Pointer[captureWindow], max(ahead/window, 2)),
		snaplen: max(min(snaplen, window-recordHeader), 0),
		limit:   uint64(limit),
	}
	for range lanes {
		l := &fileLane{f: f}
		l.inflight.Store(idleLane)
		f.lanes = append(f.lanes, l)
	}
	return f
}

// put copies the start of frame into the file as a record stamped with
// now (Unix nanoseconds), or counts it as dropped when the writer has not
// made room for it; it reports whether it copied.
func (l *fileLane) put(frame []byte, now int64) bool {
	f := l.f
	n := min(len(frame), f.snaplen)
	need := uint64(recordHeader + n)
	var off uint64
	for {
		off = f.pos.Load()
		if off&stopBit != 0 {
			l.inflight.Store(idleLane)
			return false
		}
		l.inflight.Store(off)
		if f.limit > 0 && off+need > f.limit {
			if f.pos.CompareAndSwap(off, off|stopBit) {
				f.full.Store(true)
			}
			continue
		}
		if off+need > f.ready.Load() {
			l.inflight.Store(idleLane)
			l.dropped.Add(1)
			return false
		}
		if f.pos.CompareAndSwap(off, off+need) {
			break
		}
	}
	var hdr [recordHeader]byte
	putRecordHeader(hdr[:], now, n, len(frame))
	f.copyAt(off, hdr[:])
	f.copyAt(off+recordHeader, frame[:n])
	l.written.Add(1)
	l.inflight.Store(idleLane)
	return true
}

// copyAt copies b into the stream at off, across windows as it must; the
// windows are there (off+len(b) <= ready, and the caller's inflight keeps
// them so).
func (f *captureFile) copyAt(off uint64, b []byte) {
	for len(b) > 0 {
		w := f.slots[(off/f.window)%uint64(len(f.slots))].Load()
		c := copy(w.mem[off%f.window:], b)
		b, off = b[c:], off+uint64(c)
	}
}

// committed is a file offset below which every record is complete.
func (f *captureFile) committed() uint64 {
	c := f.pos.Load() &^ stopBit
	for _, l := range f.lanes {
		if v := l.inflight.Load(); v != idleLane && v < c {
			c = v
		}
	}
	return c
}

// end is where the records end.
func (f *captureFile) end() uint64 { return f.pos.Load() &^ stopBit }

// run is the writer goroutine: it makes room for the lanes until stop is
// closed, on a thread of the lowest priority (writerNice): where the CPUs
// are full, the engines come first and the lanes drop what finds no room.
// It reports the first error to fail, then does nothing more.
func (f *captureFile) run(stop <-chan struct{}, fail func(error)) {
	runtime.LockOSThread() // the thread dies with the goroutine, nice value and all
	unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), writerNice)
	t := time.NewTimer(writerNap)
	defer t.Stop()
	failed := false
	for {
		worked := false
		if !failed {
			var err error
			if worked, err = f.out.step(); err != nil {
				fail(err)
				failed = true
			}
		}
		if worked {
			select {
			case <-stop:
				return
			default:
				continue
			}
		}
		select {
		case <-stop:
			return
		case <-t.C:
			t.Reset(writerNap)
		}
	}
}

// stopLanes ends the lanes' records: none begins after it returns, and
// those begun are complete.
func (f *captureFile) stopLanes() {
	for {
		p := f.pos.Load()
		if p&stopBit != 0 || f.pos.CompareAndSwap(p, p|stopBit) {
			break
		}
	}
	for f.committed() != f.end() {
		time.Sleep(10 * time.Microsecond) // a lane finishing its copy: it never waits
	}
}

// putRecordHeader writes a pcap record header into b: the time now (Unix
// nanoseconds), n bytes kept of a frame of origLen.
func putRecordHeader(b []byte, now int64, n, origLen int) {
	binary.LittleEndian.PutUint32(b[0:], uint32(now/1e9))
	binary.LittleEndian.PutUint32(b[4:], uint32(now%1e9))
	binary.LittleEndian.PutUint32(b[8:], uint32(n))
	binary.LittleEndian.PutUint32(b[12:], uint32(origLen))
}
