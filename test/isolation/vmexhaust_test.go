package isolation

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client"
)

// TestAddressSpaceExhaustionLeavesOthersServed: user A (65534) makes the
// daemon map sparse memfds (share_memory), as many and as large as it
// accepts, over several sessions, until it refuses; user B (65533) keeps
// moving data between the two ends' daemons meanwhile, while A holds
// everything, and after A exited, when a new session of A is served too;
// the daemon must stay up, and A's refusal be ENOMEM. Issue #32 saw the
// daemon map 128 TiB for one user, other users' hello fail with ENOMEM, and
// the Go runtime crash (SIGSEGV in the GC). The memfds are sparse: the
// test logs the machine's available memory and the daemon's before and
// after, which must barely move.
func TestAddressSpaceExhaustionLeavesOthersServed(t *testing.T) {
	noCores(t)
	w := newWorld(t)
	b := w.startRole(t, "transfer", otherUID, w.transferEnv()...)
	require.NoError(t, b.round(0), "user B's transfer before the attack")
	before := memoryFigures(w.a.cmd.Process.Pid)

	a := w.startRole(t, "vmhog", attackerUID, "SOCK="+w.a.sock)
	// B's transfers while A works: each must succeed, however many fit.
	held := make(chan string, 1)
	go func() {
		l, err := a.read(5 * time.Minute)
		if err != nil {
			l = err.Error()
		}
		held <- l
	}()
	var during []error
	var said string
	for k := 1; said == ""; k++ {
		during = append(during, b.round(k))
		select {
		case said = <-held:
		default:
		}
	}
	// What B's last sessions freed, A takes again.
	a.send(t, "top up")
	t.Logf("user A: %s; topped up: %s; user B's transfers meanwhile: %d", said, a.next(t, 5*time.Minute), len(during))
	t.Logf("memory before: %s; while A holds: %s", before, memoryFigures(w.a.cmd.Process.Pid))
	for i, err := range during {
		assert.NoError(t, err, "user B's transfer %d, while A shared memory", i+1)
	}
	m := regexp.MustCompile(`^holding sessions=(\d+) shares=(\d+) bytes=(\d+) last=(.*) errno=(\S+)$`).FindStringSubmatch(said)
	require.NotNil(t, m, "user A said %q", said)
	assert.Equal(t, "ENOMEM", m[5], "user A's refusal: %s", m[4])

	assert.NoError(t, b.round(1000), "user B's transfer while A holds its shared memory")
	w.a.alive(t, "while user A holds its shared memory")
	a.exit(t)
	assert.NoError(t, b.round(1001), "user B's transfer after A exited")
	again := w.startRole(t, "session", attackerUID, "SOCK="+w.a.sock)
	assert.Equal(t, "ok", again.next(t, time.Minute), "a new session of user A after A exited")
	w.a.alive(t, "at the end")
	t.Logf("memory at the end: %s", memoryFigures(w.a.cmd.Process.Pid))
}

func init() { roles["vmhog"] = vmHogRole }

// vmHogSpan is the size of the vmhog role's memfd: 64 TiB, half of an
// x86-64 process's address space; sparse, it takes no memory.
const vmHogSpan = 1 << 46

// vmHogRole makes the daemon on SOCK map a sparse memfd's pages for it
// (share_memory): one memfd of vmHogSpan bytes, sealed against
// shrinking, mapped MAP_SHARED|MAP_NORESERVE here once, and shared in
// pieces, as large as the daemon accepts (halving after a refusal, down to
// a page: an attacker fills every hole of the daemon's address space),
// over as many sessions as it takes, until the daemon refuses a page or a
// session. It says "holding sessions=S shares=N bytes=B last=ERR
// errno=E"; on "top up" it fills again what was freed meanwhile (by other
// users' sessions ending), through a session it opened first and kept for
// that, and says "holding ..." again; it holds all until its stdin closes.
func vmHogRole(in *bufio.Scanner) {
	fail := func(what string, err error) { fmt.Printf("fail: %s: %v\n", what, err) }
	fd, err := unix.MemfdCreate("softnic-vmhog", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		fail("memfd_create", err)
		return
	}
	if err := unix.Ftruncate(fd, vmHogSpan); err != nil {
		fail("ftruncate", err)
		return
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		fail("seal", err)
		return
	}
	mem, err := unix.Mmap(fd, 0, vmHogSpan, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE)
	if err != nil {
		fail("mmap", err)
		return
	}
	sock := os.Getenv("SOCK")
	// A session kept for the top-up, with room for a share of any size:
	// once the daemon's address space is full, a new one is refused.
	reserve, err := dialWithin(sock, 10*time.Second)
	if err != nil {
		fail("reserve session", err)
		return
	}
	conns := []*client.Conn{reserve}
	var c *client.Conn
	var shared uint64
	shares, off := 0, 0
	hog := func() {
		var last error
		for size := vmHogSpan; len(conns) < 64; {
			if c == nil || off+size > vmHogSpan {
				var err error
				if c, err = dialWithin(sock, 10*time.Second); err != nil {
					last = fmt.Errorf("session %d: %w", len(conns)+1, err)
					break
				}
				conns, off = append(conns, c), 0
			}
			_, last = c.ShareMemory(mem[off:off+size], fd)
			if last == nil {
				off += size
				shared += uint64(size)
				shares++
				continue
			}
			if errors.Is(last, client.ErrDaemonGone) || size <= os.Getpagesize() {
				break
			}
			size /= 2
		}
		fmt.Printf("holding sessions=%d shares=%d bytes=%d last=%v errno=%s\n", len(conns), shares, shared, last, errnoName(last))
	}
	hog()
	for in.Scan() {
		if in.Text() == "top up" {
			if reserve != nil {
				c, off, reserve = reserve, 0, nil
			}
			hog()
		}
	}
	for _, c := range conns {
		c.Close()
	}
}

// memoryFigures says how much memory the machine has available and the
// daemon's address space, resident set and page tables.
func memoryFigures(pid int) string {
	field := func(file, name string) string {
		data, err := os.ReadFile(file)
		if err != nil {
			return "?"
		}
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, name+":"); ok {
				return strings.TrimSpace(v)
			}
		}
		return "?"
	}
	status := fmt.Sprintf("/proc/%d/status", pid)
	return fmt.Sprintf("MemAvailable %s, daemon VmSize %s VmRSS %s VmPTE %s", field("/proc/meminfo", "MemAvailable"),
		field(status, "VmSize"), field(status, "VmRSS"), field(status, "VmPTE"))
}
