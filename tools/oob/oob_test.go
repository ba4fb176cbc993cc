package oob

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var testGID = netip.MustParseAddr("::ffff:10.0.0.1").As16()

// Golden pingpong message: sprintf("%04x:%06x:%06x:%s", 0, 0x11, 0x7f1a4b,
// wgid) per rdma-core v44.0 libibverbs/examples/rc_pingpong.c lines 204
// (client) and 316 (server), with wgid from gid_to_wire_gid (pingpong.c
// lines 72-80: four "%08x" of htobe32 words = the raw bytes in order),
// written with sizeof msg = 52 bytes including the NUL; the client then
// writes "done" with its NUL (line 212), which the server reads (line 319).
const goldenPingpong = "0000:000011:7f1a4b:00000000000000000000ffff0a000001\x00"

// Golden keys message: KEY_PRINT_FMT_GID (perftest v4.5-0.17
// src/perftest_communication.h line 83, size KEY_MSG_SIZE_GID line 76) as
// ethernet_write_keys fills it (perftest_communication.c line 306), lid 0,
// out_reads 1, qpn 0x11, psn 0x7f1a4b, rkey 0x1234, vaddr 0x7f8ab7f41000,
// the GID's 16 raw bytes, srqn 0; sizeof msg = KEY_MSG_SIZE_GID = 108.
const goldenKeys = "0000:0001:000011:7f1a4b:00001234:00007f8ab7f41000:" +
	"00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:00:01:00000000:\x00"

// message is a message type of the exchanges.
type message interface {
	comparable
	Format() ([]byte, error)
}

// golden checks that d formats to msg and msg parses back to d.
func golden[D message](t *testing.T, d D, msg string, parse func([]byte) (D, error)) {
	t.Helper()
	b, err := d.Format()
	require.NoError(t, err)
	require.Equal(t, msg, string(b), "Format")
	got, err := parse([]byte(msg))
	require.NoError(t, err)
	require.Equal(t, d, got, "Parse")
}

func TestPingpongGolden(t *testing.T) {
	d := PingpongDest{LID: 0, QPN: 0x11, PSN: 0x7f1a4b, GID: testGID}
	golden(t, d, goldenPingpong, ParsePingpongDest)
	require.Equal(t, "LID 0x0000, QPN 0x000011, PSN 0x7f1a4b, GID ::ffff:10.0.0.1", d.String())
}

func TestPingpongParseErrors(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want error
	}{
		{goldenPingpong[:51], ErrMessageLength},
		{"0000-000011:7f1a4b:00000000000000000000ffff0a000001\x00", ErrMessageFormat},
		{"0000:00001g:7f1a4b:00000000000000000000ffff0a000001\x00", ErrMessageFormat},
		{"0000:000011:7f1a4b:00000000000000000000ffff0a000001x", ErrMessageFormat},
		{"0000:000011:7f1a4b:0000000000000000000 ffff0a000001\x00", ErrMessageFormat},
	} {
		_, err := ParsePingpongDest([]byte(tc.msg))
		assert.ErrorIs(t, err, tc.want, "Parse(%q)", tc.msg)
	}
	_, err := (PingpongDest{QPN: 1 << 24}).Format()
	assert.ErrorIs(t, err, ErrFieldRange, "Format of a 25-bit QPN")
}

func TestGIDText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"::ffff:10.0.0.1", "::ffff:10.0.0.1"},
		{"fe80::1", "fe80::1"},
		{"::", "::"},
		{"::1", "::1"},
		{"::1.2.3.4", "::1.2.3.4"}, // glibc's inet_ntop keeps the dotted tail
	} {
		assert.Equal(t, tc.want, GIDText(netip.MustParseAddr(tc.in).As16()), "GIDText(%s)", tc.in)
	}
}

// pipe returns the two ends of a net.Pipe, closed when the test ends.
func pipe(t *testing.T) (c, s net.Conn) {
	c, s = net.Pipe()
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// bothSides runs server and client at once on the two ends of a pipe and
// requires both to succeed.
func bothSides[S, C any](t *testing.T, server func(net.Conn) (S, error), client func(net.Conn) (C, error)) (S, C) {
	t.Helper()
	c, s := pipe(t)
	var sv S
	var serr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		sv, serr = server(s)
	}()
	cv, cerr := client(c)
	<-done
	require.NoError(t, cerr, "client")
	require.NoError(t, serr, "server")
	return sv, cv
}

