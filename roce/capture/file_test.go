package capture

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/internal/pcapfile"
)

// newTestCaptureFile starts a captureFile into a fresh file (ahead: the
// room kept ahead of the lanes, in bytes) for lanes lanes.
func newTestCaptureFile(t *testing.T, ahead, snaplen int, limit int64, lanes int) (*captureFile, *os.File) {
	t.Helper()
	file, err := os.Create(filepath.Join(t.TempDir(), "c.pcap"))
	require.NoError(t, err)
	t.Cleanup(func() { file.Close() })
	var header bytes.Buffer
	_, err = pcapfile.NewWriterSnaplen(&header, uint32(snaplen))
	require.NoError(t, err)
	f, err := newCaptureFile(file, header.Bytes(), ahead, snaplen, limit, lanes)
	require.NoError(t, err)
	return f, file
}

// catchUp does the writer's work until there is none left.
func (f *captureFile) catchUp(t *testing.T) {
	for {
		worked, err := f.out.step()
		require.NoError(t, err)
		if !worked {
			return
		}
	}
}

// readRecords reads a capture file whole: every record's data and length
// on the wire.
func readRecords(t *testing.T, file *os.File) (data [][]byte, origLen []int) {
	t.Helper()
	b, err := os.ReadFile(file.Name())
	require.NoError(t, err)
	rd, err := pcapfile.NewReader(bytes.NewReader(b))
	require.NoError(t, err)
	for {
		p, err := rd.Next()
		if err == io.EOF {
			return data, origLen
		}
		require.NoError(t, err, "record %d", len(data)+1)
		data = append(data, bytes.Clone(p.Data))
		origLen = append(origLen, p.OrigLen)
	}
}

// testFrame is frame i of the tests, n bytes of a pattern of its own.
func testFrame(i, n int) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(i*7 + k)
	}
	return b
}

// TestCaptureFileRecordsAcrossWindows puts frames of many sizes into
// windows of one page, the writer's work done now and then: records
// straddle window boundaries, at every offset, and come out whole; frames
// that find no room are counted as dropped and leave no gap. The file,
// stopped in the middle of a window, is cut to its records.
func TestCaptureFileRecordsAcrossWindows(t *testing.T) {
	page := unix.Getpagesize()
	f, file := newTestCaptureFile(t, 4*page, 3000, 0, 1)
	require.Equal(t, uint64(page), f.window)
	require.Len(t, f.slots, 4)
	want := putTestFrames(t, f, 3000, 5)
	end := f.end()
	require.NotZero(t, end%f.window, "stopped in the middle of a window")
	f.stopLanes()
	require.NoError(t, f.out.finish())
	st, err := file.Stat()
	require.NoError(t, err)
	require.Equal(t, int64(end), st.Size())
	data, orig := readRecords(t, file)
	require.Equal(t, want, data)
	for i := range orig {
		require.GreaterOrEqual(t, orig[i], len(data[i]))
	}
}

// putTestFrames puts frames of many sizes, some longer than the snap
// length (3000), into f's first lane, doing the writer's work every
// catchUp frames; it returns the records expected, and checks that
// records straddled windows and that frames were dropped.
func putTestFrames(t *testing.T, f *captureFile, frames, catchUp int) [][]byte {
	t.Helper()
	l := f.lanes[0]
	var want [][]byte
	straddled, dropped := 0, 0
	for i := 0; i < frames; i++ {
		if i%catchUp == 0 {
			f.catchUp(t)
		}
		frame := testFrame(i, (i*131)%3500+1)
		off, before := f.pos.Load(), l.dropped.Load()
		l.put(frame, int64(i))
		require.Equal(t, idleLane, l.inflight.Load())
		if l.dropped.Load() != before {
			dropped++
			require.Equal(t, off, f.pos.Load(), "a dropped frame takes no room")
			continue
		}
		if off/f.window != (f.pos.Load()-1)/f.window {
			straddled++
		}
		want = append(want, frame[:min(len(frame), 3000)])
	}
	require.Greater(t, straddled, frames/30)
	require.Greater(t, dropped, frames/300)
	require.Equal(t, uint64(len(want)), l.written.Load())
	return want
}

// TestCaptureFileWrittenDirectlyWhileRunning: a direct capture's file, as
// a crash would leave it before Stop, holds the header, whole records and
// at most the start of one more.
func TestCaptureFileWrittenDirectlyWhileRunning(t *testing.T) {
	page := unix.Getpagesize()
	f, file := newTestCaptureFile(t, 4*page, 3000, 0, 1)
	want := putTestFrames(t, f, 2000, 5)
	f.catchUp(t)
	b, err := os.ReadFile(file.Name())
	require.NoError(t, err)
	require.Equal(t, f.out.flushed, uint64(len(b)))
	require.Greater(t, len(b), 100000)
	require.Zero(t, len(b)%directBlock)
	b = b[pcapfile.HeaderLen:]
	whole := 0
	for len(b) >= recordHeader {
		n := int(binary.LittleEndian.Uint32(b[8:]))
		if len(b) < recordHeader+n {
			break // the torn last record
		}
		require.Equal(t, want[whole], b[recordHeader:recordHeader+n], "record %d", whole+1)
		b = b[recordHeader+n:]
		whole++
	}
	require.Less(t, len(b), recordHeader+3000)
	require.Greater(t, whole, len(want)/2)
	f.stopLanes()
	require.NoError(t, f.out.finish())
	data, _ := readRecords(t, file)
	require.Equal(t, want, data)
}

