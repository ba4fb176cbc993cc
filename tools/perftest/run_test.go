package perftest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/tools/oob"
	"github.com/softnic/softnic/verbs"
)

// memPair opens two softnic devices joined by an in-memory link.
func memPair(t *testing.T) (a, b Device) {
	a, b, _, _ = memPairLinks(t)
	return a, b
}

func memPairLinks(t *testing.T) (a, b Device, la, lb *memlink.Endpoint) {
	t.Helper()
	la, lb = memlink.Pair(memlink.Config{})
	da, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}})
	require.NoError(t, err)
	db, err := verbs.Open(lb, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.2")}})
	require.NoError(t, err)
	t.Cleanup(func() { da.Close(); db.Close(); la.Close(); lb.Close() })
	return Device{Verbs: da, Name: "mem0", LinkMTU: la.MTU()}, Device{Verbs: db, Name: "mem1", LinkMTU: lb.MTU()}, la, lb
}

// runBoth runs a server on a and a client on b over loopback TCP.
func runBoth(t *testing.T, test oob.Test, tweak func(*Params)) (client, server string) {
	t.Helper()
	a, b := memPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var sout, cout bytes.Buffer
	var serr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := ln.Accept()
		if err != nil {
			serr = err
			return
		}
		defer conn.Close()
		p := NewParams(test)
		p.Server = true
		tweak(&p)
		serr = Run(ctx, a, conn, p, &sout)
	}()
	conn, err := net.Dial("tcp4", ln.Addr().String())
	require.NoError(t, err)
	p := NewParams(test)
	tweak(&p)
	cerr := Run(ctx, b, conn, p, &cout)
	conn.Close()
	wg.Wait()
	require.True(t, cerr == nil && serr == nil, "%v: client %v, server %v\nclient output:\n%s\nserver output:\n%s", test, cerr, serr, cout.String(), sout.String())
	return cout.String(), sout.String()
}

var (
	bwLine  = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)$`)
	latLine = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)(\s+[0-9.]+){7}\s*$`)
)

// runner runs a test's server and client and returns their outputs.
type runner func(t *testing.T, test oob.Test, tweak func(*Params)) (client, server string)

func TestRunBandwidthTests(t *testing.T) { testBandwidth(t, runBoth) }

// testBandwidth runs each bandwidth test with 2 QPs and checks both
// sides' reports.
func testBandwidth(t *testing.T, run runner) {
	for _, tc := range []struct {
		test        oob.Test
		size        uint64
		serverLines int
	}{
		{oob.WriteBW, 4096, 1},
		{oob.ReadBW, 4096, 1},
		{oob.SendBW, 4096, 1},
		{oob.AtomicBW, 8, 1},
	} {
		t.Run(tc.test.String(), func(t *testing.T) {
			cout, sout := run(t, tc.test, func(p *Params) { p.Iters, p.Size, p.NumQPs = 200, tc.size, 2 })
			for side, out := range map[string]string{"client": cout, "server": sout} {
				m := bwLine.FindAllStringSubmatch(out, -1)
				require.Len(t, m, 1, "%s result lines:\n%s", side, out)
				assert.Equal(t, fmt.Sprint(tc.size), m[0][1], "%s result line %q", side, m[0][0])
				assert.Equal(t, "400", m[0][2], "%s result line %q", side, m[0][0])
				assert.NotEqual(t, "0.00", m[0][4], "%s result line %q", side, m[0][0])
				assert.Contains(t, out, " local address: LID 0000 QPN ", side)
				assert.Contains(t, out, " remote address: LID 0000 QPN ", side)
				assert.Contains(t, out, " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:00:0", side)
				assert.True(t, strings.HasSuffix(out, ResultLine), "%s output does not end with the result line:\n%s", side, out)
			}
			// The server of write/read/atomic prints the client's figures.
			if tc.test != oob.SendBW {
				assert.Equal(t, bwLine.FindString(cout), bwLine.FindString(sout), "server's line against the client's")
			}
		})
	}
}

func TestRunLatencyTests(t *testing.T) { testLatency(t, runBoth) }

// testLatency runs each latency test and checks both sides' reports.
func testLatency(t *testing.T, run runner) {
	for _, test := range []oob.Test{oob.WriteLat, oob.ReadLat, oob.SendLat} {
		t.Run(test.String(), func(t *testing.T) {
			cout, sout := run(t, test, func(p *Params) { p.Iters, p.Size = 100, 64 })
			m := latLine.FindAllString(cout, -1)
			require.Len(t, m, 1, "client latency lines in:\n%s", cout)
			require.True(t, strings.HasPrefix(m[0], " 64      100"), "client latency line %q", m[0])
			wantServer := 1
			if test == oob.ReadLat {
				wantServer = 0 // read_lat's server only serves the reads
			}
			require.Len(t, latLine.FindAllString(sout, -1), wantServer, "server latency lines in:\n%s", sout)
		})
	}
}

