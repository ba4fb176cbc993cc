package middleware

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFabricInfo runs `fi_info -p 'verbs;ofi_rxm'`: libfabric's reliable
// datagram endpoint over the verbs provider's connections must be there
// on the softnic device.
func TestFabricInfo(t *testing.T) {
	w := newWorld(t, "libfabric-bin", "fi_info")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := combined(w.user(ctx, &w.pair.A, "fi_info", "-p", "verbs;ofi_rxm"))
	require.NoError(t, err, "fi_info -p 'verbs;ofi_rxm': %s\n%s", firstError(out), tail(out, 20))
	re := regexp.MustCompile(`(?m)^provider: verbs;ofi_rxm\n\s+fabric: .*\n\s+domain: ` + regexp.QuoteMeta(w.a.dev) +
		`\n(?:.*\n)*?\s+type: FI_EP_RDM$`)
	assert.Regexp(t, re, out, "fi_info lists no verbs;ofi_rxm RDM endpoint on %s", w.a.dev)
	// the provider listed the device the daemon serves: the daemon saw
	// fi_info's session
	assert.Regexp(t, `session started" pid=\d+ uid=65534`, w.a.log.String())
}

// fabricPingpongs are fi_pingpong's endpoint types with the provider each
// runs on: connected messages on verbs, reliable datagrams on
// verbs;ofi_rxm (ofi_rxm over verbs connections), datagrams on verbs
// (UD; a message within the path MTU).
var fabricPingpongs = []struct {
	ep, prov string
	size     int
}{
	{"msg", "verbs", 65536},
	{"rdm", "verbs;ofi_rxm", 65536},
	{"dgram", "verbs", 1024},
}

// fabricResult matches fi_pingpong's result line: size, sent, acked,
// total, time, MB/sec, usec/xfer, Mxfers/sec.
var fabricResult = regexp.MustCompile(`(?m)^(\S+)\s+(\d+)\s+=(\d+)\s+(\S+)\s+(\S+)s\s+(\S+)\s+(\S+)\s+(\S+)\s*$`)

// TestFabricPingpong runs fi_pingpong over each endpoint type, the server
// on end A and the client on end B, 100 iterations with data checks (-c).
func TestFabricPingpong(t *testing.T) {
	w := newWorld(t, "libfabric-bin", "fi_pingpong")
	port := 47592
	for _, c := range fabricPingpongs {
		port++
		t.Run(c.ep, func(t *testing.T) {
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
				c.ep, cerr, firstError(cout), serr, firstError(sout), tail(cout, 20), tail(sout, 20))
			m := fabricResult.FindStringSubmatch(cout)
			require.NotNil(t, m, "fi_pingpong printed no result:\n%s", cout)
			assert.Equal(t, fmt.Sprint(iters), m[2])
			assert.Equal(t, fmt.Sprint(iters), m[3])
			d := w.delta(t, before)
			n := int64(c.size) * int64(iters)
			carried(t, "client to server", d.b, d.a, n)
			carried(t, "server to client", d.a, d.b, n)
			t.Logf("fi_pingpong -e %s -p %s: %s", c.ep, c.prov, m[0])
		})
	}
}
