package capture

import (
	"fmt"
	"io"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// directOut puts a captureFile's records in the file with direct I/O: the
// stream's windows are the slices of one ring of memory (window k in slot
// k % len(slots)), and the writer writes what the lanes have completed,
// in whole blocks, from the ring to the file opened again with O_DIRECT.
// The disk reads the ring itself: the kernel copies nothing and keeps no
// page cache of the file, so a frame costs the CPUs the lane's copy alone.
// A window goes back to the lanes (ready moves on) once it is written.
//
// While the capture runs, the file holds the header, whole records and at
// most the start of one more, as a capture that was killed leaves it;
// finish writes the rest, in a last block padded with zeros, and cuts the
// file to its records.
type directOut struct {
	f       *captureFile
	fd      int
	ring    []byte // len(f.slots) windows, page-aligned as O_DIRECT wants
	mapping []byte // the memory mapped for ring, which lies within
	// populated is how much of the ring is faulted in, from its start.
	populated int
	// flushed is how much of the file is written: a multiple of
	// directBlock until finish.
	flushed   uint64
	lastWrite time.Time
}

const (
	// directBlock is the unit of O_DIRECT's offsets and lengths here: a
	// logical block of any disk up to 4Kn; the window, a multiple of the
	// page size, is one of it.
	directBlock = 4096
	// directIdle is how long the records of a window not yet complete
	// may wait to be written: the writer writes whole windows otherwise.
	directIdle = 100 * time.Millisecond
)

// newDirectOut opens file again for direct I/O, makes its ring with
// header at the start, and writes the first block to see that the file
// system takes direct writes (some accept O_DIRECT and refuse the write).
func newDirectOut(f *captureFile, file *os.File, header []byte) (*directOut, error) {
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", file.Fd()), unix.O_WRONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("roce: capture file: opening for direct I/O: %w", err)
	}
	w := int(f.window)
	ring, mapping, err := newDirectRing(len(f.slots) * w)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("roce: capture file: ring: %w", err)
	}
	d := &directOut{f: f, fd: fd, ring: ring, mapping: mapping, lastWrite: time.Now()}
	for j := range f.slots {
		f.slots[j].Store(&captureWindow{mem: ring[j*w : (j+1)*w]})
	}
	if err := d.populate(); err != nil {
		d.release()
		return nil, err
	}
	copy(ring, header)
	if err := d.write(ring[:directBlock], 0); err != nil {
		d.release()
		return nil, err
	}
	if err := unix.Ftruncate(fd, int64(len(header))); err != nil { // no zeros after the header meanwhile
		d.release()
		return nil, fmt.Errorf("roce: capture file: %w", err)
	}
	f.pos.Store(uint64(len(header)))
	f.ready.Store(d.readyEnd())
	return d, nil
}

// newDirectRing maps size bytes of memory for a directOut's ring, in huge
// pages where the kernel has them (fewer TLB misses for the lanes' copies,
// fewer pages for the kernel to pin per direct write). Its pages are
// faulted in a window at a time (populate) before the lanes may use them,
// so that no lane's copy meets a page fault; all at once here, the huge
// pages' zeroing (and compaction, on a busy host) delayed the start of the
// capture by long enough to miss a connection's first frames.
// It returns the ring and the mapping to unmap.
func newDirectRing(size int) (ring, mapping []byte, err error) {
	const huge = 2 << 20
	// Map a huge page more than asked and use the aligned part within, so
	// that the ring may start on a huge page.
	mem, err := unix.Mmap(-1, 0, size+huge, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, err
	}
	skip := int((huge - uintptr(unsafe.Pointer(&mem[0]))%huge) % huge)
	ring = mem[skip : skip+size : skip+size]
	unix.Madvise(ring, unix.MADV_HUGEPAGE) // a hint: without it, small pages
	return ring, mem, nil
}

// populate faults in the ring's next window, the first the lanes may not
// use yet.
func (d *directOut) populate() error {
	w := d.ring[d.populated : d.populated+int(d.f.window)]
	if err := unix.Madvise(w, unix.MADV_POPULATE_WRITE); err != nil {
		return fmt.Errorf("roce: capture file: faulting in the ring: %w", err)
	}
	d.populated += len(w)
	return nil
}

// readyEnd is how far the lanes may write: the windows from the one being
// written on, up to the limit.
func (d *directOut) readyEnd() uint64 {
	f := d.f
	end := (d.flushed/f.window + uint64(len(f.slots))) * f.window
	if d.populated < len(d.ring) {
		// The first pass: file offsets are ring offsets.
		end = min(end, uint64(d.populated))
	}
	if f.limit > 0 {
		end = min(end, f.limit)
	}
	return end
}

// step faults in the ring's next window, while some is not yet; then it
// writes the window being filled once the lanes have completed it, or the
// whole blocks of it they have completed when directIdle has passed since
// the last write, and gives the window back to the lanes when it is
// written to its end.
func (d *directOut) step() (bool, error) {
	f := d.f
	if d.populated < len(d.ring) {
		err := d.populate()
		f.ready.Store(d.readyEnd())
		return true, err
	}
	winEnd := (d.flushed/f.window + 1) * f.window
	end := min(f.committed()&^(directBlock-1), winEnd)
	if end <= d.flushed || end < winEnd && time.Since(d.lastWrite) < directIdle {
		return false, nil
	}
	off := d.flushed % uint64(len(d.ring))
	if err := d.write(d.ring[off:off+end-d.flushed], d.flushed); err != nil {
		return true, err
	}
	d.flushed = end
	if end == winEnd {
		f.ready.Store(d.readyEnd())
	}
	return true, nil
}

// write writes b at off with one direct write.
func (d *directOut) write(b []byte, off uint64) error {
	d.lastWrite = time.Now()
	n, err := unix.Pwrite(d.fd, b, int64(off))
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("roce: capture file: writing %d bytes at %d: %w", len(b), off, err)
	}
	return nil
}

// finish writes the records not yet written, the last block padded with
// zeros, and cuts the file to its records.
func (d *directOut) finish() error {
	defer d.release()
	f := d.f
	end := f.end()
	for d.flushed < end {
		to := min(end, (d.flushed/f.window+1)*f.window)
		off := d.flushed % uint64(len(d.ring))
		n := to - d.flushed
		padded := (n + directBlock - 1) &^ (directBlock - 1)
		clear(d.ring[off+n : off+padded]) // within the window: a multiple of directBlock
		if err := d.write(d.ring[off:off+padded], d.flushed); err != nil {
			return err
		}
		d.flushed = to
	}
	if err := unix.Ftruncate(d.fd, int64(end)); err != nil {
		return fmt.Errorf("roce: capture file: truncating to its records: %w", err)
	}
	return nil
}

// release lets go of the file and the ring.
func (d *directOut) release() {
	unix.Close(d.fd)
	for j := range d.f.slots {
		d.f.slots[j].Store(nil)
	}
	unix.Munmap(d.mapping)
}
