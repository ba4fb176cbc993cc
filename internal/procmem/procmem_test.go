package procmem

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
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
	require.NoError(t, p.ReadAt(b, c.RO))
	require.ErrorIs(t, p.ReadAt(b, ^uint64(0)-3), ErrFault, "a range that wraps")
	require.ErrorIs(t, p.WriteAt(b, 1<<63), ErrFault, "beyond any user address")
	require.True(t, p.Alive(), "a bad address is not a gone process")

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

// An exec ends every access through the descriptors at once, though the
// pid lives on and the new program has memory where it is asked for: the
// descriptors name the address space, not the pid.
func TestExecEndsAccess(t *testing.T) {
	c := memchild.Start(t)
	p, err := Open(c.Pid())
	require.NoError(t, err)
	defer p.Close()
	c.Exec(t)
	c.Fill(t, 0, 64, 9)

	require.ErrorIs(t, p.WriteAt(make([]byte, 64), c.Buf), ErrGone)
	require.Equal(t, bytes.Repeat([]byte{9}, 64), c.Bytes(t, 0, 64), "the new program's bytes are untouched")
	b := make([]byte, 64)
	require.ErrorIs(t, p.ReadAt(b, c.Buf), ErrGone)
	require.Equal(t, make([]byte, 64), b, "nothing of the new program is read")
	require.ErrorIs(t, p.CheckMapped(c.Buf, 64, false), ErrGone, "the new layout is not told")
	require.False(t, p.Alive())

	q, err := Open(c.Pid()) // the new address space, opened anew
	require.NoError(t, err)
	defer q.Close()
	require.NoError(t, q.ReadAt(b, c.Buf))
	require.Equal(t, bytes.Repeat([]byte{9}, 64), b)
}

// Gone is told by the kernel, not guessed: Alive reads the maps, and
// Reachable's first call asks too.
func TestReachableAsksTheKernel(t *testing.T) {
	c := memchild.Start(t)
	p, err := Open(c.Pid())
	require.NoError(t, err)
	defer p.Close()
	require.True(t, p.Alive())
	q, err := Open(c.Pid())
	require.NoError(t, err)
	defer q.Close()
	c.Exec(t)
	require.False(t, p.Reachable(), "no access has found out yet, but Reachable asked")
	require.False(t, q.Alive())
	require.False(t, q.Reachable())
}

func TestFromDescriptors(t *testing.T) {
	c := memchild.Start(t)
	open := func(path string, flags int) int {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
		require.NoError(t, err, path)
		return fd
	}
	mem := func() int { return open(fmt.Sprintf("/proc/%d/mem", c.Pid()), unix.O_RDWR) }
	maps := func() int { return open(fmt.Sprintf("/proc/%d/maps", c.Pid()), unix.O_RDONLY) }
	p, err := FromDescriptors(mem(), maps())
	require.NoError(t, err)
	require.NoError(t, p.WriteAt([]byte{5}, c.Buf))
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "a second Close does nothing")
	require.ErrorIs(t, p.ReadAt(make([]byte, 1), c.Buf), ErrGone)

	var pipe [2]int
	require.NoError(t, unix.Pipe2(pipe[:], unix.O_CLOEXEC))
	defer unix.Close(pipe[1])
	file := filepath.Join(t.TempDir(), "mem")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	for name, fds := range map[string][2]int{
		"mem read-only":     {open(fmt.Sprintf("/proc/%d/mem", c.Pid()), unix.O_RDONLY), maps()},
		"maps as mem":       {open(fmt.Sprintf("/proc/%d/maps", c.Pid()), unix.O_RDONLY), maps()},
		"mem as maps":       {mem(), mem()},
		"another proc file": {open(fmt.Sprintf("/proc/%d/status", c.Pid()), unix.O_RDONLY), maps()},
		"a pipe":            {pipe[0], maps()},
		"a file named mem":  {open(file, unix.O_RDWR), maps()},
		"/dev/null":         {open("/dev/null", unix.O_RDWR), open("/dev/null", unix.O_RDONLY)},
	} {
		_, err := FromDescriptors(fds[0], fds[1])
		require.ErrorIs(t, err, ErrDescriptor, name)
		_, err = unix.FcntlInt(uintptr(fds[1]), unix.F_GETFD, 0)
		require.ErrorIs(t, err, unix.EBADF, "%s: the descriptors are closed", name)
	}
}

func TestOpenMissingProcess(t *testing.T) {
	c := memchild.Start(t)
	pid := c.Pid()
	c.Kill()
	_, err := Open(pid)
	require.ErrorIs(t, err, unix.ENOENT)
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