func TestRunAllSizes(t *testing.T) {
	cout, sout := runBoth(t, oob.WriteBW, func(p *Params) { p.Iters, p.RunAll = 5, true })
	m := bwLine.FindAllStringSubmatch(cout, -1)
	require.Len(t, m, 23, "client lines:\n%s", cout)
	require.Equal(t, "8388608", m[22][1])
	// perftest's server prints the client's last report only.
	m = bwLine.FindAllStringSubmatch(sout, -1)
	require.Len(t, m, 1, "server lines:\n%s", sout)
	require.Equal(t, "8388608", m[0][1])
}

// TestStallEndsRun cuts the link under a write_bw client: its writes are
// retried forever (retry count 7), and the stall watchdog must end the run
// with ErrStalled, as perftest's check_alive would.
func TestStallEndsRun(t *testing.T) {
	a, b, _, lb := memPairLinks(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	serr := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			serr <- err
			return
		}
		defer conn.Close()
		p := NewParams(oob.WriteBW)
		p.Server = true
		serr <- Run(ctx, a, conn, p, io.Discard)
	}()
	conn, err := net.Dial("tcp4", ln.Addr().String())
	require.NoError(t, err)
	p := NewParams(oob.WriteBW)
	p.StallTimeout = 300 * time.Millisecond
	lb.SetDown(true)
	err = Run(ctx, b, conn, p, io.Discard)
	conn.Close()
	require.ErrorIs(t, err, ErrStalled, "client")
	require.Error(t, <-serr, "server finished without its client's report")
}

func TestRunDuplex(t *testing.T) {
	for _, test := range []oob.Test{oob.WriteBW, oob.ReadBW, oob.AtomicBW, oob.SendBW} {
		t.Run(test.String(), func(t *testing.T) {
			cout, sout := runBoth(t, test, func(p *Params) {
				p.Duplex, p.Iters, p.NumQPs = true, 300, 2
				if test != oob.AtomicBW {
					p.Size = 4096
				}
			})
			for side, out := range map[string]string{"client": cout, "server": sout} {
				assert.Len(t, bwLine.FindAllString(out, -1), 1, "%s output:\n%s", side, out)
				assert.Contains(t, out, "Bidirectional BW Test", side)
			}
		})
	}
}

// TestRunSendOddIters: with an odd iteration count perftest's SEND tests
// post one receive more than they use (the rx_depth workaround).
func TestRunSendOddIters(t *testing.T) {
	for _, test := range []oob.Test{oob.SendBW, oob.SendLat} {
		cout, sout := runBoth(t, test, func(p *Params) { p.Iters = 51 })
		assert.Contains(t, sout, " RX depth        : 52\n", "%v server header", test)
		assert.Contains(t, cout, " 51 ", "%v client output", test)
	}
}

func TestRunDuration(t *testing.T) {
	for _, test := range []oob.Test{oob.WriteBW, oob.SendBW} {
		t.Run(test.String(), func(t *testing.T) {
			start := time.Now()
			cout, sout := runBoth(t, test, func(p *Params) {
				p.Duration, p.Margin, p.Size = 600*time.Millisecond, 100*time.Millisecond, 4096
			})
			assert.GreaterOrEqual(t, time.Since(start), 600*time.Millisecond, "a 600 ms run")
			for side, out := range map[string]string{"client": cout, "server": sout} {
				m := bwLine.FindStringSubmatch(out)
				if assert.NotNil(t, m, "%s output:\n%s", side, out) {
					// duration: iterations counted, no peak
					assert.Equal(t, "4096", m[1], side)
					assert.NotEqual(t, "0", m[2], side)
					assert.Equal(t, "0.00", m[3], side)
					assert.NotEqual(t, "0.00", m[4], side)
				}
			}
		})
	}
}

func TestRunLatencyDuration(t *testing.T) {
	latDur := regexp.MustCompile(`(?m)^ 64 +(\d+) +([0-9.]+) +([0-9.]+)\s*$`)
	for _, test := range []oob.Test{oob.WriteLat, oob.ReadLat, oob.SendLat} {
		t.Run(test.String(), func(t *testing.T) {
			cout, sout := runBoth(t, test, func(p *Params) {
				p.Duration, p.Margin, p.Size = 600*time.Millisecond, 100*time.Millisecond, 64
			})
			sides := map[string]string{"client": cout}
			if test != oob.ReadLat {
				sides["server"] = sout
			}
			for side, out := range sides {
				m := latDur.FindStringSubmatch(out)
				if assert.NotNil(t, m, "%s output:\n%s", side, out) {
					assert.NotEqual(t, "0", m[1], side)
					assert.NotEqual(t, "0.00", m[2], side)
				}
				assert.Contains(t, out, "t_avg[usec]    tps average", side)
			}
		})
	}
}

func TestDurationParams(t *testing.T) {
	p := NewParams(oob.WriteBW)
	p.Duration = 5 * time.Second
	require.NoError(t, p.Finish())
	require.Equal(t, time.Second, p.Margin, "-D 5: margin")
	require.True(t, p.NoPeak, "-D 5: no peak")
	for _, bad := range []func(*Params){
		func(p *Params) { p.RunAll = true },
		func(p *Params) { p.Margin = time.Second },
	} {
		q := NewParams(oob.WriteBW)
		q.Duration = 2 * time.Second
		bad(&q)
		assert.Error(t, q.Finish(), "accepted %+v", q)
	}
}
