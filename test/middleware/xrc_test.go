package middleware

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// xrcDomainFile is where ibv_xsrq_pingpong opens its XRC domain's file,
// on both sides (0440, its creator's).
const xrcDomainFile = "/tmp/xrc_domain"

// freshXRCDomainFile removes a domain file nobody cannot open (another
// user's, from an earlier run), and the test's own at its end.
func freshXRCDomainFile(t *testing.T) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(xrcDomainFile, &st); err == nil && st.Uid != nobody {
		require.NoError(t, os.Remove(xrcDomainFile))
	}
	t.Cleanup(func() { os.Remove(xrcDomainFile) })
}

// TestXSRQPingpong runs rdma-core's ibv_xsrq_pingpong between the two
// daemons as nobody: each side opens its domain on /tmp/xrc_domain, sends to the peer's SRQ by
// number over XRC send QPs connected to the peer's receive QPs, and the
// receives land in its own SRQ, of one receive, which it posts again
// after each completion.
func TestXSRQPingpong(t *testing.T) {
	w := newWorld(t, "ibverbs-utils", "ibv_xsrq_pingpong")
	freshXRCDomainFile(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := w.snapshot(t)
	pp := func(d string, gid int, args ...string) []string {
		return append([]string{"ibv_xsrq_pingpong", "-d", d, "-g", fmt.Sprint(gid), "-n", "10", "-s", "3000", "-m", "1024"},
			args...)
	}
	srv := start(t, "server", w.user(ctx, &w.pair.A, pp(w.a.Name, w.gidIndex(t, w.a))...))
	listeningTCP(t, &w.pair.A, 18515, srv)
	cout, cerr := combined(w.user(ctx, &w.pair.B, pp(w.b.Name, w.gidIndex(t, w.b), addr(&w.pair.A))...))
	serr := srv.wait(30 * time.Second)
	sout := srv.out.String()
	require.True(t, cerr == nil && serr == nil, "client %v: %s\nserver %v: %s\nclient said:\n%s\nserver said:\n%s",
		cerr, firstError(cout), serr, firstError(sout), cout, sout)
	for _, out := range []string{cout, sout} {
		assert.Regexp(t, `local: .* SRQN [0-9a-f]{6}`, out)
		assert.Regexp(t, `remote: .* SRQN [0-9a-f]{6}`, out)
		assert.Contains(t, out, "success")
	}
	d := w.delta(t, before)
	// Ten 3000-byte messages each way at IB MTU 1024: three packets each.
	carried(t, "the client's messages", d.b, d.a, 10*3000)
	carried(t, "the server's messages", d.a, d.b, 10*3000)
}

// TestRdmaXclientXRC runs rdma-core's rdma_xserver and rdma_xclient -c x:
// the server's rdma_cm ID (port space IB) gets an XRC receive QP, and an
// XRC SRQ in the library's own domain whose number it returns in the
// accept's private data; the client's XRC send QP sends its 16 bytes to
// that SRQ.
func TestRdmaXclientXRC(t *testing.T) { runRdmaXclient(t, "x") }
