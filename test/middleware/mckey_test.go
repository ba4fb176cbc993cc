package middleware

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
)

// TestMckey runs rdma-core's mckey between the two daemons, each way, as
// nobody: the receiver joins an IPv4 group (rdma_join_multicast), which
// the daemon's interface then joins too (the kernel sends the IGMP
// report and lists the group under `ip maddr`); the sender joins it
// send-only (-s) and sends its ten 100-byte datagrams to the group's
// QPN, which the receiver must all take.
func TestMckey(t *testing.T) {
	w := newWorld(t, "rdmacm-utils", "mckey")
	for i, dir := range []struct {
		name     string
		from, to *netnstest.End
	}{{"a-to-b", &w.pair.A, &w.pair.B}, {"b-to-a", &w.pair.B, &w.pair.A}} {
		t.Run(dir.name, func(t *testing.T) {
			group := fmt.Sprintf("239.47.0.%d", 10+i)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			before := w.snapshot(t)
			recv := start(t, "mckey", w.user(ctx, dir.to, "mckey", "-m", group, "-b", addr(dir.to)))
			joined := func() bool {
				if recv.exited() {
					return true
				}
				out, _ := dir.to.Command("ip", "maddr", "show", "dev", dir.to.Ifname).Output()
				return strings.Contains(string(out), group)
			}
			require.Eventually(t, joined, 30*time.Second, 20*time.Millisecond, "the receiver's interface never joined %s:\n%s",
				group, recv.out.String())
			require.False(t, recv.exited(), "mckey ended before it joined: %v\n%s", recv.err, recv.out.String())
			sout, serr := combined(w.user(ctx, dir.from, "mckey", "-m", group, "-b", addr(dir.from), "-s"))
			require.NoError(t, serr, "sender: %s\n%s", firstError(sout), sout)
			rerr := recv.wait(30 * time.Second)
			rout := recv.out.String()
			require.NoError(t, rerr, "receiver: %s\n%s", firstError(rout), rout)
			for _, out := range []string{sout, rout} {
				assert.Contains(t, out, "joined dgid: ::ffff:"+group)
				assert.Contains(t, out, "test complete")
			}
			d := w.delta(t, before)
			sent, rcvd := d.a, d.b
			if dir.from == &w.pair.B {
				sent, rcvd = d.b, d.a
			}
			carried(t, "the ten datagrams, a packet each", sent, rcvd, 10*maxPMTU)
			left := func() bool {
				out, _ := dir.to.Command("ip", "maddr", "show", "dev", dir.to.Ifname).Output()
				return !strings.Contains(string(out), group)
			}
			assert.Eventually(t, left, 10*time.Second, 20*time.Millisecond, "the receiver's interface stayed in %s", group)
		})
	}
}
