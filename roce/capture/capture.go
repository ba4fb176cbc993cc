package capture

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/internal/pcapfile"
	"github.com/softnic/softnic/roce"
)

// Config describes a packet capture.
type Config struct {
	// W receives the pcap file. A regular file (*os.File) is written from
	// its start, replacing what it held, with direct I/O (capfile.go); at
	// Stop it is cut to the records captured.
	W io.Writer
	// Snaplen is how many bytes of each frame are kept (default
	// DefaultSnaplen, which keeps every frame whole).
	Snaplen int
	// Limit is the most bytes the file may take: when the next frame would
	// pass it, the capture stops (Stats.Truncated). 0: no limit.
	Limit int64
	// Share is the most of its time, in percent, a lane (the engine that
	// sends or receives the frames) may spend copying them into the
	// capture, on average; frames past it are left out (Stats.Dropped).
	// Default DefaultShare, which keeps a capture of every whole
	// frame within a quarter of write_bw's throughput; 100 keeps every
	// frame the writer keeps up with, at the traffic's cost.
	Share int
	// RingBytes is the size of each lane's ring (default 16 MiB): how much
	// may wait for the writer before frames are left out (Stats.Dropped).
	// Into a regular file, the room kept ahead of the lanes takes as much
	// per lane.
	RingBytes int
}

// DefaultSnaplen is the default snap length, tcpdump's.
const DefaultSnaplen = 262144

const defaultRingBytes = 16 << 20

// ErrRunning is returned by Start while another capture (or another
// roce.Tap) runs on the device.
var ErrRunning = errors.New("capture: a capture is running on the device")

// Stats count what became of the frames a capture saw.
type Stats struct {
	Written   uint64 // frames written to the file
	Dropped   uint64 // frames left out: no room, or past the lanes' share of their time
	Truncated bool   // the capture stopped at Config.Limit
}

