package procmem

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/internal/procmem/memchild"
)

// The tests reach into child processes: this test binary run again.
func TestMain(m *testing.M) {
	if memchild.Serve() {
		return
	}
	os.Exit(m.Run())
}

func TestWriteAndReadAnotherProcess(t *testing.T) {
	c := memchild.Start(t)
	p, err := Open(c.Pid())
	require.NoError(t, err)
	defer p.Close()

	// Three frames' payloads land contiguously at offset 100.
	pieces := [][]byte{bytes.Repeat([]byte{1}, 10), nil, bytes.Repeat([]byte{2}, 5), {3, 4}}
	require.NoError(t, p.WriteV(pieces, c.Buf+100))
	want := append(append(append(append([]byte{0}, pieces[0]...), pieces[2]...), pieces[3]...), 0)
	require.Equal(t, want, c.Bytes(t, 99, 19))

	c.Fill(t, 2000, 300, 7)
	got := [][]byte{make([]byte, 100), make([]byte, 200)}
	require.NoError(t, p.ReadV(got, c.Buf+2000))
	require.Equal(t, bytes.Repeat([]byte{7}, 100), got[0])
	require.Equal(t, bytes.Repeat([]byte{7}, 200), got[1])

	one := make([]byte, 4)
	require.NoError(t, p.ReadAt(one, c.Buf+2298))
	require.Equal(t, []byte{7, 7, 0, 0}, one)
}

func TestManyPieces(t *testing.T) {
	c := memchild.Start(t)
	p, err := Open(c.Pid())
	require.NoError(t, err)
	defer p.Close()
	pieces := make([][]byte, 2500) // more than one call takes
	for i := range pieces {
		pieces[i] = []byte{byte(i), byte(i >> 8)}
	}
	require.NoError(t, p.WriteV(pieces, c.Buf))
	back := make([]byte, 5000)
	require.NoError(t, p.ReadAt(back, c.Buf))
	for i := range pieces {
		require.Equal(t, pieces[i], back[2*i:2*i+2], "piece %d", i)
	}
}

func TestBadAddresses(t *testing.T) {
	c := memchild.Start(t)
	p, err := Open(c.Pid())
	require.NoError(t, err)
	defer p.Close()

	b := make([]byte, 8)
	require.ErrorIs(t, p.ReadAt(b, 4096), ErrFault)
	require.ErrorIs(t, p.WriteAt(b, c.RO), ErrFault, "a read-only page is not written")
	require.NoError(t, p.ReadAt(b, c.RO))
	require.ErrorIs(t, p.ReadAt(b, ^uint64(0)-3), ErrFault, "a range that wraps")

	require.NoError(t, p.CheckMapped(c.Buf, memchild.Size, true))
	require.NoError(t, p.CheckMapped(c.RO, 4096, false))
	require.ErrorIs(t, p.CheckMapped(c.RO, 4096, true), ErrFault)
	require.ErrorIs(t, p.CheckMapped(4096, 8, false), ErrFault)
}

// Once the process has exited (and been reaped, so that its pid may go to
// another process), nothing is read or written.
func TestNothingAfterExit(t *testing.T) {
	c := memchild.Start(t)
	p, err := Open(c.Pid())
	require.NoError(t, err)
	defer p.Close()
	require.True(t, p.Alive())

	c.Kill()
	require.False(t, p.Alive())
	b := make([]byte, 8)
	require.ErrorIs(t, p.ReadAt(b, c.Buf), ErrGone)
	require.ErrorIs(t, p.WriteAt(b, c.Buf), ErrGone)
	require.ErrorIs(t, p.CheckMapped(c.Buf, 8, false), ErrGone)
}

// A pid the kernel gave to another process after the first exited is never
// reached: the pidfd of the first decides. Here the Process holds the pid of
// a live process and the pidfd of one that exited, as after a reuse.
func TestReusedPidIsNotTouched(t *testing.T) {
	dead := memchild.Start(t)
	fd, err := unix.PidfdOpen(dead.Pid(), 0)
	require.NoError(t, err)
	dead.Kill()

	live := memchild.Start(t)
	live.Fill(t, 0, 8, 9)
	p := &Process{pid: live.Pid(), pidfd: fd}
	defer p.Close()
	require.ErrorIs(t, p.WriteAt(make([]byte, 8), live.Buf), ErrGone)
	require.ErrorIs(t, p.ReadAt(make([]byte, 8), live.Buf), ErrGone)
	require.Equal(t, bytes.Repeat([]byte{9}, 8), live.Bytes(t, 0, 8), "the live process's bytes are untouched")
}

func TestFromPidfd(t *testing.T) {
	c := memchild.Start(t)
	fd, err := unix.PidfdOpen(c.Pid(), 0)
	require.NoError(t, err)
	p, err := FromPidfd(fd)
	require.NoError(t, err)
	require.Equal(t, c.Pid(), p.Pid())
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "a second Close does nothing")
	require.ErrorIs(t, p.ReadAt(make([]byte, 1), c.Buf), ErrGone)

	_, err = FromPidfd(0) // standard input, not a pidfd
	require.Error(t, err)
}

func TestOpenMissingProcess(t *testing.T) {
	c := memchild.Start(t)
	pid := c.Pid()
	c.Kill()
	_, err := Open(pid)
	require.True(t, errors.Is(err, unix.ESRCH) || errors.Is(err, ErrGone), "%v", err)
}

// BenchmarkWrite64Frames writes 64 payloads of 1 KiB to one buffer of
// another process, as a 64 KiB RDMA WRITE's frames land.
func BenchmarkWrite64Frames(b *testing.B) {
	c := memchild.Start(b)
	p, err := Open(c.Pid())
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	frames := make([]byte, 64*2048)
	pieces := make([][]byte, 64)
	for i := range pieces {
		pieces[i] = frames[i*2048 : i*2048+1024]
	}
	b.ReportAllocs()
	b.SetBytes(64 * 1024)
	for b.Loop() {
		if err := p.WriteV(pieces, c.Buf); err != nil {
			b.Fatal(err)
		}
	}
}
