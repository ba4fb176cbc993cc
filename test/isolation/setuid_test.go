package isolation

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce"
)

// fixedAddr is where the attacker and the setuid helper both map a page:
// far from where the kernel places mappings, so MAP_FIXED_NOREPLACE finds
// it free in both.
const fixedAddr = 0x7e5000000000

const page = 4096

// TestExecOfSetuidProgramEndsAccess attacks as issue #32 did: an
// unprivileged user's program (testdata/attacker.c, through the provider)
// registers a page at fixedAddr and connects two RC QPs to a peer on the
// other end (this test, as a client of the other daemon); it forks, the
// parent execs a setuid-root program that maps its own secret page at
// fixedAddr and keeps a secret on its stack (testdata/setuid_helper.c), and
// the child keeps the session. Then:
//
//   - the peer's RDMA READ and WRITE at fixedAddr with the rkey of before
//     the exec must not complete successfully, the READ must not bring the
//     secret, and the helper's page must be unchanged (/proc/PID/mem);
//   - the child's registrations of the helper's page and of its stack
//     secret must fail;
//   - the child's registrations of pages the helper maps and of pages
//     nothing maps must all give the same answer (no ASLR oracle).
//
// The attacker turns off the provider's memory sharing
// (SOFTNIC_SHARE_MR=0), so that its page is reached where it is rather
// than through a memfd: the daemon's own way into a process's memory is
// what is attacked.
func TestExecOfSetuidProgramEndsAccess(t *testing.T) {
	w := newWorld(t)
	attacker := w.compileC(t, "attacker", "-libverbs")
	helper := w.compileC(t, "setuid_helper")
	require.NoError(t, os.Chown(helper, 0, 0))
	require.NoError(t, os.Chmod(helper, os.ModeSetuid|0o755))
	var fs unix.Statfs_t
	require.NoError(t, unix.Statfs(helper, &fs))
	require.Zero(t, fs.Flags&unix.ST_NOSUID, "%s is on a nosuid filesystem: the helper would not run as root", helper)
	fifo := filepath.Join(userDir(t, attackerUID), "child.in")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	require.NoError(t, os.Chown(fifo, attackerUID, attackerUID))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := w.userCommand(ctx, &w.pair.A, attackerUID, attacker, helper, fmt.Sprintf("%#x", fixedAddr), fifo)
	cmd.Env = append(os.Environ(), "SOFTNIC_SHARE_MR=0")
	p := startProgram(t, "attacker", cmd)

	var pid, rkey, gidx int
	var qpn [2]uint32
	l := p.next(t, time.Minute)
	_, err := fmt.Sscanf(l, "attacker pid=%d qpn=%d,%d rkey=%d gid=%d", &pid, &qpn[0], &qpn[1], &rkey, &gidx)
	require.NoError(t, err, "attacker said %q", l)

	// The peer: this test, as root, through the other end's daemon.
	peer, err := newEndpoint(w.b.Sock, w.pair.B.Addr4(), 2*page)
	require.NoError(t, err)
	t.Cleanup(peer.close)
	qpRead, err := peer.newQP()
	require.NoError(t, err)
	qpWrite, err := peer.newQP()
	require.NoError(t, err)
	p.send(t, fmt.Sprintf("peer %d %d %s", qpRead.QPN, qpWrite.QPN, hex.EncodeToString(peer.gid[:])))
	gidA := roce.GIDFromAddr(w.pair.A.Addr4())
	// Retry count 3: a request to a QP that is gone ends in an error.
	require.NoError(t, peer.connectRC(qpRead, qpn[0], gidA, 3))
	require.NoError(t, peer.connectRC(qpWrite, qpn[1], gidA, 3))
	require.Equal(t, "connected", p.next(t, time.Minute))

	// Before the exec the rkey reaches the attacker's page: the rig works.
	mine := bytes.Repeat([]byte("attacker page "), page)[:page]
	require.Equal(t, ibv.WCSuccess, peer.rdma(t, qpRead, ibv.WRRDMARead, 0, uint32(rkey)))
	require.Equal(t, mine, peer.buf[:page], "the READ before the exec")
	require.Equal(t, ibv.WCSuccess, peer.rdma(t, qpWrite, ibv.WRRDMAWrite, 0, uint32(rkey)))

	p.send(t, "fork")
	var childPID, helperPID, uid, euid int
	var pageAddr, stackAddr uint64
	for childPID == 0 || helperPID == 0 {
		l := p.next(t, time.Minute)
		if _, err := fmt.Sscanf(l, "child pid=%d", &childPID); err == nil {
			continue
		}
		_, err := fmt.Sscanf(l, "helper pid=%d uid=%d euid=%d page=%v stack=%v", &helperPID, &uid, &euid, &pageAddr, &stackAddr)
		require.NoError(t, err, "attacker or helper said %q", l)
	}
	t.Cleanup(func() { syscall.Kill(childPID, syscall.SIGKILL) })
	require.Equal(t, pid, helperPID, "the helper runs in the attacker's process")
	require.Equal(t, []int{attackerUID, 0}, []int{uid, euid}, "the helper is not setuid root")
	require.EqualValues(t, fixedAddr, pageAddr)
	secretPage, secretStack := readMem(t, helperPID, pageAddr), readMem(t, helperPID, stackAddr)
	require.NotEqual(t, mine, secretPage)
	require.NotEqual(t, make([]byte, page), secretStack, "the helper's stack secret")

	// The pre-exec rkey, after the exec.
	clear(peer.buf)
	status := peer.rdma(t, qpRead, ibv.WRRDMARead, 0, uint32(rkey))
	assert.NotEqual(t, ibv.WCSuccess, status, "RDMA READ of the setuid program's page after the exec: %v", status)
	assert.False(t, leaks(peer.buf[:page], secretPage), "the READ brought the setuid program's secret page: "+
		"it begins %x, the READ brought %x", secretPage[:16], peer.buf[:16])
	copy(peer.buf[page:], bytes.Repeat([]byte("written by uid 65534 "), page))
	status = peer.rdma(t, qpWrite, ibv.WRRDMAWrite, page, uint32(rkey))
	assert.NotEqual(t, ibv.WCSuccess, status, "RDMA WRITE into the setuid program's page after the exec: %v", status)
	now := readMem(t, helperPID, pageAddr)
	assert.True(t, bytes.Equal(secretPage, now), "the setuid program's page changed: %s", changed(secretPage, now))

	// The child registers the helper's memory.
	ch, err := os.OpenFile(fifo, os.O_RDWR, 0) // not O_WRONLY: that would wait for the child to open it
	require.NoError(t, err)
	defer ch.Close()
	reg := func(addr uint64, access int) string {
		_, err := fmt.Fprintf(ch, "reg %#x %d %d\n", addr, page, access)
		require.NoError(t, err)
		l := p.next(t, time.Minute)
		got, ok := strings.CutPrefix(l, fmt.Sprintf("reg %#x ", addr))
		require.True(t, ok, "the child said %q", l)
		return strings.Fields(got)[0]
	}
	rw := int(ibv.AccessLocalWrite | ibv.AccessRemoteRead | ibv.AccessRemoteWrite)
	assert.NotEqual(t, "ok", reg(pageAddr, rw), "the child registered the setuid program's page")
	assert.NotEqual(t, "ok", reg(stackAddr, rw), "the child registered the setuid program's stack secret")

	// The ASLR oracle: mapped and unmapped pages get the same answers.
	// They are probed in pairs, a mapped page then an unmapped one, so
	// that the answers of a pair are given in the same state of the
	// session. The daemon ends the session on its own check of the exec,
	// at a moment of its choosing: only the pair it falls within may
	// differ, and only as a mapped page answered before the end and an
	// unmapped one after it.
	mapped, unmapped := probes(t, helperPID, childPID)
	onMapped, onUnmapped := map[string]int{}, map[string]int{}
	var differ []string
	endedWithin := 0 // pairs whose mapped page answered before the end, the unmapped one after it
	for i := range max(len(mapped), len(unmapped)) {
		a, b := mapped[i%len(mapped)], unmapped[i%len(unmapped)]
		ra, rb := answer(reg(a, 0)), answer(reg(b, 0))
		onMapped[ra]++
		onUnmapped[rb]++
		switch {
		case ra == rb:
		case rb == sessionEnded && endedWithin == 0:
			endedWithin++
		default:
			differ = append(differ, fmt.Sprintf("pair %d: mapped %#x %s, unmapped %#x %s", i, a, ra, b, rb))
		}
	}
	t.Logf("the child's registrations: %d pages the helper maps: %v; %d pages nothing maps: %v", len(mapped), onMapped,
		len(unmapped), onUnmapped)
	assert.Zero(t, onMapped["ok"], "the child registered pages of the setuid program")
	assert.Empty(t, differ, "the child's registrations tell the setuid program's mapped pages from unmapped ones")

	fmt.Fprintln(ch, "quit")
	p.in.Close() // the helper's stdin: it exits
	p.exit(t)
}