func TestPingpongExchange(t *testing.T) {
	cli := PingpongDest{LID: 1, QPN: 0x12, PSN: 0x345678, GID: testGID}
	srv := PingpongDest{LID: 2, QPN: 0x13, PSN: 0xabcdef, GID: testGID}
	var connected PingpongDest
	srvGot, cliGot := bothSides(t,
		func(s net.Conn) (PingpongDest, error) {
			return PingpongServer(s, srv, func(r PingpongDest) error { connected = r; return nil }, time.Second)
		},
		func(c net.Conn) (PingpongDest, error) { return PingpongClient(c, cli, time.Second) })
	require.Equal(t, srv, cliGot, "client got")
	require.Equal(t, cli, srvGot, "server got")
	require.Equal(t, cli, connected, "server connected to")
}

func TestPingpongServerWantsDone(t *testing.T) {
	c, s := pipe(t)
	errc := make(chan error, 1)
	go func() {
		_, err := PingpongServer(s, PingpongDest{}, nil, time.Second)
		errc <- err
	}()
	msg, _ := PingpongDest{}.Format()
	c.Write(msg)
	buf := make([]byte, PingpongMsgLen)
	c.Read(buf)
	c.Write([]byte("nope\x00"))
	require.ErrorIs(t, <-errc, ErrNotDone)
}

func TestPingpongTimeout(t *testing.T) {
	_, s := pipe(t)
	_, err := PingpongServer(s, PingpongDest{}, nil, 20*time.Millisecond)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "server error %v, want a timeout", err)
}

func TestKeysGolden(t *testing.T) {
	d := PerftestDest{OutReads: 1, QPN: 0x11, PSN: 0x7f1a4b, RKey: 0x1234, VAddr: 0x7f8ab7f41000, GID: testGID}
	golden(t, d, goldenKeys, ParsePerftestDest)
	full := PerftestDest{LID: 0xffff, OutReads: 0x10, QPN: 0xffffff, PSN: 0xffffff, RKey: 0xffffffff, VAddr: ^uint64(0), SRQN: 0xdeadbeef}
	for i := range full.GID {
		full.GID[i] = byte(0xf0 + i)
	}
	b, _ := full.Format()
	got, err := ParsePerftestDest(b)
	require.NoError(t, err)
	require.Equal(t, full, got, "round trip")
}

func TestKeysParseErrors(t *testing.T) {
	bad := []byte(goldenKeys)
	bad[keyVAddr+16] = '-'
	upper := []byte(goldenKeys)
	upper[keyVAddr+5] = 'F'
	for _, tc := range []struct {
		msg  []byte
		want error
	}{
		{[]byte(goldenKeys[:107]), ErrMessageLength},
		{bad, ErrMessageFormat},
		{[]byte(goldenKeys[:107] + "x"), ErrMessageFormat},
		{[]byte("0000:0001:00001z:7f1a4b:00001234:00007f8ab7f41000:" +
			"00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:00:01:00000000:\x00"), ErrMessageFormat},
	} {
		_, err := ParsePerftestDest(tc.msg)
		assert.ErrorIs(t, err, tc.want, "Parse(%q)", tc.msg)
	}
	_, err := ParsePerftestDest(upper)
	assert.NoError(t, err, "upper-case hex refused")
}

