package procmem

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The tests reach into a child process: this test binary run again with
// PROCMEM_CHILD set, answering commands on its standard input.
func TestMain(m *testing.M) {
	if os.Getenv("PROCMEM_CHILD") != "" {
		serveChild()
		return
	}
	os.Exit(m.Run())
}

// childBuffer is on the heap: a stack may move.
var childBuffer = make([]byte, 1<<20)

// serveChild answers "buf" (the address of a 1 MiB buffer), "ro" (the
// address of a read-only page), "dump OFF N" (the buffer's bytes in hex)
// and "fill OFF N BYTE".
func serveChild() {
	buf := childBuffer
	ro, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		panic(err)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		arg := func(i int) int { v, _ := strconv.Atoi(f[i]); return v }
		switch f[0] {
		case "buf":
			fmt.Println(uintptr(unsafe.Pointer(&buf[0])))
		case "ro":
			fmt.Println(uintptr(unsafe.Pointer(&ro[0])))
		case "dump":
			fmt.Println(hex.EncodeToString(buf[arg(1) : arg(1)+arg(2)]))
		case "fill":
			for i := range buf[arg(1) : arg(1)+arg(2)] {
				buf[arg(1)+i] = byte(arg(3))
			}
			fmt.Println("ok")
		}
	}
}

type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startChild(t testing.TB) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PROCMEM_CHILD=1")
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(func() { c.in.Close(); c.cmd.Process.Kill(); c.cmd.Wait() })
	return c
}

func (c *child) ask(t testing.TB, format string, args ...any) string {
	t.Helper()
	_, err := fmt.Fprintf(c.in, format+"\n", args...)
	require.NoError(t, err)
	require.True(t, c.out.Scan(), "the child did not answer %q", format)
	return c.out.Text()
}

func (c *child) addr(t *testing.T, what string) uint64 {
	v, err := strconv.ParseUint(c.ask(t, "%s", what), 10, 64)
	require.NoError(t, err)
	return v
}

func TestWriteAndReadAnotherProcess(t *testing.T) {
	c := startChild(t)
	buf := c.addr(t, "buf")
	p, err := Open(c.cmd.Process.Pid)
	require.NoError(t, err)
	defer p.Close()

	// Three frames' payloads land contiguously at offset 100.
	pieces := [][]byte{bytes.Repeat([]byte{1}, 10), nil, bytes.Repeat([]byte{2}, 5), {3, 4}}
	require.NoError(t, p.WriteV(pieces, buf+100))
	require.Equal(t, "00"+"01010101010101010101"+"0202020202"+"0304"+"00", c.ask(t, "dump 99 19"))

	require.Equal(t, "ok", c.ask(t, "fill 2000 300 7"))
	got := [][]byte{make([]byte, 100), make([]byte, 200)}
	require.NoError(t, p.ReadV(got, buf+2000))
	require.Equal(t, bytes.Repeat([]byte{7}, 100), got[0])
	require.Equal(t, bytes.Repeat([]byte{7}, 200), got[1])

	one := make([]byte, 4)
	require.NoError(t, p.ReadAt(one, buf+2298))
	require.Equal(t, []byte{7, 7, 0, 0}, one)
}

func TestManyPieces(t *testing.T) {
	c := startChild(t)
	buf := c.addr(t, "buf")
	p, err := Open(c.cmd.Process.Pid)
	require.NoError(t, err)
	defer p.Close()
	pieces := make([][]byte, 2500) // more than one call takes
	for i := range pieces {
		pieces[i] = []byte{byte(i), byte(i >> 8)}
	}
	require.NoError(t, p.WriteV(pieces, buf))
	back := make([]byte, 5000)
	require.NoError(t, p.ReadAt(back, buf))
	for i := range pieces {
		require.Equal(t, pieces[i], back[2*i:2*i+2], "piece %d", i)
	}
}

