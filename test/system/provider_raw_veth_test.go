package system

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/netnstest"
)

// TestProviderRawPacketFlow runs testdata/raw_flow.c through the provider
// between two daemons on veth: as root, a raw packet QP on A sends a
// frame its peer's flow does not match, then one it does, and the raw QP
// on B gets the second alone, whole (the XDP program redirected it); as
// user nobody, raw packet QPs and receive work queues are EPERM.
func TestProviderRawPacketFlow(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "raw_flow")
	asRoot := func(end *netnstest.End, argv ...string) *exec.Cmd {
		args := append([]string{"netns", "exec", end.Namespace, w.bin, "exec", "--run-dir", w.runDir, "-d", end.Ifname, "--"},
			argv...)
		return exec.CommandContext(ctx, "ip", args...)
	}
	recv := startCProgram(t, asRoot(w.b, prog, "recv"))
	recv.waitFor(t, "ready")
	startCProgram(t, asRoot(w.a, prog, "send")).finish(t, 5)
	recv.resume(t)
	recv.finish(t, 8)
	w.runuser = true
	startCProgram(t, w.command(ctx, w.a, prog, "eperm")).finish(t, 4)
	w.stop(t)
}
