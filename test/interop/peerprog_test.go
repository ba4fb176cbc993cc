package interop

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netns"

	"github.com/softnic/softnic/internal/netnstest"
)

// The peer programs of testdata (peer.h): C programs that run unchanged
// on softnic's side, through softnic exec as nobody, and in the rxe guest.
// They are built here against Debian 12's libibverbs-dev; the guest's
// libibverbs.so.1 (rdma-core 44 in bookworm, 56 in trixie) keeps that
// ABI. Their two sides meet over TCP, and each says what it checked, one
// line each ("ok  " or "FAIL"), and exits with the number that failed.

// requirePeerBuild skips the test where the peer programs cannot be built.
func requirePeerBuild(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install gcc libibverbs-dev", "cc")
}

// buildPeerProgram compiles testdata/NAME.c into dir (which every user
// may read: softnic exec runs it as nobody) and returns its path and its
// bytes (for the guest).
func buildPeerProgram(t *testing.T, ctx context.Context, dir, name string) (string, []byte) {
	t.Helper()
	prog := filepath.Join(dir, name)
	out, err := exec.CommandContext(ctx, "cc", "-O1", "-Wall", "-Werror", "-o", prog,
		filepath.Join("testdata", name+".c"), "-libverbs").CombinedOutput()
	require.NoError(t, err, "cc %s: %s", name, out)
	require.NoError(t, os.Chmod(prog, 0o755))
	data, err := os.ReadFile(prog)
	require.NoError(t, err)
	return prog, data
}

// peerScript is guest shell that runs a peer program with args under a
// timeout in the section "@@ name as role", failing it ("!! FAILED") if
// the program fails.
func peerScript(name, role, prog string, args ...string) string {
	cmd := prog + " " + strings.Join(args, " ")
	return fmt.Sprintf("echo '@@ %s as %s'\ntimeout -s TERM 300 %s 2>&1 || echo \"!! FAILED: %s: $?\"\n", name, role, cmd, cmd)
}

// checkPeerOutput checks a peer program's output: no check failed and
// want of them passed.
func checkPeerOutput(t *testing.T, who, out string, want int) {
	t.Helper()
	assert.NotContainsf(t, out, "FAIL", "%s failed checks:\n%s", who, out)
	assert.Equalf(t, want, strings.Count(out, "\nok  ")+btoi(strings.HasPrefix(out, "ok  ")),
		"%s: every check ran:\n%s", who, out)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// dialIn connects to TCP addr from network namespace ns.
func dialIn(ns, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	h, err := netns.GetFromName(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		return nil, err
	}
	defer netns.Set(orig)
	return net.Dial("tcp4", addr)
}