// answer is what a registration's reply says about the address: the
// errnos of a socket whose session the daemon ended (on its own check of
// the exec, at a moment of its choosing) say only that, whichever of them
// the one probe in flight then got.
func answer(reply string) string {
	switch reply {
	case fmt.Sprintf("err=%d", unix.EPIPE), fmt.Sprintf("err=%d", unix.ECONNRESET):
		return sessionEnded
	}
	return reply
}

const sessionEnded = "session-ended"

// rdma posts one signaled READ into, or WRITE from, the peer's buffer at
// off, of a page at fixedAddr with rkey, and returns its status.
func (e *endpoint) rdma(t *testing.T, qp *session.QP, op ibv.WROpcode, off int, rkey uint32) ibv.WCStatus {
	t.Helper()
	require.NoError(t, qp.PostSend(&ibv.SendWR{ID: uint64(op), Opcode: op, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{e.mr.SGE(off, page)}, RemoteAddr: fixedAddr, RKey: rkey}))
	wcs, err := e.poll(1, time.Minute)
	require.NoError(t, err, "%v", op)
	t.Logf("%v at %#x: %v", op, fixedAddr, wcs[0].Status)
	return wcs[0].Status
}

// changed says how much of a page changed, and how it begins now.
func changed(before, after []byte) string {
	n := 0
	for i := range before {
		if before[i] != after[i] {
			n++
		}
	}
	return fmt.Sprintf("%d of %d bytes differ; it begins %q now", n, len(before), after[:32])
}

// leaks reports whether any 32 bytes of secret are in got.
func leaks(got, secret []byte) bool {
	for i := 0; i+32 <= len(secret); i += 32 {
		if bytes.Contains(got, secret[i:i+32]) {
			return true
		}
	}
	return false
}

// readMem reads a page of pid's memory, as root.
func readMem(t *testing.T, pid int, addr uint64) []byte {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, page)
	_, err = f.ReadAt(b, int64(addr))
	require.NoError(t, err)
	return b
}