func TestVersionAndMTUMessages(t *testing.T) {
	b, err := FormatVersion(PerftestVersion)
	require.NoError(t, err)
	require.Equal(t, "6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", string(b), "FormatVersion")
	s, f, err := ParseVersion(b)
	require.NoError(t, err)
	require.Equal(t, "6.06", s)
	require.Equal(t, 6.06, f)
	_, _, err = ParseVersion([]byte("6.06xxxxxxxxxxxx"))
	assert.ErrorIs(t, err, ErrMessageFormat, "unterminated version")
	_, _, err = ParseVersion([]byte("abc\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	assert.ErrorIs(t, err, ErrMessageFormat, "non-numeric version")
	m, _ := FormatMTU(3)
	require.Equal(t, "3\x00", string(m), "FormatMTU(3)")
	for _, bad := range []string{"0\x00", "6\x00", "3x", "33"} {
		_, err := ParseMTU([]byte(bad))
		assert.ErrorIs(t, err, ErrFieldRange, "ParseMTU(%q)", bad)
	}
	assert.Equal(t, 1024, MTUBytes(3))
	assert.Equal(t, 5, MTUEnum(4096))
	assert.Equal(t, 0, MTUEnum(1500))
}

// recConn records the length of each Write, so a test can compare the
// message sequence with the one read from perftest's sources.
type recConn struct {
	net.Conn
	mu     sync.Mutex
	writes []int
}

func (r *recConn) Write(b []byte) (int, error) {
	r.mu.Lock()
	r.writes = append(r.writes, len(b))
	r.mu.Unlock()
	return r.Conn.Write(b)
}

func TestSetup(t *testing.T) {
	sn, cn := bothSides(t,
		func(s net.Conn) (Negotiated, error) {
			return NewSession(s, Server, time.Second).Setup("6.06", SysData{4096, 64}, 5)
		},
		func(c net.Conn) (Negotiated, error) {
			return NewSession(c, Client, time.Second).Setup("6.06", SysData{65536, 128}, 3)
		})
	want := Negotiated{RemoteVersion: "6.06", SysData: SysData{65536, 128}, MTU: 3}
	require.Equal(t, want, cn, "client")
	require.Equal(t, want, sn, "server")
}

func TestSetupRejectsOldPeer(t *testing.T) {
	c, s := pipe(t)
	go NewSession(s, Server, time.Second).Setup("5.60", SysData{4096, 64}, 3)
	_, err := NewSession(c, Client, time.Second).Setup(PerftestVersion, SysData{4096, 64}, 3)
	require.ErrorIs(t, err, ErrVersion)
}

func TestReportExchange(t *testing.T) {
	rep := BWReport{Size: 65536, Iters: 5000, BWPeak: 1234.5, BWAvg: 1200.25, MsgRate: 0.019204}
	got, back := bothSides(t,
		func(s net.Conn) (BWReport, error) { return NewSession(s, Server, time.Second).Report(BWReport{}) },
		func(c net.Conn) (BWReport, error) { return NewSession(c, Client, time.Second).Report(rep) })
	require.Equal(t, rep, got, "server got")
	require.Equal(t, BWReport{}, back, "client got")
}

// TestReportBytes checks the wire form: 8 big-endian bytes per value, the
// doubles as IEEE 754 (hton_double = bswap_64 of the bits on x86).
func TestReportBytes(t *testing.T) {
	c, s := pipe(t)
	go NewSession(c, Client, time.Second).Report(BWReport{Size: 2, Iters: 1000, BWPeak: 1, BWAvg: 0.5, MsgRate: 2})
	want := [][]byte{
		{0, 0, 0, 0, 0, 0, 0, 2},
		{0, 0, 0, 0, 0, 0, 0x03, 0xe8},
		{0x3f, 0xf0, 0, 0, 0, 0, 0, 0},
		{0x3f, 0xe0, 0, 0, 0, 0, 0, 0},
		{0x40, 0, 0, 0, 0, 0, 0, 0},
	}
	for i, w := range want {
		buf := make([]byte, 8)
		_, err := s.Read(buf)
		require.NoError(t, err)
		require.Equal(t, w, buf, "value %d", i)
		s.Write(make([]byte, 8))
	}
}

// runPair runs Setup and Run on both sides of a pipe and returns each
// side's write lengths and hook calls.
func runPair(t *testing.T, test Test, rounds, qps int) (cw, sw []int, ccalls, scalls []string) {
	return runPairMode(t, test, rounds, qps, false)
}

func runPairMode(t *testing.T, test Test, rounds, qps int, duplex bool) (cw, sw []int, ccalls, scalls []string) {
	t.Helper()
	// Loopback TCP, not net.Pipe: both sides write "done" and nobody reads it.
	c, s := tcpPair(t)
	rc, rs := &recConn{Conn: c}, &recConn{Conn: s}
	side := func(conn net.Conn, role Role, calls *[]string) error {
		p := NewSession(conn, role, time.Second)
		p.WaitTimeout = 5 * time.Second
		if _, err := p.Setup(PerftestVersion, SysData{4096, 64}, 3); err != nil {
			return err
		}
		local := make([]PerftestDest, qps)
		for i := range local {
			local[i] = PerftestDest{QPN: uint32(0x100*int(role) + i), PSN: 7, GID: testGID}
		}
		rec := func(s string) { *calls = append(*calls, s) }
		run := p.Run
		if duplex {
			run = p.RunDuplex
		}
		_, err := run(test, local, rounds, Hooks{
			Connect:   func(r []PerftestDest) error { rec("connect"); return nil },
			Connected: func(r []PerftestDest) error { rec("connected"); return nil },
			Prepare:   func(int) error { rec("prepare"); return nil },
			Measure: func(int) (BWReport, error) {
				rec("measure")
				return BWReport{Size: 8, Iters: 10, BWAvg: 1}, nil
			},
			DuplexReport: func(mine, theirs BWReport) error {
				assert.Equal(t, uint64(10), theirs.Iters, "duplex peer report %+v", theirs)
				assert.Equal(t, 1.0, theirs.BWAvg, "duplex peer report %+v", theirs)
				rec("both")
				return nil
			},
			ServerReport: func(r BWReport) error {
				assert.Equal(t, uint64(10), r.Iters, "server got report %+v", r)
				assert.Equal(t, 1.0, r.BWAvg, "server got report %+v", r)
				rec("report")
				return nil
			},
		})
		return err
	}
	var wg sync.WaitGroup
	var serr error
	wg.Add(1)
	go func() { defer wg.Done(); serr = side(rs, Server, &scalls) }()
	cerr := side(rc, Client, &ccalls)
	wg.Wait()
	require.NoError(t, cerr, "%v: client", test)
	require.NoError(t, serr, "%v: server", test)
	return rc.writes, rs.writes, ccalls, scalls
}

// The write sequences below follow the main() of each perftest 4.5-0.17
// program (see Run's comment): 16 versions, 4+4 system data, 2 MTU, 108
// per keys exchange, 8 per report value, 5 for "done".
func TestRunSequences(t *testing.T) {
	setup := []int{16, 4, 4, 2}
	k := KeysMsgLen
	cat := func(parts ...[]int) []int {
		var out []int
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	rep := []int{8, 8, 8, 8, 8}
	closing := []int{k, 5}
	for _, tc := range []struct {
		test           Test
		rounds, qps    int
		client, server []int
		ccalls, scalls []string
	}{
		{WriteBW, 1, 1, cat(setup, []int{k, k, k, k}, rep, closing), cat(setup, []int{k, k, k, k}, rep, closing),
			[]string{"connect", "connected", "measure"}, []string{"connect", "connected", "report"}},
		{ReadBW, 1, 2, cat(setup, []int{k, k, k, k, k, k}, rep, closing), cat(setup, []int{k, k, k, k, k, k}, rep, closing),
			[]string{"connect", "connected", "measure"}, []string{"connect", "connected", "report"}},
		{AtomicBW, 1, 1, cat(setup, []int{k, k, k, k}, rep, closing), cat(setup, []int{k, k, k, k}, rep, closing),
			[]string{"connect", "connected", "measure"}, []string{"connect", "connected", "report"}},
		{SendBW, 1, 1, cat(setup, []int{k, k, k, k}, closing), cat(setup, []int{k, k, k, k}, closing),
			[]string{"connect", "connected", "prepare", "measure"}, []string{"connect", "connected", "prepare", "measure"}},
		{SendBW, 2, 1, cat(setup, []int{k, k, k, k, k, k, k}, closing), cat(setup, []int{k, k, k, k, k, k, k}, closing),
			[]string{"connect", "connected", "prepare", "measure", "prepare", "measure"},
			[]string{"connect", "connected", "prepare", "measure", "prepare", "measure"}},
		{WriteLat, 1, 1, cat(setup, []int{k, k, k, k}), cat(setup, []int{k, k, k, k}),
			[]string{"connect", "connected", "measure"}, []string{"connect", "connected", "measure"}},
		{ReadLat, 1, 1, cat(setup, []int{k, k, k, k}, closing), cat(setup, []int{k, k, k, k}, closing),
			[]string{"connect", "connected", "measure"}, []string{"connect", "connected"}},
		{SendLat, 1, 1, cat(setup, []int{k, k, k, k}, closing), cat(setup, []int{k, k, k, k}, closing),
			[]string{"connect", "connected", "prepare", "measure"}, []string{"connect", "connected", "prepare", "measure"}},
	} {
		cw, sw, cc, sc := runPair(t, tc.test, tc.rounds, tc.qps)
		assert.Equal(t, tc.client, cw, "%v rounds %d: client wrote", tc.test, tc.rounds)
		assert.Equal(t, tc.server, sw, "%v rounds %d: server wrote", tc.test, tc.rounds)
		assert.Equal(t, tc.ccalls, cc, "%v: client hooks", tc.test)
		assert.Equal(t, tc.scalls, sc, "%v: server hooks", tc.test)
	}
}

func TestParseTest(t *testing.T) {
	for i, n := range testNames {
		got, err := ParseTest("ib_" + n)
		if assert.NoError(t, err, n) {
			assert.Equal(t, Test(i), got, "ParseTest(ib_%s)", n)
		}
	}
	_, err := ParseTest("write_bandwidth")
	assert.Error(t, err, "unknown name accepted")
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server = <-accepted
	require.NotNil(t, server, "accept failed")
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestSetupRejectsHugeSysData(t *testing.T) {
	c, s := pipe(t)
	go NewSession(s, Server, time.Second).Setup(PerftestVersion, SysData{1 << 30, 64}, 3)
	_, err := NewSession(c, Client, time.Second).Setup(PerftestVersion, SysData{4096, 64}, 3)
	require.ErrorIs(t, err, ErrFieldRange)
}

// Bidirectional runs (perftest -b) follow write_bw.c and atomic_bw.c
// main(): K before each round's run, K after it with -a (write and read
// only), then both reports cross.
func TestRunDuplexSequences(t *testing.T) {
	k := KeysMsgLen
	setup := []int{16, 4, 4, 2}
	rep := []int{8, 8, 8, 8, 8}
	var one []int
	one = append(one, setup...)
	one = append(one, k, k, k) // keys, keys after connect, extra
	one = append(one, k)       // before the run
	one = append(one, rep...)
	one = append(one, k, 5)
	calls := []string{"connect", "connected", "measure", "both"}
	for _, test := range []Test{WriteBW, AtomicBW} {
		cw, sw, cc, sc := runPairMode(t, test, 1, 1, true)
		assert.Equal(t, one, cw, "%v -b: client wrote", test)
		assert.Equal(t, one, sw, "%v -b: server wrote", test)
		assert.Equal(t, calls, cc, "%v -b: client hooks", test)
		assert.Equal(t, calls, sc, "%v -b: server hooks", test)
	}
	cw, _, cc, _ := runPairMode(t, ReadBW, 2, 1, true)
	want := append([]int{}, setup...)
	want = append(want, k, k, k)
	for r := 0; r < 2; r++ {
		want = append(want, k, k)
		want = append(want, rep...)
	}
	want = append(want, k, 5)
	assert.Equal(t, want, cw, "read_bw -b -a: client wrote")
	assert.Len(t, cc, 6, "read_bw -b -a: hooks")
	// send_bw -b: the post-connect K of send tests, Prepare before each
	// round's K, the K after the reports with -a.
	cw, _, cc, _ = runPairMode(t, SendBW, 2, 1, true)
	want = append([]int{}, setup...)
	want = append(want, k, k, k)
	for r := 0; r < 2; r++ {
		want = append(want, k)
		want = append(want, rep...)
		want = append(want, k)
	}
	want = append(want, k, 5)
	assert.Equal(t, want, cw, "send_bw -b -a: client wrote")
	assert.Equal(t, []string{"connect", "connected", "prepare", "measure", "both", "prepare", "measure", "both"}, cc, "send_bw -b -a: hooks")
	c, _ := tcpPair(t)
	_, err := NewSession(c, Client, time.Second).RunDuplex(SendLat, []PerftestDest{{}}, 1, Hooks{Connect: func([]PerftestDest) error { return nil }})
	assert.Error(t, err, "bidirectional send_lat accepted")
}
