// Package memchild runs the calling test binary again as a child process
// whose memory the test reaches from outside, as the daemon reaches its
// clients' (internal/procmem): the child holds a 1 MiB buffer on its heap,
// 8-byte aligned, and a read-only page, and answers commands on its
// standard input.
//
//	func TestMain(m *testing.M) {
//		if memchild.Serve() {
//			return
//		}
//		os.Exit(m.Run())
//	}
package memchild

import (
	"bufio"
	"encoding/hex"
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

const envVar = "SOFTNIC_MEMCHILD"

// Size is the size of the child's buffer.
const Size = 1 << 20

// buffer is the child's memory: on the heap (a stack may move) and 8-byte
// aligned for atomics.
var buffer = make([]uint64, Size/8)

// Serve serves the parent's commands and reports true if this process is
// a child; TestMain then returns without running the tests.
func Serve() bool {
	if os.Getenv(envVar) == "" {
		return false
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&buffer[0])), Size)
	ro, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		panic(err)
	}
	if os.Getenv(envVar) == "exec" {
		fmt.Println(uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&ro[0])))
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		arg := func(i int) int { v, _ := strconv.Atoi(f[i]); return v }
		switch f[0] {
		case "addr":
			fmt.Println(uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&ro[0])))
		case "dump":
			fmt.Println(hex.EncodeToString(buf[arg(1) : arg(1)+arg(2)]))
		case "exec":
			// The same program again: a new address space, likely with
			// its buffer at the same address (Go's heap starts at a fixed
			// one).
			// It says its addresses unasked, so that the parent sends
			// nothing the old program might read first.
			os.Setenv(envVar, "exec")
			err := unix.Exec("/proc/self/exe", os.Args, os.Environ())
			fmt.Println("exec:", err)
		case "fill":
			for i := range buf[arg(1) : arg(1)+arg(2)] {
				buf[arg(1)+i] = byte(arg(3))
			}
			fmt.Println("ok")
		}
	}
	return true
}

// Child is a running child process.
type Child struct {
	Cmd *exec.Cmd
	// Buf is the address of the child's buffer, RO that of its read-only
	// page.
	Buf, RO uint64
	in      io.WriteCloser
	out     *bufio.Scanner
}

// Start starts a child; it is killed when the test ends.
func Start(t testing.TB) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envVar+"=1")
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &Child{Cmd: cmd, in: in, out: bufio.NewScanner(out)}
	c.out.Buffer(nil, 4*Size)
	t.Cleanup(c.Kill)
	_, err = fmt.Sscan(c.ask(t, "addr"), &c.Buf, &c.RO)
	require.NoError(t, err)
	return c
}

// Pid returns the child's pid.
func (c *Child) Pid() int { return c.Cmd.Process.Pid }

// Exec makes the child exec itself and returns once the new program
// answers, with its buffer's and read-only page's addresses updated.
func (c *Child) Exec(t testing.TB) {
	t.Helper()
	_, err := fmt.Sscan(c.ask(t, "exec"), &c.Buf, &c.RO)
	require.NoError(t, err)
}

// Kill kills the child and waits for it (after which its pid may be
// reused).
func (c *Child) Kill() {
	c.in.Close()
	c.Cmd.Process.Kill()
	c.Cmd.Wait()
}

func (c *Child) ask(t testing.TB, format string, args ...any) string {
	t.Helper()
	_, err := fmt.Fprintf(c.in, format+"\n", args...)
	require.NoError(t, err)
	require.True(t, c.out.Scan(), "the child did not answer %q", format)
	return c.out.Text()
}

// Bytes returns n bytes of the child's buffer from offset off.
func (c *Child) Bytes(t testing.TB, off, n int) []byte {
	t.Helper()
	b, err := hex.DecodeString(c.ask(t, "dump %d %d", off, n))
	require.NoError(t, err)
	return b
}

// Fill sets n bytes of the child's buffer from offset off to v.
func (c *Child) Fill(t testing.TB, off, n int, v byte) {
	t.Helper()
	require.Equal(t, "ok", c.ask(t, "fill %d %d %d", off, n, v))
}