// Capture is a running packet capture (Start).
type Capture struct {
	d     *roce.Device
	lanes []*laneCapture // what each lane puts its frames into
	rings []*captureRing // a capture through rings, one per lane
	file  *captureFile   // a capture into a regular file, written with O_DIRECT
	w     io.Writer
	limit int64
	size  int64
	// The counts of a capture through rings (a captureFile's lanes count).
	written atomic.Uint64
	full    atomic.Bool
	err     error // the first write error; the writer goroutine's

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// laneCapture is a lane's part of a capture: its ring or its share of the
// file.
type laneCapture struct {
	ring *captureRing
	file *fileLane
	// start is when the capture started, wall0 the same in Unix
	// nanoseconds (now).
	start time.Time
	wall0 int64
	// The lane's own: how long it may still copy, and when it last asked
	// (withinShare), in nanoseconds; its share of the time, in percent.
	allowance, last, sharePct int64
	// overShare counts the frames left out for the lane's share.
	overShare atomic.Uint64
	// detached: the capture stopped taking frames (Stop, a write error,
	// the limit); the lane's tap goes at Stop.
	detached atomic.Bool
}

// Start starts capturing d's frames into cfg.W until Stop.
func Start(d *roce.Device, cfg Config) (*Capture, error) {
	if cfg.W == nil {
		return nil, errors.New("capture: no writer")
	}
	if cfg.Snaplen <= 0 {
		cfg.Snaplen = DefaultSnaplen
	}
	if cfg.RingBytes <= 0 {
		cfg.RingBytes = defaultRingBytes
	}
	if cfg.Share == 0 {
		cfg.Share = DefaultShare
	}
	if cfg.Share < 0 || cfg.Share > 100 {
		return nil, fmt.Errorf("capture: capture share %d%%: must be 1 to 100", cfg.Share)
	}
	if cfg.Limit < 0 {
		return nil, fmt.Errorf("capture: capture limit %d: must not be negative", cfg.Limit)
	}
	// The lanes' taps first, taking no frames yet: a device that has
	// taps already refuses before anything is written to cfg.W.
	lanes := d.Lanes()
	c := &Capture{d: d, w: cfg.W, limit: cfg.Limit, stop: make(chan struct{}), done: make(chan struct{})}
	taps := make([]roce.Tap, lanes)
	for i := range taps {
		l := &laneCapture{sharePct: int64(cfg.Share)}
		l.detached.Store(true)
		c.lanes, taps[i] = append(c.lanes, l), l
	}
	if err := d.SetTaps(taps); err != nil {
		if errors.Is(err, roce.ErrTapsSet) {
			return nil, ErrRunning
		}
		return nil, err
	}
	if err := c.open(cfg); err != nil {
		d.SetTaps(nil)
		return nil, err
	}
	start := time.Now()
	for i, l := range c.lanes {
		l.start, l.wall0, l.allowance, l.last = start, start.UnixNano(), shareBurst, start.UnixNano()
		if c.file != nil {
			l.file = c.file.lanes[i]
		} else {
			c.rings = append(c.rings, newCaptureRing(cfg.RingBytes, cfg.Snaplen))
			l.ring = c.rings[i]
		}
		l.detached.Store(false)
	}
	go c.run()
	return c, nil
}

// open starts the file: a regular file is written directly (file.go),
// any other writer gets the pcap header now and the rings' records later.
func (c *Capture) open(cfg Config) error {
	if file, ok := cfg.W.(*os.File); ok {
		f, err := startFile(file, cfg, len(c.lanes))
		if err != nil && !errors.Is(err, errNoFileCapture) {
			return err
		}
		c.file = f
	}
	if c.file == nil {
		// The records the lanes write are pcapfile's: little-endian, in
		// nanoseconds.
		if _, err := pcapfile.NewWriterSnaplen(cfg.W, uint32(cfg.Snaplen)); err != nil {
			return fmt.Errorf("capture: writing capture: %w", err)
		}
		c.size = pcapfile.HeaderLen
	}
	return nil
}

// startFile starts a captureFile into file: errNoFileCapture if it can
// take none.
func startFile(file *os.File, cfg Config, lanes int) (*captureFile, error) {
	if err := file.Truncate(0); err != nil {
		return nil, errNoFileCapture
	}
	var header bytes.Buffer
	pcapfile.NewWriterSnaplen(&header, uint32(cfg.Snaplen)) // a bytes.Buffer takes it
	f, err := newCaptureFile(file, header.Bytes(), cfg.RingBytes*lanes, cfg.Snaplen, cfg.Limit, lanes)
	if err != nil && !errors.Is(err, errNoFileCapture) {
		return nil, fmt.Errorf("capture: writing capture: %w", err)
	}
	return f, err
}

// detach stops the lanes' copying: each laneCapture drops what comes
// after, and the taps are taken away at Stop.
func (c *Capture) detach() {
	for _, l := range c.lanes {
		l.detached.Store(true)
	}
}

// Stop ends the capture: the lanes stop copying and what they copied is
// written. It returns the first write error.
func (c *Capture) Stop() error {
	c.stopOnce.Do(func() {
		c.detach()
		if c.file != nil {
			c.file.stopLanes() // a lane may have loaded its laneCapture before detach
		}
		close(c.stop)
		<-c.done
		if c.file != nil {
			if err := c.file.out.finish(); c.err == nil {
				c.err = err
			}
		}
		c.d.SetTaps(nil)
	})
	return c.err
}

// Stats returns the capture's counts so far.
func (c *Capture) Stats() Stats {
	var s Stats
	for _, l := range c.lanes {
		s.Dropped += l.overShare.Load()
	}
	if c.file != nil {
		s.Truncated = c.file.full.Load()
		for _, l := range c.file.lanes {
			s.Written += l.written.Load()
			s.Dropped += l.dropped.Load()
		}
		return s
	}
	s.Written, s.Truncated = c.written.Load(), c.full.Load()
	for _, r := range c.rings {
		s.Dropped += r.dropped.Load()
	}
	return s
}

// writerNap is how long the writer goroutine sleeps when the rings are
// empty: a small fraction of the time a ring takes to fill at line rate.
const writerNap = time.Millisecond

// writerNice is the writer thread's nice value: where CPUs are scarce the
// engines come first, and the capture drops what the writer has no time
// for, as tcpdump's does when it cannot keep up.
const writerNice = 19

// run is the writer goroutine: it drains the rings until Stop, then once
// more.
func (c *Capture) run() {
	defer close(c.done)
	if c.file != nil {
		c.file.run(c.stop, func(err error) { c.err = err; c.detach() })
		return
	}
	runtime.LockOSThread() // the thread dies with the goroutine, nice value and all
	unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), writerNice)
	t := time.NewTimer(writerNap)
	defer t.Stop()
	for {
		if c.drain() {
			continue
		}
		select {
		case <-c.stop:
			for c.drain() {
			}
			return
		case <-t.C:
			t.Reset(writerNap)
		}
	}
}

// drain writes one run of records of each ring to the file, and reports
// whether there were any. With several engines the frames of different
// lanes may follow each other out of time order in the file.
func (c *Capture) drain() bool {
	any := false
	for _, r := range c.rings {
		if c.err != nil || c.full.Load() {
			// Nothing more goes to the file; empty the rings.
			for run, _ := r.records(-1); len(run) > 0; run, _ = r.records(-1) {
				r.release(run)
			}
			continue
		}
		room := int64(-1)
		if c.limit > 0 {
			room = c.limit - c.size
		}
		run, n := r.records(room)
		if len(run) == 0 {
			if room >= 0 && r.nextRecordLen() > room {
				c.full.Store(true) // the next record passes the limit
				c.detach()
			}
			continue
		}
		any = true
		if _, err := c.w.Write(run); err != nil {
			c.err = fmt.Errorf("capture: writing capture: %w", err)
			c.detach()
		} else {
			c.size += int64(len(run))
			c.written.Add(uint64(n))
		}
		r.release(run)
	}
	return any
}
