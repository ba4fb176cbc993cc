package main

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/tools/perftest"
	"github.com/softnic/softnic/verbs"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// useMemDevices makes openDevice return two softnic devices joined by an
// in-memory link, named memA (10.0.0.1) and memB (10.0.0.2), for the
// duration of the test.
func useMemDevices(t *testing.T) {
	t.Helper()
	la, lb := memlink.Pair(memlink.Config{})
	da, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}})
	require.NoError(t, err)
	db, err := verbs.Open(lb, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.2")}})
	require.NoError(t, err)
	devs := map[string]perftest.Device{
		"memA": {Verbs: da, Name: "memA", LinkMTU: la.MTU()},
		"memB": {Verbs: db, Name: "memB", LinkMTU: lb.MTU()},
	}
	saved := openDevice
	openDevice = func(name string, _ int) (perftest.Device, func(), error) {
		d, ok := devs[name]
		if !ok {
			return perftest.Device{}, nil, fmt.Errorf("no test device %q", name)
		}
		return d, func() {}, nil
	}
	t.Cleanup(func() {
		openDevice = saved
		da.Close()
		db.Close()
		la.Close()
		lb.Close()
	})
}

// freePort returns a TCP port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

// runPair runs the subcommand as server (memA) and client (memB).
func runPair(t *testing.T, server, client []string) (sout, cout string) {
	t.Helper()
	var so, se, co, ce bytes.Buffer
	var sstatus int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sstatus = run(server, &so, &se)
	}()
	cstatus := run(client, &co, &ce)
	wg.Wait()
	require.True(t, sstatus == 0 && cstatus == 0, "server status %d: %s%s\nclient status %d: %s%s", sstatus, so.String(), se.String(), cstatus, co.String(), ce.String())
	return so.String(), co.String()
}

func TestPerfWriteBWClientServer(t *testing.T) {
	useMemDevices(t)
	port := freePort(t)
	sout, cout := runPair(t,
		[]string{"perf", "write_bw", "-d", "memA", "-p", port, "-n", "300", "-F", "--report_gbits"},
		[]string{"perf", "ib_write_bw", "-d", "memB", "127.0.0.1", "--port=" + port, "-n", "300", "-s", "8192", "-F", "--report_gbits"})
	line := regexp.MustCompile(`(?m)^ 8192 +300 +[0-9.]+ +[0-9.]+ *\t\t   [0-9.]+$`)
	for side, out := range map[string]string{"server": sout, "client": cout} {
		assert.Contains(t, out, "                    RDMA_Write BW Test\n", side)
		assert.Contains(t, out, "BW peak[Gb/sec]    BW average[Gb/sec]", side)
		assert.Regexp(t, line, out, side)
	}
	assert.Contains(t, sout, "* Waiting for client to connect... *")
	assert.Contains(t, sout, "Device         : memA")
	assert.Equal(t, line.FindString(sout), line.FindString(cout), "server's and client's result lines")
}

func TestPerfSendLat(t *testing.T) {
	useMemDevices(t)
	port := freePort(t)
	sout, cout := runPair(t,
		[]string{"perf", "send_lat", "-d", "memA", "-p", port, "-n", "50"},
		[]string{"perf", "send_lat", "-d", "memB", "-p", port, "-n", "50", "-H", "127.0.0.1"})
	m := regexp.MustCompile(`(?m)^\d+, [0-9.e+-]+$`).FindAllString(cout, -1)
	assert.Len(t, m, 47, "sorted samples: 50 - 1 - 2; client output:\n%s", cout)
	for side, out := range map[string]string{"server": sout, "client": cout} {
		assert.Regexp(t, `(?m)^ 2       50 `, out, side)
	}
}

func TestPerfSingleFigure(t *testing.T) {
	useMemDevices(t)
	port := freePort(t)
	sout, cout := runPair(t,
		[]string{"perf", "read_bw", "-d", "memA", "-p", port, "-n", "100", "--output=bandwidth"},
		[]string{"perf", "read_bw", "-d", "memB", "-p", port, "-n", "100", "--output=bandwidth", "-u", "10", "127.0.0.1"})
	one := regexp.MustCompile(`^[0-9]+\.[0-9]{6}\n$`)
	assert.Regexp(t, one, sout)
	assert.Equal(t, sout, cout, "want the same single figure")
}

