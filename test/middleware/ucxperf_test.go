package middleware

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/systest"
)

// ucxPerf is one ucx_perftest case: the test, its message size and
// iterations, and which side's device sends the payload (the client's
// for sends and puts, the server's for gets).
type ucxPerf struct {
	test        string
	size, iters int
	serverSends bool
}

// ucxPerfCases are the tests issue #33 names, short: CI runs all of them
// over both transports.
var ucxPerfCases = []ucxPerf{
	{"tag_bw", 65536, 200, false},
	{"tag_lat", 8, 1000, false},
	{"ucp_put_bw", 65536, 200, false},
	{"ucp_get", 65536, 200, true},
}

// ucxPerfFinal matches the line ucx_perftest prints at the end of a run:
// "Final: ITERS 50%ile avg overall BW-avg BW-overall rate-avg rate-overall".
var ucxPerfFinal = regexp.MustCompile(`(?m)^Final:\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)`)

// TestUCXPerftest runs ucx_perftest tag_bw, tag_lat, ucp_put_bw and
// ucp_get over UCX_TLS=rc (rc_verbs; UCX wires it up over ud_verbs) and
// over ud_verbs alone, the server on end A and the client on end B, each
// naming its device as UCX_NET_DEVICES (DEV:1); the two find each other
// over ucx_perftest's own TCP connection.
func TestUCXPerftest(t *testing.T) {
	w := newWorld(t, "ucx-utils", "ucx_perftest")
	port := 13337
	for _, tls := range []string{"rc", "ud_verbs"} {
		for _, c := range ucxPerfCases {
			port++
			t.Run(tls+"/"+c.test, func(t *testing.T) { w.ucxPerftest(t, tls, c, port) })
		}
	}
}

// ucxPerftest runs one case and returns the client's Final line.
func (w *world) ucxPerftest(t *testing.T, tls string, c ucxPerf, port int) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := func(dev string) []string {
		return []string{"env", "UCX_TLS=" + tls, "UCX_NET_DEVICES=" + dev + ":1"}
	}
	before := w.snapshot(t)
	srv := start(t, "ucx_perftest server", w.user(ctx, &w.pair.A,
		append(env(w.a.Name), "ucx_perftest", "-p", fmt.Sprint(port))...))
	listeningTCP(t, &w.pair.A, port, srv)
	cli := w.user(ctx, &w.pair.B, append(env(w.b.Name), "ucx_perftest", addr(&w.pair.A), "-p", fmt.Sprint(port),
		"-t", c.test, "-s", fmt.Sprint(c.size), "-n", fmt.Sprint(c.iters))...)
	cout, cerr := combined(cli)
	serr := srv.wait(30 * time.Second)
	sout := srv.out.String()
	require.True(t, cerr == nil && serr == nil, "ucx_perftest %s over %s: client %v: %s\nserver %v: %s\nclient said:\n%s\nserver said:\n%s",
		c.test, tls, cerr, firstError(cout), serr, firstError(sout), systest.Tail(cout, 25), systest.Tail(sout, 25))
	m := ucxPerfFinal.FindStringSubmatch(cout)
	require.NotNil(t, m, "ucx_perftest printed no Final line:\n%s", cout)
	assert.Equal(t, fmt.Sprint(c.iters), m[1], "iterations in the Final line")
	d := w.delta(t, before)
	bytes := int64(c.size) * int64(c.iters)
	if c.serverSends {
		carried(t, c.test, d.a, d.b, bytes)
	} else {
		carried(t, c.test, d.b, d.a, bytes)
	}
	if c.test == "tag_lat" {
		// a ping-pong: as many messages come back
		assert.GreaterOrEqual(t, d.a["sent_pkts"], uint64(c.iters), "tag_lat: the server's device sent fewer packets than replies")
	}
	t.Logf("ucx_perftest %s over %s, %d bytes × %d: %s", c.test, tls, c.size, c.iters, strings.Join(m[1:], " "))
	return m[1:]
}
