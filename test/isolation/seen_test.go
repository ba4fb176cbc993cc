package isolation

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func init() {
	roles["hold"] = holdRole
	roles["memlock"] = memlockRole
}

// holdRole opens a session on SOCK with a PD, says "held PID", and keeps
// it until its stdin closes.
func holdRole(in *bufio.Scanner) {
	c, err := dialWithin(os.Getenv("SOCK"), 10*time.Second)
	if err == nil {
		_, err = c.AllocPD()
	}
	if err != nil {
		fmt.Printf("fail: %v\n", err)
		return
	}
	fmt.Printf("held %d\n", os.Getpid())
	for in.Scan() {
	}
	c.Close()
}

// `softnic stat res` shows a user its own sessions' pids and commands,
// and other users' sessions without them; root sees all.
func TestStatShowsOwnSessions(t *testing.T) {
	w := newWorld(t)
	mine := w.startRole(t, "hold", attackerUID, "SOCK="+w.a.Sock)
	theirs := w.startRole(t, "hold", otherUID, "SOCK="+w.a.Sock)
	var minePID, theirPID int
	_, err := fmt.Sscanf(mine.next(t, time.Minute), "held %d", &minePID)
	require.NoError(t, err)
	_, err = fmt.Sscanf(theirs.next(t, time.Minute), "held %d", &theirPID)
	require.NoError(t, err)

	stat := func(uid int) map[int]string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := w.pair.A.Command("setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid),
			"--clear-groups", w.bin, "stat", "res", "-d", w.pair.A.Ifname, "--run-dir", w.runDir)
		cmd = withContext(ctx, cmd)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "softnic stat res as %d: %s", uid, out)
		pids := map[int]string{}
		line := regexp.MustCompile(`ctxn \d+ pid (\d+) comm (\S*) `)
		for _, m := range line.FindAllStringSubmatch(string(out), -1) {
			var pid int
			fmt.Sscan(m[1], &pid)
			pids[pid] = m[2]
		}
		t.Logf("softnic stat res as uid %d:\n%s", uid, out)
		return pids
	}
	seen := stat(attackerUID)
	assert.Contains(t, seen, minePID, "a user sees its own session's pid")
	assert.NotEmpty(t, seen[minePID], "and its command")
	assert.NotContains(t, seen, theirPID, "a user does not see another user's pid")
	assert.Contains(t, seen, 0, "another user's session is shown, without pid")
	root := stat(0)
	assert.Contains(t, root, minePID, "root sees every session's pid")
	assert.Contains(t, root, theirPID, "root sees every session's pid")
}

// withContext gives cmd a context, keeping its arguments and namespace.
func withContext(ctx context.Context, cmd *exec.Cmd) *exec.Cmd {
	c := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	c.Env, c.Dir = cmd.Env, cmd.Dir
	return c
}

// memlockRole lowers its own RLIMIT_MEMLOCK to 1 MiB, then registers
// regions on SOCK, saying each outcome ("ok" or the errno): 512 KiB, 768
// KiB more (past the limit unless it holds CAP_IPC_LOCK), then the second
// again after deregistering the first.
func memlockRole(*bufio.Scanner) {
	lim := &unix.Rlimit{Cur: 1 << 20, Max: 1 << 20}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, lim); err != nil {
		fmt.Printf("fail: setrlimit: %v\n", err)
		return
	}
	c, err := dialWithin(os.Getenv("SOCK"), 10*time.Second)
	if err != nil {
		fmt.Printf("fail: %v\n", err)
		return
	}
	defer c.Close()
	pd, err := c.AllocPD()
	if err != nil {
		fmt.Printf("fail: %v\n", err)
		return
	}
	buf := make([]byte, 4<<20)
	first, err := c.RegMR(pd, buf[:512<<10], 0)
	fmt.Println("512K:", errnoName(err))
	_, err = c.RegMR(pd, buf[1<<20:1<<20+768<<10], 0)
	fmt.Println("768K more:", errnoName(err))
	if err != nil && first.Handle != 0 {
		c.DeregMR(first.Handle)
		_, err = c.RegMR(pd, buf[1<<20:1<<20+768<<10], 0)
		fmt.Println("768K after dereg:", errnoName(err))
	}
}

// Registered bytes count against the process's RLIMIT_MEMLOCK, as the
// kernel counts pinned pages: ENOMEM past it, unless the process may lock
// without bound (CAP_IPC_LOCK).
func TestRegisteredBytesCountAgainstMemlock(t *testing.T) {
	w := newWorld(t)
	plain := w.startRole(t, "memlock", attackerUID, "SOCK="+w.a.Sock)
	assert.Equal(t, "512K: -", plain.next(t, time.Minute))
	assert.Equal(t, "768K more: ENOMEM", plain.next(t, time.Minute))
	assert.Equal(t, "768K after dereg: -", plain.next(t, time.Minute))

	capable := w.startRoleWith(t, "memlock", attackerUID, &syscall.SysProcAttr{AmbientCaps: []uintptr{unix.CAP_IPC_LOCK}},
		"SOCK="+w.a.Sock)
	assert.Equal(t, "512K: -", capable.next(t, time.Minute))
	assert.Equal(t, "768K more: -", capable.next(t, time.Minute), "CAP_IPC_LOCK lifts the bound")

	// In a user namespace of its own a user holds every capability, but
	// only there: the bound holds, as the kernel's capable() asks the
	// initial namespace.
	nsRoot := w.startRoleVia(t, "memlock", attackerUID, nil, []string{"unshare", "-Ur"}, "SOCK="+w.a.Sock)
	assert.Equal(t, "512K: -", nsRoot.next(t, time.Minute))
	assert.Equal(t, "768K more: ENOMEM", nsRoot.next(t, time.Minute), "CAP_IPC_LOCK of a user namespace lifts nothing")
}