func TestPerfBidirectionalReportBoth(t *testing.T) {
	useMemDevices(t)
	port := freePort(t)
	sout, cout := runPair(t,
		[]string{"perf", "write_bw", "-d", "memA", "-p", port, "-n", "200", "-b", "--report-both"},
		[]string{"perf", "write_bw", "-d", "memB", "-p", port, "-n", "200", "-b", "--report-both", "127.0.0.1"})
	line := regexp.MustCompile(`(?m)^ 65536 +200 .*$`)
	for side, out := range map[string]string{"server": sout, "client": cout} {
		assert.Len(t, line.FindAllString(out, -1), 3, "%s output:\n%s", side, out)
		assert.Contains(t, out, "\n Local results: \n", side)
		assert.Contains(t, out, "\n Remote results: \n", side)
		assert.Contains(t, out, "RDMA_Write Bidirectional BW Test", side)
	}
	// Each side's local figures are the other's remote ones.
	s, c := line.FindAllString(sout, -1), line.FindAllString(cout, -1)
	if len(s) == 3 && len(c) == 3 {
		assert.Equal(t, []string{c[0], c[2], c[1]}, s, "server lines against the client's")
	}
}

func TestPerfBadUsage(t *testing.T) {
	for _, args := range [][]string{
		{"perf"},
		{"perf", "write_bandwidth", "-d", "x"},
		{"perf", "write_bw"},
		{"perf", "write_bw", "-d", "x", "-c", "UD"},
		{"perf", "atomic_bw", "-d", "x", "-s", "16"},
		{"perf", "write_bw", "-d", "x", "-A", "SWAP"},
		{"perf", "write_bw", "-d", "x", "-n", "2"},
		{"perf", "write_bw", "-d", "x", "h1", "h2"},
		{"perf", "write_bw", "-d", "x", "--output=latency"},
		{"perf", "write_lat", "-d", "x", "--output=speed"},
		{"perf", "write_bw", "-d", "x", "-u", "40"},
		{"perf", "write_bw", "-d", "x", "-s", "0"},
		{"perf", "send_lat", "-d", "x", "-b"},
		{"perf", "write_lat", "-d", "x", "-D", "3", "-a"},
		{"perf", "write_bw", "-d", "x", "-D", "2", "-f", "1"},
		{"perf", "write_bw", "-d", "x", "-s", "4G"},
		{"perf", "write_bw", "-d", "x", "-s", "3000M"},
		{"perf", "write_bw", "-R", "-d", "x", "--retry_count", "8"},
	} {
		var o, e bytes.Buffer
		if st := run(args, &o, &e); assert.NotZero(t, st, "%q: want failure", args) {
			assert.NotZero(t, e.Len(), "%q: no message on stderr", args)
		}
	}
}

func TestSizeFlag(t *testing.T) {
	for in, want := range map[string]uint64{"4096": 4096, "64K": 65536, "2M": 2 << 20, "0x100": 256} {
		var s sizeFlag
		if assert.NoError(t, s.Set(in), in) {
			assert.Equal(t, want, uint64(s), in)
		}
	}
}

func TestPerfSoftnicStats(t *testing.T) {
	useMemDevices(t)
	port := freePort(t)
	sout, cout := runPair(t,
		[]string{"perf", "write_bw", "-d", "memA", "-p", port, "-n", "20", "--softnic-stats"},
		[]string{"perf", "write_bw", "-d", "memB", "-p", port, "-n", "20", "-s", "4096", "127.0.0.1"})
	assert.NotRegexp(t, `softnic (engine|RoCE)`, cout, "client printed counters without --softnic-stats")
	// The server received 20 writes of 4096 bytes at IB MTU 4096 (the
	// memory link's 9000-byte MTU): at least 20 packets, after the table.
	table := regexp.MustCompile(`(?m)^ 4096 +20 +`).FindStringIndex(sout)
	m := regexp.MustCompile(`(?m)^ softnic engine counters:\n(?:  \S+ +\d+\n)*?  RxPackets +(\d+)\n`).FindStringSubmatchIndex(sout)
	require.True(t, table != nil && m != nil && m[0] >= table[1], "want the counters after the result line:\n%s", sout)
	n, _ := strconv.Atoi(sout[m[2]:m[3]])
	assert.GreaterOrEqual(t, n, 20, "RxPackets")
	for _, name := range []string{"Retransmits", "Timeouts", "RxOutOfSeq", "RxDuplicate", "TxNAKSeq", "Rx.Good", "Rx.BadICRC"} {
		assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(name)+` +\d+$`, sout, "no %s line", name)
	}
}

