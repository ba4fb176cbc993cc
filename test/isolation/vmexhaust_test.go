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

	"github.com/softnic/softnic/daemon/client/session"
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
	before := memoryFigures(w.a.Pid())

	a := w.startRole(t, "vmhog", attackerUID, "SOCK="+w.a.Sock)
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
	t.Logf("memory before: %s; while A holds: %s", before, memoryFigures(w.a.Pid()))
	for i, err := range during {
		assert.NoError(t, err, "user B's transfer %d, while A shared memory", i+1)
	}
	m := regexp.MustCompile(`^holding sessions=(\d+) shares=(\d+) bytes=(\d+) last=(.*) errno=(\S+) \(new sessions: .*\)$`).FindStringSubmatch(said)
	require.NotNil(t, m, "user A said %q", said)
	assert.Equal(t, "ENOMEM", m[5], "user A's refusal: %s", m[4])

	assert.NoError(t, b.round(1000), "user B's transfer while A holds its shared memory")
	alive(t, w.a, "while user A holds its shared memory")
	a.exit(t)
	assert.NoError(t, b.round(1001), "user B's transfer after A exited")
	again := w.startRole(t, "session", attackerUID, "SOCK="+w.a.Sock)
	assert.Equal(t, "ok", again.next(t, time.Minute), "a new session of user A after A exited")
	alive(t, w.a, "at the end")
	t.Logf("memory at the end: %s", memoryFigures(w.a.Pid()))
}

func init() { roles["vmhog"] = vmHogRole }

// vmHogSpan is the size of the vmhog role's memfd: 64 TiB, half of an
// x86-64 process's address space; sparse, it takes no memory.
const vmHogSpan = 1 << 46

// vmHogRole makes the daemon on SOCK map a sparse memfd's pages for it
// (share_memory). The memfd (vmHogSpan bytes, sealed against shrinking)
// is mapped here MAP_SHARED|MAP_NORESERVE from offset 0 several times, as
// share_memory has it: 32 TiB, 16 TiB, ... down to a page (64 TiB in all,
// which leaves this process room). Each mapping is shared in as many
// sessions as the daemon accepts it, largest first, so that every hole of
// the daemon's address space gets filled. It says "holding sessions=S
// shares=N bytes=B last=ERR errno=E" (the last share_memory refusal); on
// "top up" it fills again what was freed meanwhile (by other users'
// sessions ending), starting with a session it opened first and kept for
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
	var ladder [][]byte
	for size := vmHogSpan / 2; size >= os.Getpagesize(); size /= 2 {
		m, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE)
		if err != nil {
			fail("mmap", err)
			return
		}
		ladder = append(ladder, m)
	}
	sock := os.Getenv("SOCK")
	type held struct {
		c    *session.Conn
		used map[int]bool // the ladder's mappings it shared
	}
	// The reserve: once the daemon's address space is full, a new session
	// is refused, and a session shares each mapping once only.
	reserve, err := dialWithin(sock, 10*time.Second)
	if err != nil {
		fail("reserve session", err)
		return
	}
	var sessions []*held
	var shared uint64
	shares := 0
	var refusal, dialed error
	pick := func(i int) *held {
		for _, s := range sessions {
			if !s.used[i] {
				return s
			}
		}
		if dialed != nil || len(sessions) >= 64 {
			return nil
		}
		c, err := dialWithin(sock, 10*time.Second)
		if err != nil {
			dialed = fmt.Errorf("session %d: %w", len(sessions)+2, err)
			return nil
		}
		s := &held{c, map[int]bool{}}
		sessions = append(sessions, s)
		return s
	}
	hog := func() {
	levels:
		for i, m := range ladder {
			for {
				s := pick(i)
				if s == nil {
					break
				}
				if _, err := s.c.ShareMemory(m, fd); err != nil {
					refusal = err
					if errors.Is(err, session.ErrDaemonGone) {
						break levels
					}
					break
				}
				s.used[i] = true
				shared += uint64(len(m))
				shares++
			}
		}
		n := len(sessions)
		if reserve != nil {
			n++
		}
		fmt.Printf("holding sessions=%d shares=%d bytes=%d last=%v errno=%s (new sessions: %v)\n", n, shares, shared,
			refusal, errnoName(refusal), dialed)
	}
	hog()
	for in.Scan() {
		if in.Text() == "top up" {
			if reserve != nil {
				sessions = append([]*held{{reserve, map[int]bool{}}}, sessions...)
				reserve, dialed = nil, nil
			}
			hog()
		}
	}
	for _, s := range sessions {
		s.c.Close()
	}
	if reserve != nil {
		reserve.Close()
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
