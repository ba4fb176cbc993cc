package middleware

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/systest"
)

// fabricPingpong is one fi_pingpong run: its endpoint type, the provider
// it runs on and its message size.
type fabricPingpong struct {
	ep, prov string
	size     int
}

// fabricResult matches fi_pingpong's result line: size, sent, acked,
// total, time, MB/sec, usec/xfer, Mxfers/sec.
var fabricResult = regexp.MustCompile(`(?m)^(\S+)\s+(\d+)\s+=(\d+)\s+(\S+)\s+(\S+)s\s+(\S+)\s+(\S+)\s+(\S+)\s*$`)

// TestFabricPingpongDgram runs fi_pingpong over the verbs provider's
// datagram endpoint (UD; a message within the path MTU), the server on
// end A and the client on end B, 100 iterations with data checks (-c).
func TestFabricPingpongDgram(t *testing.T) {
	w := newWorld(t, "libfabric-bin", "fi_pingpong")
	w.fabricPingpong(t, fabricPingpong{"dgram", "verbs", 1024}, 47592)
}

// fabricPingpong runs c, fi_pingpong's TCP exchange on port.
func (w *world) fabricPingpong(t *testing.T, c fabricPingpong, port int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	iters := 100
	args := []string{"fi_pingpong", "-p", c.prov, "-e", c.ep, "-I", fmt.Sprint(iters), "-S", fmt.Sprint(c.size), "-c"}
	before := w.snapshot(t)
	srv := start(t, "fi_pingpong server", w.user(ctx, &w.pair.A, append(args, "-B", fmt.Sprint(port))...))
	listeningTCP(t, &w.pair.A, port, srv)
	cout, cerr := combined(w.user(ctx, &w.pair.B, append(args, "-P", fmt.Sprint(port), addr(&w.pair.A))...))
	serr := srv.wait(30 * time.Second)
	sout := srv.out.String()
	require.True(t, cerr == nil && serr == nil, "fi_pingpong -e %s: client %v: %s\nserver %v: %s\nclient said:\n%s\nserver said:\n%s",
		c.ep, cerr, firstError(cout), serr, firstError(sout), systest.Tail(cout, 20), systest.Tail(sout, 20))
	m := fabricResult.FindStringSubmatch(cout)
	require.NotNil(t, m, "fi_pingpong printed no result:\n%s", cout)
	assert.Equal(t, fmt.Sprint(iters), m[2])
	assert.Equal(t, fmt.Sprint(iters), m[3])
	d := w.delta(t, before)
	n := int64(c.size) * int64(iters)
	carried(t, "client to server", d.b, d.a, n)
	carried(t, "server to client", d.a, d.b, n)
	t.Logf("fi_pingpong -e %s -p %s: %s", c.ep, c.prov, m[0])
}
