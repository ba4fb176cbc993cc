package oob

import (
	"errors"
	"net"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"
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

func TestPingpongGolden(t *testing.T) {
	d := PingpongDest{LID: 0, QPN: 0x11, PSN: 0x7f1a4b, GID: testGID}
	b, err := d.Format()
	require.NoError(t, err)
	if string(b) != goldenPingpong {
		t.Fatalf("Format = %q, want %q", b, goldenPingpong)
	}
	got, err := ParsePingpongDest([]byte(goldenPingpong))
	if err != nil || got != d {
		t.Fatalf("Parse = %+v, %v; want %+v", got, err, d)
	}
	if s := d.String(); s != "LID 0x0000, QPN 0x000011, PSN 0x7f1a4b, GID ::ffff:10.0.0.1" {
		t.Fatalf("String = %q", s)
	}
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
		if _, err := ParsePingpongDest([]byte(tc.msg)); !errors.Is(err, tc.want) {
			t.Errorf("Parse(%q) = %v, want %v", tc.msg, err, tc.want)
		}
	}
	if _, err := (PingpongDest{QPN: 1 << 24}).Format(); !errors.Is(err, ErrFieldRange) {
		t.Errorf("Format of a 25-bit QPN = %v", err)
	}
}

func TestGIDText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"::ffff:10.0.0.1", "::ffff:10.0.0.1"},
		{"fe80::1", "fe80::1"},
		{"::", "::"},
		{"::1", "::1"},
		{"::1.2.3.4", "::1.2.3.4"}, // glibc's inet_ntop keeps the dotted tail
	} {
		if got := GIDText(netip.MustParseAddr(tc.in).As16()); got != tc.want {
			t.Errorf("GIDText(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPingpongExchange(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	cli := PingpongDest{LID: 1, QPN: 0x12, PSN: 0x345678, GID: testGID}
	srv := PingpongDest{LID: 2, QPN: 0x13, PSN: 0xabcdef, GID: testGID}
	var wg sync.WaitGroup
	var connected PingpongDest
	var srvGot PingpongDest
	var srvErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		srvGot, srvErr = PingpongServer(s, srv, func(r PingpongDest) error { connected = r; return nil }, time.Second)
	}()
	cliGot, err := PingpongClient(c, cli, time.Second)
	wg.Wait()
	if err != nil || srvErr != nil {
		t.Fatalf("client %v, server %v", err, srvErr)
	}
	if cliGot != srv || srvGot != cli || connected != cli {
		t.Fatalf("client got %+v, server got %+v (connect %+v)", cliGot, srvGot, connected)
	}
}

func TestPingpongServerWantsDone(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
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
	if err := <-errc; !errors.Is(err, ErrNotDone) {
		t.Fatalf("server error %v, want ErrNotDone", err)
	}
}

func TestPingpongTimeout(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	_, err := PingpongServer(s, PingpongDest{}, nil, 20*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("server error %v, want a timeout", err)
	}
}

func TestKeysGolden(t *testing.T) {
	d := PerftestDest{OutReads: 1, QPN: 0x11, PSN: 0x7f1a4b, RKey: 0x1234, VAddr: 0x7f8ab7f41000, GID: testGID}
	b, err := d.Format()
	require.NoError(t, err)
	if string(b) != goldenKeys {
		t.Fatalf("Format = %q\nwant %q", b, goldenKeys)
	}
	got, err := ParsePerftestDest([]byte(goldenKeys))
	if err != nil || got != d {
		t.Fatalf("Parse = %+v, %v; want %+v", got, err, d)
	}
	full := PerftestDest{LID: 0xffff, OutReads: 0x10, QPN: 0xffffff, PSN: 0xffffff, RKey: 0xffffffff, VAddr: ^uint64(0), SRQN: 0xdeadbeef}
	for i := range full.GID {
		full.GID[i] = byte(0xf0 + i)
	}
	b, _ = full.Format()
	if got, err := ParsePerftestDest(b); err != nil || got != full {
		t.Fatalf("round trip of %+v = %+v, %v", full, got, err)
	}
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
		if _, err := ParsePerftestDest(tc.msg); !errors.Is(err, tc.want) {
			t.Errorf("Parse(%q) = %v, want %v", tc.msg, err, tc.want)
		}
	}
	if _, err := ParsePerftestDest(upper); err != nil {
		t.Errorf("upper-case hex refused: %v", err)
	}
}

func TestVersionAndMTUMessages(t *testing.T) {
	b, err := FormatVersion(PerftestVersion)
	if err != nil || string(b) != "6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" {
		t.Fatalf("FormatVersion = %q, %v", b, err)
	}
	if s, f, err := ParseVersion(b); err != nil || s != "6.06" || f != 6.06 {
		t.Fatalf("ParseVersion = %q %v %v", s, f, err)
	}
	if _, _, err := ParseVersion([]byte("6.06xxxxxxxxxxxx")); !errors.Is(err, ErrMessageFormat) {
		t.Errorf("unterminated version: %v", err)
	}
	if _, _, err := ParseVersion([]byte("abc\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")); !errors.Is(err, ErrMessageFormat) {
		t.Errorf("non-numeric version: %v", err)
	}
	m, _ := FormatMTU(3)
	if string(m) != "3\x00" {
		t.Fatalf("FormatMTU(3) = %q", m)
	}
	for _, bad := range []string{"0\x00", "6\x00", "3x", "33"} {
		if _, err := ParseMTU([]byte(bad)); !errors.Is(err, ErrFieldRange) {
			t.Errorf("ParseMTU(%q) = %v", bad, err)
		}
	}
	if MTUBytes(3) != 1024 || MTUEnum(4096) != 5 || MTUEnum(1500) != 0 {
		t.Error("MTU conversions")
	}
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
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	var wg sync.WaitGroup
	var sn Negotiated
	var serr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		sn, serr = NewSession(s, Server, time.Second).Setup("6.06", SysData{4096, 64}, 5)
	}()
	cn, cerr := NewSession(c, Client, time.Second).Setup("6.06", SysData{65536, 128}, 3)
	wg.Wait()
	if cerr != nil || serr != nil {
		t.Fatal(cerr, serr)
	}
	want := Negotiated{RemoteVersion: "6.06", SysData: SysData{65536, 128}, MTU: 3}
	if cn != want || sn != want {
		t.Fatalf("client %+v server %+v, want %+v", cn, sn, want)
	}
}

