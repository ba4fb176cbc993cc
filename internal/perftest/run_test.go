package perftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/oob"
	"github.com/softnic/softnic/roce/memlink"
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
	if cerr != nil || serr != nil {
		t.Fatalf("%v: client %v, server %v\nclient output:\n%s\nserver output:\n%s", test, cerr, serr, cout.String(), sout.String())
	}
	return cout.String(), sout.String()
}

var (
	bwLine  = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)$`)
	latLine = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)(\s+[0-9.]+){7}\s*$`)
)

func TestRunBandwidthTests(t *testing.T) {
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
			cout, sout := runBoth(t, tc.test, func(p *Params) { p.Iters, p.Size, p.NumQPs = 200, tc.size, 2 })
			for side, out := range map[string]string{"client": cout, "server": sout} {
				m := bwLine.FindAllStringSubmatch(out, -1)
				if len(m) != 1 {
					t.Fatalf("%s printed %d result lines:\n%s", side, len(m), out)
				}
				if m[0][1] != fmt.Sprint(tc.size) || m[0][2] != "400" || m[0][4] == "0.00" {
					t.Errorf("%s result line %q", side, m[0][0])
				}
				if !strings.Contains(out, " local address: LID 0000 QPN ") || !strings.Contains(out, " remote address: LID 0000 QPN ") ||
					!strings.Contains(out, " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:00:0") {
					t.Errorf("%s output lacks the address lines:\n%s", side, out)
				}
				if !strings.HasSuffix(out, ResultLine) {
					t.Errorf("%s output does not end with the result line:\n%s", side, out)
				}
			}
			// The server of write/read/atomic prints the client's figures.
			if tc.test != oob.SendBW && bwLine.FindString(cout) != bwLine.FindString(sout) {
				t.Errorf("server printed %q, client %q", bwLine.FindString(sout), bwLine.FindString(cout))
			}
		})
	}
}

func TestRunLatencyTests(t *testing.T) {
	for _, test := range []oob.Test{oob.WriteLat, oob.ReadLat, oob.SendLat} {
		t.Run(test.String(), func(t *testing.T) {
			cout, sout := runBoth(t, test, func(p *Params) { p.Iters, p.Size = 100, 64 })
			if m := latLine.FindAllString(cout, -1); len(m) != 1 || !strings.HasPrefix(m[0], " 64      100") {
				t.Fatalf("client latency lines %q in:\n%s", m, cout)
			}
			wantServer := 1
			if test == oob.ReadLat {
				wantServer = 0 // read_lat's server only serves the reads
			}
			if m := latLine.FindAllString(sout, -1); len(m) != wantServer {
				t.Fatalf("server latency lines %q in:\n%s", m, sout)
			}
		})
	}
}

func TestRunAllSizes(t *testing.T) {
	cout, sout := runBoth(t, oob.WriteBW, func(p *Params) { p.Iters, p.RunAll = 5, true })
	if m := bwLine.FindAllStringSubmatch(cout, -1); len(m) != 23 || m[22][1] != "8388608" {
		t.Fatalf("client printed %d lines:\n%s", len(m), cout)
	}
	// perftest's server prints the client's last report only.
	if m := bwLine.FindAllStringSubmatch(sout, -1); len(m) != 1 || m[0][1] != "8388608" {
		t.Fatalf("server printed:\n%s", sout)
	}
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
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("client error %v, want ErrStalled", err)
	}
	if err := <-serr; err == nil {
		t.Fatal("server finished without its client's report")
	}
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
				if m := bwLine.FindAllString(out, -1); len(m) != 1 || !strings.Contains(out, "Bidirectional BW Test") {
					t.Errorf("%s output:\n%s", side, out)
				}
			}
		})
	}
}

// TestRunSendOddIters: with an odd iteration count perftest's SEND tests
// post one receive more than they use (the rx_depth workaround).
func TestRunSendOddIters(t *testing.T) {
	for _, test := range []oob.Test{oob.SendBW, oob.SendLat} {
		cout, sout := runBoth(t, test, func(p *Params) { p.Iters = 51 })
		if !strings.Contains(sout, " RX depth        : 52\n") {
			t.Errorf("%v server header:\n%s", test, sout)
		}
		if !strings.Contains(cout, " 51 ") {
			t.Errorf("%v client output:\n%s", test, cout)
		}
	}
}

func TestRunDuration(t *testing.T) {
	for _, test := range []oob.Test{oob.WriteBW, oob.SendBW} {
		t.Run(test.String(), func(t *testing.T) {
			start := time.Now()
			cout, sout := runBoth(t, test, func(p *Params) {
				p.Duration, p.Margin, p.Size = 600*time.Millisecond, 100*time.Millisecond, 4096
			})
			if d := time.Since(start); d < 600*time.Millisecond {
				t.Errorf("a 600 ms run took %v", d)
			}
			for side, out := range map[string]string{"client": cout, "server": sout} {
				m := bwLine.FindStringSubmatch(out)
				if m == nil || m[1] != "4096" || m[2] == "0" || m[3] != "0.00" || m[4] == "0.00" {
					t.Errorf("%s (duration: iterations counted, no peak):\n%s", side, out)
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
				if m == nil || m[1] == "0" || m[2] == "0.00" || !strings.Contains(out, "t_avg[usec]    tps average") {
					t.Errorf("%s output:\n%s", side, out)
				}
			}
		})
	}
}

func TestDurationParams(t *testing.T) {
	p := NewParams(oob.WriteBW)
	p.Duration = 5 * time.Second
	if err := p.Finish(); err != nil || p.Margin != time.Second || !p.NoPeak {
		t.Fatalf("-D 5: margin %v, no peak %v, %v", p.Margin, p.NoPeak, err)
	}
	for _, bad := range []func(*Params){
		func(p *Params) { p.RunAll = true },
		func(p *Params) { p.Margin = time.Second },
	} {
		q := NewParams(oob.WriteBW)
		q.Duration = 2 * time.Second
		bad(&q)
		if err := q.Finish(); err == nil {
			t.Errorf("accepted %+v", q)
		}
	}
}