func TestBadAddresses(t *testing.T) {
	c := startChild(t)
	buf, ro := c.addr(t, "buf"), c.addr(t, "ro")
	p, err := Open(c.cmd.Process.Pid)
	require.NoError(t, err)
	defer p.Close()

	b := make([]byte, 8)
	require.ErrorIs(t, p.ReadAt(b, 4096), ErrFault)
	require.ErrorIs(t, p.WriteAt(b, ro), ErrFault, "a read-only page is not written")
	require.NoError(t, p.ReadAt(b, ro))
	require.ErrorIs(t, p.ReadAt(b, ^uint64(0)-3), ErrFault, "a range that wraps")

	require.NoError(t, p.CheckMapped(buf, 1<<20, true))
	require.NoError(t, p.CheckMapped(ro, 4096, false))
	require.ErrorIs(t, p.CheckMapped(ro, 4096, true), ErrFault)
	require.ErrorIs(t, p.CheckMapped(4096, 8, false), ErrFault)
}

// Once the process has exited (and been reaped, so that its pid may go to
// another process), nothing is read or written.
func TestNothingAfterExit(t *testing.T) {
	c := startChild(t)
	buf := c.addr(t, "buf")
	p, err := Open(c.cmd.Process.Pid)
	require.NoError(t, err)
	defer p.Close()
	require.True(t, p.Alive())

	require.NoError(t, c.cmd.Process.Kill())
	c.cmd.Wait()
	require.False(t, p.Alive())
	b := make([]byte, 8)
	require.ErrorIs(t, p.ReadAt(b, buf), ErrGone)
	require.ErrorIs(t, p.WriteAt(b, buf), ErrGone)
	require.ErrorIs(t, p.CheckMapped(buf, 8, false), ErrGone)
}

// A pid the kernel gave to another process after the first exited is never
// reached: the pidfd of the first decides. Here the Process holds the pid of
// a live process and the pidfd of one that exited, as after a reuse.
func TestReusedPidIsNotTouched(t *testing.T) {
	dead := startChild(t)
	fd, err := unix.PidfdOpen(dead.cmd.Process.Pid, 0)
	require.NoError(t, err)
	dead.cmd.Process.Kill()
	dead.cmd.Wait()

	live := startChild(t)
	buf := live.addr(t, "buf")
	require.Equal(t, "ok", live.ask(t, "fill 0 8 9"))
	p := &Process{pid: live.cmd.Process.Pid, pidfd: fd}
	defer p.Close()
	require.ErrorIs(t, p.WriteAt(make([]byte, 8), buf), ErrGone)
	require.ErrorIs(t, p.ReadAt(make([]byte, 8), buf), ErrGone)
	require.Equal(t, "0909090909090909", live.ask(t, "dump 0 8"), "the live process's bytes are untouched")
}

func TestFromPidfd(t *testing.T) {
	c := startChild(t)
	fd, err := unix.PidfdOpen(c.cmd.Process.Pid, 0)
	require.NoError(t, err)
	p, err := FromPidfd(fd)
	require.NoError(t, err)
	require.Equal(t, c.cmd.Process.Pid, p.Pid())
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "a second Close does nothing")
	require.ErrorIs(t, p.ReadAt(make([]byte, 1), c.addr(t, "buf")), ErrGone)

	_, err = FromPidfd(0) // standard input, not a pidfd
	require.Error(t, err)
}

func TestOpenMissingProcess(t *testing.T) {
	c := startChild(t)
	pid := c.cmd.Process.Pid
	c.cmd.Process.Kill()
	c.cmd.Wait()
	_, err := Open(pid)
	require.True(t, errors.Is(err, unix.ESRCH) || errors.Is(err, ErrGone), "%v", err)
}

// BenchmarkWrite64Frames writes 64 payloads of 1 KiB to one buffer of
// another process, as a 64 KiB RDMA WRITE's frames land.
func BenchmarkWrite64Frames(b *testing.B) {
	c := startChild(b)
	buf, _ := strconv.ParseUint(c.ask(b, "buf"), 10, 64)
	p, err := Open(c.cmd.Process.Pid)
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
		if err := p.WriteV(pieces, buf); err != nil {
			b.Fatal(err)
		}
	}
}