func TestSetupRejectsOldPeer(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	go NewSession(s, Server, time.Second).Setup("5.60", SysData{4096, 64}, 3)
	_, err := NewSession(c, Client, time.Second).Setup(PerftestVersion, SysData{4096, 64}, 3)
	if !errors.Is(err, ErrVersion) {
		t.Fatalf("got %v, want ErrVersion", err)
	}
}

func TestReportExchange(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	rep := BWReport{Size: 65536, Iters: 5000, BWPeak: 1234.5, BWAvg: 1200.25, MsgRate: 0.019204}
	var got BWReport
	var serr error
	done := make(chan struct{})
	go func() {
		got, serr = NewSession(s, Server, time.Second).Report(BWReport{})
		close(done)
	}()
	back, err := NewSession(c, Client, time.Second).Report(rep)
	<-done
	if err != nil || serr != nil || got != rep || back != (BWReport{}) {
		t.Fatalf("server got %+v (%v), client got %+v (%v)", got, serr, back, err)
	}
}

// TestReportBytes checks the wire form: 8 big-endian bytes per value, the
// doubles as IEEE 754 (hton_double = bswap_64 of the bits on x86).
func TestReportBytes(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
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
		if _, err := s.Read(buf); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(buf, w) {
			t.Fatalf("value %d = % x, want % x", i, buf, w)
		}
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
				if theirs.Iters != 10 || theirs.BWAvg != 1 {
					t.Errorf("duplex peer report %+v", theirs)
				}
				rec("both")
				return nil
			},
			ServerReport: func(r BWReport) error {
				if r.Iters != 10 || r.BWAvg != 1 {
					t.Errorf("server got report %+v", r)
				}
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
	if cerr != nil || serr != nil {
		t.Fatalf("%v: client %v, server %v", test, cerr, serr)
	}
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
		if !reflect.DeepEqual(cw, tc.client) || !reflect.DeepEqual(sw, tc.server) {
			t.Errorf("%v rounds %d: client wrote %v, want %v; server wrote %v, want %v", tc.test, tc.rounds, cw, tc.client, sw, tc.server)
		}
		if !reflect.DeepEqual(cc, tc.ccalls) || !reflect.DeepEqual(sc, tc.scalls) {
			t.Errorf("%v: client hooks %v want %v; server hooks %v want %v", tc.test, cc, tc.ccalls, sc, tc.scalls)
		}
	}
}

func TestParseTest(t *testing.T) {
	for i, n := range testNames {
		if got, err := ParseTest("ib_" + n); err != nil || got != Test(i) {
			t.Errorf("ParseTest(ib_%s) = %v, %v", n, got, err)
		}
	}
	if _, err := ParseTest("write_bandwidth"); err == nil {
		t.Error("unknown name accepted")
	}
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
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestSetupRejectsHugeSysData(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	go NewSession(s, Server, time.Second).Setup(PerftestVersion, SysData{1 << 30, 64}, 3)
	_, err := NewSession(c, Client, time.Second).Setup(PerftestVersion, SysData{4096, 64}, 3)
	if !errors.Is(err, ErrFieldRange) {
		t.Fatalf("got %v, want ErrFieldRange", err)
	}
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
		if !reflect.DeepEqual(cw, one) || !reflect.DeepEqual(sw, one) || !reflect.DeepEqual(cc, calls) || !reflect.DeepEqual(sc, calls) {
			t.Errorf("%v -b: client %v %v, server %v %v; want %v %v", test, cw, cc, sw, sc, one, calls)
		}
	}
	cw, _, cc, _ := runPairMode(t, ReadBW, 2, 1, true)
	want := append([]int{}, setup...)
	want = append(want, k, k, k)
	for r := 0; r < 2; r++ {
		want = append(want, k, k)
		want = append(want, rep...)
	}
	want = append(want, k, 5)
	if !reflect.DeepEqual(cw, want) || len(cc) != 6 {
		t.Errorf("read_bw -b -a: client wrote %v, want %v; hooks %v", cw, want, cc)
	}
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
	if !reflect.DeepEqual(cw, want) || !reflect.DeepEqual(cc, []string{"connect", "connected", "prepare", "measure", "both", "prepare", "measure", "both"}) {
		t.Errorf("send_bw -b -a: client wrote %v, want %v; hooks %v", cw, want, cc)
	}
	c, _ := tcpPair(t)
	if _, err := NewSession(c, Client, time.Second).RunDuplex(SendLat, []PerftestDest{{}}, 1, Hooks{Connect: func([]PerftestDest) error { return nil }}); err == nil {
		t.Error("bidirectional send_lat accepted")
	}
}
