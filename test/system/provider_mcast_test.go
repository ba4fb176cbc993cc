package system

import (
	"context"
	"testing"
	"time"
)

// TestProviderUDMulticast runs testdata/ud_mcast.c on both ends, as user
// nobody through the provider: ibv_attach_mcast and ibv_detach_mcast
// (attach_mcast, detach_mcast) with the kernel's refusals, the device's
// multicast caps, and four datagrams to the group from one end, which the
// two QPs attached on the other end and the two on the sender's own
// device each take.
func TestProviderUDMulticast(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "ud_mcast")
	recv := startCProgram(t, w.command(ctx, w.b, prog, "recv"))
	recv.waitForPrefix(t, "ready")
	send := startCProgram(t, w.command(ctx, w.a, prog, "send"))
	info := send.waitForPrefix(t, "info ")
	recv.tell(t, info)
	send.waitForPrefix(t, "go")
	send.tell(t, "go")
	recv.finish(t, 9)
	send.finish(t, 14)
	w.stop(t)
}