// TestCaptureFileStopsAtLimit: the file never passes the limit; the first
// frame that would pass it stops the capture, the frames after it (even
// small ones) are neither written nor dropped, and the file reads back.
func TestCaptureFileStopsAtLimit(t *testing.T) {
	page := unix.Getpagesize()
	const limit = 10000
	f, file := newTestCaptureFile(t, 8*page, DefaultSnaplen, limit, 1)
	f.catchUp(t)
	require.Equal(t, uint64(limit), f.ready.Load(), "no room past the limit")
	l := f.lanes[0]
	n := 0
	for ; !f.full.Load(); n++ {
		l.put(testFrame(n, 1000), int64(n))
		require.Zero(t, l.dropped.Load())
	}
	l.put(testFrame(n, 1), 0)
	require.Equal(t, uint64(n-1), l.written.Load())
	require.Zero(t, l.dropped.Load())
	f.stopLanes()
	require.NoError(t, f.out.finish())
	st, err := file.Stat()
	require.NoError(t, err)
	require.LessOrEqual(t, st.Size(), int64(limit))
	require.Greater(t, st.Size(), int64(limit-1016))
	data, _ := readRecords(t, file)
	require.Len(t, data, n-1)
}

// TestCaptureFileLanesAtOnce: several lanes put at once while the writer
// goroutine runs; every record read back is whole and each lane's frames
// keep their order.
func TestCaptureFileLanesAtOnce(t *testing.T) {
	page := unix.Getpagesize()
	const lanes, frames = 3, 20000
	f, file := newTestCaptureFile(t, 16*page, DefaultSnaplen, 0, lanes)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		f.run(stop, func(err error) { t.Error(err) })
	}()
	var wg sync.WaitGroup
	for i, l := range f.lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < frames; k++ {
				frame := testFrame(k, 40+(k*97)%1500)
				frame[0], frame[1], frame[2] = byte(i), byte(k), byte(k>>8)
				l.put(frame, int64(k))
			}
		}()
	}
	wg.Wait()
	f.stopLanes()
	close(stop)
	<-done
	require.NoError(t, f.out.finish())
	data, _ := readRecords(t, file)
	var written uint64
	for _, l := range f.lanes {
		written += l.written.Load()
		require.Equal(t, uint64(frames), l.written.Load()+l.dropped.Load())
	}
	require.Equal(t, written, uint64(len(data)))
	require.NotZero(t, written)
	last := [lanes]int{-1, -1, -1}
	for _, d := range data {
		i, k := int(d[0]), int(d[1])|int(d[2])<<8
		require.Less(t, i, lanes)
		want := testFrame(k, 40+(k*97)%1500)
		require.Equal(t, want[3:], d[3:], "lane %d frame %d", i, k)
		require.Greater(t, k, last[i])
		last[i] = k
	}
}

// TestCaptureFileTakesRegularFiles: a file open for writing only is
// written directly, and so is one on tmpfs if there is one at /dev/shm;
// what is not a regular file is left to the rings.
func TestCaptureFileTakesRegularFiles(t *testing.T) {
	header := make([]byte, pcapfile.HeaderLen)
	start := func(file *os.File) error {
		f, err := newCaptureFile(file, header, 1<<20, 100, 0, 1)
		if err != nil {
			return err
		}
		f.stopLanes()
		return f.out.finish()
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	require.NoError(t, err)
	defer null.Close()
	require.ErrorIs(t, start(null), errNoFileCapture)

	wo, err := os.OpenFile(filepath.Join(t.TempDir(), "w.pcap"), os.O_WRONLY|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer wo.Close()
	require.NoError(t, start(wo))

	var fs unix.Statfs_t
	if unix.Statfs("/dev/shm", &fs) != nil || fs.Type != unix.TMPFS_MAGIC {
		return // no tmpfs to try
	}
	shm, err := os.CreateTemp("/dev/shm", "softnic-test-*.pcap")
	require.NoError(t, err)
	defer os.Remove(shm.Name())
	defer shm.Close()
	require.NoError(t, start(shm))
	st, err := shm.Stat()
	require.NoError(t, err)
	require.Equal(t, int64(pcapfile.HeaderLen), st.Size())
}

func TestCaptureFilePutAllocatesNothing(t *testing.T) {
	f, _ := newTestCaptureFile(t, 1<<20, DefaultSnaplen, 0, 1)
	f.catchUp(t)
	frame := make([]byte, 4200)
	allocs := testing.AllocsPerRun(100, func() { f.lanes[0].put(frame, 1) })
	require.Zero(t, allocs)
}