// useMemPerfCM makes openPerfCM return the memory devices of useMemDevices,
// each with a connection manager of its own (two hosts).
func useMemPerfCM(t *testing.T) {
	t.Helper()
	useMemDevices(t)
	saved := openPerfCM
	openPerfCM = func(ifname string, engines int, _ netip.Addr) (perftest.Device, *rdmacm.CM, func(), error) {
		dev, closeDev, err := openDevice(ifname, engines)
		if err != nil {
			return perftest.Device{}, nil, nil, err
		}
		c, err := rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{dev.Verbs}})
		if err != nil {
			return perftest.Device{}, nil, nil, err
		}
		return dev, c, func() { c.Close(); closeDev() }, nil
	}
	t.Cleanup(func() { openPerfCM = saved })
}

// TestPerfRDMACM runs write_bw, send_bw and read_lat with -R (and
// --rdma_cm) between memA and memB, checking what the TCP mode's tests
// check: the result lines, equal on both sides for write_bw.
func TestPerfRDMACM(t *testing.T) {
	useMemPerfCM(t)
	for _, tc := range []struct {
		test string
		line *regexp.Regexp
		same bool // the server prints the client's figures
	}{
		{"write_bw", regexp.MustCompile(`(?m)^ 8192 +300 +[0-9.]+ +[0-9.]+ *\t\t   [0-9.]+$`), true},
		{"send_bw", regexp.MustCompile(`(?m)^ 8192 +300 +[0-9.]+ +[0-9.]+ *\t\t   [0-9.]+$`), false},
		{"read_lat", regexp.MustCompile(`(?m)^ 8192 +300 +[0-9.]+`), false},
	} {
		t.Run(tc.test, func(t *testing.T) {
			port := freePort(t)
			sout, cout := runPair(t,
				[]string{"perf", tc.test, "-R", "-d", "memA", "-p", port, "-n", "300", "-s", "8192"},
				[]string{"perf", "ib_" + tc.test, "--rdma_cm", "-d", "memB", "--port=" + port, "-n", "300", "-s", "8192", "10.0.0.1"})
			assert.Regexp(t, tc.line, cout, "client")
			assert.Contains(t, cout, "Data ex. method : rdma_cm", "client")
			assert.Contains(t, sout, "Device         : memA")
			assert.Contains(t, sout, " Waiting for client rdma_cm QP to connect\n")
			if tc.test == "read_lat" {
				return // its server prints no figures
			}
			assert.Regexp(t, tc.line, sout, "server")
			if tc.same {
				assert.Equal(t, tc.line.FindString(sout), tc.line.FindString(cout), "server's and client's result lines")
			}
		})
	}
}

// TestPerfSoftnicTrace runs a write_bw with --softnic-trace: the
// file has the header and at least the first and last lines, each with
// the time, the counters and the test QP's rate.
func TestPerfSoftnicTrace(t *testing.T) {
	useMemDevices(t)
	port := freePort(t)
	trace := filepath.Join(t.TempDir(), "trace")
	runPair(t,
		[]string{"perf", "write_bw", "-d", "memA", "-p", port, "-n", "20000"},
		[]string{"perf", "write_bw", "-d", "memB", "-p", port, "-n", "20000", "-s", "4096", "--softnic-trace", trace,
			"--softnic-trace-every", "200us", "127.0.0.1"})
	b, err := os.ReadFile(trace)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.GreaterOrEqual(t, len(lines), 3, "header, first and last line:\n%s", b)
	assert.Equal(t, "# unix_ms late_us "+strings.Join(traceCounters, " ")+" rate_mbps/qpn...", lines[0])
	last := strings.Fields(lines[len(lines)-1])
	require.GreaterOrEqual(t, len(last), 2+len(traceCounters), "%q", lines[len(lines)-1])
	ms, err := strconv.ParseInt(last[0], 10, 64)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), time.UnixMilli(ms), time.Minute)
	sent, err := strconv.ParseUint(last[2+slices.Index(traceCounters, "sent_pkts")], 10, 64)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, sent, uint64(20000), "the client's writes")
	// While the test ran, lines carry its QP (after the test, it is gone).
	withQP := slices.IndexFunc(lines, func(l string) bool { return len(strings.Fields(l)) == 2+len(traceCounters)+1 })
	require.GreaterOrEqual(t, withQP, 1, "no line with the test QP:\n%s", b)
	qp := strings.Fields(lines[withQP])
	assert.Regexp(t, `^0/0x[0-9a-f]+$`, qp[len(qp)-1], "a QP not rate limited")
}
