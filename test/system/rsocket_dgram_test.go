package system

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/softnic/softnic/internal/systest"
)

// udpongPort is udpong's default port.
const udpongPort = 7174

// newDgramWorld is two softnic daemons on a veth of MTU 9000, so that the
// path MTU (4096) takes udpong's largest datagram (1536 bytes and the
// 8-byte ds_header): a UD message is one packet. args are end A's daemon
// flags.
func newDgramWorld(t *testing.T, args ...string) *providerWorld {
	netnstest.RequireCommands(t, "apt-get install rdmacm-utils ibverbs-utils perftest libibverbs-dev gcc make",
		append([]string{"cc", "make", "setpriv", "udpong"}, stockTools...)...)
	sw := systest.NewWorld(t, systest.Config{Provider: true, Net: netnstest.Config{MTU: 9000}, Args: [2][]string{args, nil}})
	return &providerWorld{bin: sw.Bin, runDir: sw.RunDir, a: &sw.Pair.A, b: &sw.Pair.B,
		daemons: []*systest.Daemon{sw.A, sw.B}, logs: []*syncbuf.Buffer{sw.A.Log, sw.B.Log}}
}

// udpongPair runs Debian's udpong server (bound to end A's address: with
// no -b it binds to loopback; its output line-buffered, as it serves for
// ever and is killed) and its client on end B, both through softnic exec
// as nobody, and returns their outputs once the client ended.
//
// udpong's client waits 1 ms for each echo, then sends again what its
// buffer holds, which a late (stale) answer has overwritten: once answers
// lag past 1 ms, stale echoes circulate and can crowd out the current one
// for good, a livelock of the tool that a loaded 2-CPU host can provoke.
// A client not done in 15 s is taken for that and run again, five runs
// in all, and the echo runs are short (20 echoes); bandwidth runs wait only for the start (1 s) and the end.
func (w *providerWorld) udpongPair(t *testing.T, args ...string) (string, string) {
	t.Helper()
	return w.udpongPairAt(t, w.a.Addr4(), args...)
}

// udpongPairAt is udpongPair with the server bound to addr, an address of
// end A's (IPv4 or IPv6).
func (w *providerWorld) udpongPairAt(t *testing.T, addr netip.Addr, args ...string) (string, string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		sout, cout, err := w.udpongAttempt(t, addr.String(), args...)
		if err != nil && attempt < 5 && strings.Contains(err.Error(), "exit status 124") {
			t.Logf("udpong %v: the client did not finish in time (udpong's echo livelock); again:\n%s", args, cout)
			continue
		}
		require.NoError(t, err, "client:\n%s\nserver:\n%s", cout, sout)
		return sout, cout
	}
}

func (w *providerWorld) udpongAttempt(t *testing.T, addr string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := w.command(ctx, w.a, append([]string{"stdbuf", "-oL", "udpong", "-b", addr}, args...)...)
	srv.WaitDelay = 5 * time.Second
	sout, exited := startWatched(t, srv)
	bound := func() bool {
		out, _ := w.a.Command("ss", "-Hlun", fmt.Sprintf("sport = :%d", udpongPort)).Output()
		return strings.TrimSpace(string(out)) != ""
	}
	require.Eventually(t, bound, 30*time.Second, 20*time.Millisecond, "udpong never bound:\n%s", sout)
	cout, cerr := w.command(ctx, w.b, append([]string{"timeout", "15", "udpong", "-s", addr}, args...)...).CombinedOutput()
	require.NoError(t, srv.Process.Kill())
	<-exited
	return sout.String(), string(cout), cerr
}

// udpongResult is a result line of udpong: name, size, transfers, bytes,
// seconds, Gb/s, µs per transfer.
var udpongResult = regexp.MustCompile(`(?m)^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+([0-9.]+)s\s+([0-9.]+)\s+([0-9.]+)$`)

// TestUdpong runs Debian's udpong (datagram rsockets: rsendto,
// rrecvfrom, rsend, rrecv, rpoll, rfcntl, rsetsockopt) between two
// softnic daemons as nobody: ping-pong (-T e: the server echoes each
// datagram) with non-blocking calls (udpong's default), blocking ones
// (-T b) and rpoll (-T a), from 64 to 1536 bytes; and bandwidth runs
// (no echo: the server counts what came and says so at the end), whose
// count may fall short of what was sent, as UD and UDP may drop, but must
// be positive; the echo and bandwidth runs again over IPv6. The client
// logs in first (its first datagram, over UDP), and the server names the
// client's address as rrecvfrom gave it.
// (udpong's default table, 10,000 echoes a row, is left out: see
// udpongPair.)
func TestUdpong(t *testing.T) {
	w := newDgramWorld(t)
	for _, tc := range []struct {
		name  string
		ipv6  bool // between the daemons' IPv6 addresses, else their IPv4 ones
		args  []string
		size  string // the result row's size column
		count string // its transfers column ("" for a bandwidth run: what the server counted)
	}{
		{"echo-nonblocking", false, []string{"-T", "e", "-S", "64", "-C", "20"}, "64", "40"},
		{"echo-blocking", false, []string{"-T", "b", "-T", "e", "-S", "1024", "-C", "20"}, "1k", "40"},
		{"echo-async", false, []string{"-T", "a", "-T", "e", "-S", "1536", "-C", "20"}, "1.5k", "40"},
		{"bandwidth", false, []string{"-S", "1536", "-C", "20000"}, "1.5k", ""},
		{"bandwidth-blocking", false, []string{"-T", "b", "-S", "100", "-C", "20000"}, "100", ""},
		{"ipv6-echo-nonblocking", true, []string{"-T", "e", "-S", "64", "-C", "20"}, "64", "40"},
		{"ipv6-echo-async", true, []string{"-T", "a", "-T", "e", "-S", "1536", "-C", "20"}, "1.5k", "40"},
		{"ipv6-bandwidth", true, []string{"-S", "1536", "-C", "20000"}, "1.5k", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, client := w.a.Addr4(), w.b.Addr4()
			if tc.ipv6 {
				server, client = w.a.Addr6(), w.b.Addr6()
			}
			sout, cout := w.udpongPairAt(t, server, tc.args...)
			assert.Contains(t, sout, "client login from "+client.String(), "server: rrecvfrom's source")
			rows := udpongResult.FindAllStringSubmatch(cout, -1)
			require.Len(t, rows, 1, "client:\n%s\nserver:\n%s", cout, sout)
			r := rows[0]
			assert.Equal(t, []string{"custom", tc.size}, r[1:3], "row")
			if tc.count != "" {
				assert.Equal(t, tc.count, r[3], "echo transfers: each way")
			} else {
				assert.NotEqual(t, "0", r[3], "datagrams the server counted")
			}
			t.Logf("client:\n%s", cout)
		})
	}
	w.stop(t)
}

// TestUdpongWire captures a short udpong run, the RoCE frames in the
// server daemon (--pcap) and the kernel's UDP datagrams with tcpdump in
// the server's namespace, and checks them against rdma-core's layout
// (librdmacm/rsocket.c): the client's first datagram goes over UDP with
// a ds_udp_header (tag 0x55555555, version 4, op DATA 0, length 16, the
// client's UD QPN in the low 24 bits, its IPv4 address), the server
// answers with op CTRL (7), header alone, naming its QPN and address;
// from then on the datagrams are UD SENDs whose payload starts with a
// ds_header (version 4, length 8, the sender's UDP port and IPv4
// address), each way, to the QPN the other side's UDP header named.
func TestUdpongWire(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install tcpdump", "tcpdump")
	dir, err := os.MkdirTemp("", "softnic-dswire-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o777))
	roceFile, udpFile := filepath.Join(dir, "roce.pcap"), filepath.Join(dir, "udp.pcap")
	w := newDgramWorld(t, "--pcap", roceFile)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dump := exec.CommandContext(ctx, "ip", "netns", "exec", w.a.Namespace, "tcpdump", "--immediate-mode", "-i", w.a.Ifname, "-U", "-w", udpFile, "udp", "port", fmt.Sprint(udpongPort))
	dout, dumped := startWatched(t, dump)
	require.Eventually(t, func() bool { return strings.Contains(dout.String(), "listening on") }, 20*time.Second,
		20*time.Millisecond, "tcpdump:\n%s", dout)
	_, cout := w.udpongPair(t, "-T", "e", "-S", "100", "-C", "20")
	require.Regexp(t, `(?m)^custom\s+100\s+40\s`, cout)
	// The login and the CTRL answer are in the file before tcpdump stops.
	require.Eventually(t, func() bool { st, err := os.Stat(udpFile); return err == nil && st.Size() >= 24+2*(16+42+16) },
		10*time.Second, 20*time.Millisecond, "tcpdump's file")
	require.NoError(t, dump.Process.Signal(os.Interrupt))
	<-dumped
	w.stop(t) // the daemon's capture is whole once it stopped

	srv, cli := w.a.Addr4(), w.b.Addr4()
	udps := readDgramPcap(t, udpFile)
	require.NotEmpty(t, udps, "tcpdump:\n%s", dout)
	require.Equal(t, cli, udps[0].src, "the first datagram is the client's login")
	// Each client run (udpongPair runs the client again after udpong's
	// echo livelock) logs in from a port of its own: its QPN, and the QPN
	// the server's CTRL answer to that port names.
	cliQPN, srvQPN := map[uint16]uint32{}, map[uint16]uint32{}
	for _, u := range udps {
		switch {
		case u.src == cli && u.dport == udpongPort:
			cliQPN[u.sport] = checkUDPHeader(t, u.payload, 0, cli)
			assert.Len(t, u.payload, 16+16, "login: header and udpong's 16-byte control message")
		case u.src == srv && cliQPN[u.dport] != 0 && srvQPN[u.dport] == 0:
			srvQPN[u.dport] = checkUDPHeader(t, u.payload, 7, srv)
			assert.Len(t, u.payload, 16, "CTRL: the header alone")
		}
	}
	require.NotEmpty(t, srvQPN, "the server's CTRL answer")
	cliPortOf := map[uint32]uint16{}
	for port, qpn := range cliQPN {
		cliPortOf[qpn] = port
	}

	sends := map[string]int{}
	for _, f := range readDgramPcap(t, roceFile) {
		if f.dport != 4791 || len(f.payload) < 12+8+8+4 || f.payload[0] != 0x64 { // BTH: UD SEND only
			continue
		}
		dqpn := binary.BigEndian.Uint32(f.payload[4:8]) & 0xffffff
		ds := f.payload[20:]
		port := binary.BigEndian.Uint16(ds[2:4])
		from, okQPN := "server", cliPortOf[dqpn] != 0
		if f.src == cli {
			from, okQPN = "client", srvQPN[port] != 0 && srvQPN[port] == dqpn
		} else {
			assert.Equal(t, uint16(udpongPort), port, "server's ds_header: port")
		}
		if assert.Equal(t, []byte{4, 8}, ds[:2], "%s's ds_header: version, length", from) &&
			assert.Equal(t, f.src.AsSlice(), ds[4:8], "%s's ds_header: address", from) &&
			assert.True(t, okQPN, "%s's UD SEND to QPN %#x from port %d: the QPN the peer's UDP header named", from, dqpn, port) {
			sends[from]++
		}
	}
	// Of 20 echoes and the start and end messages each way, the client's
	// login alone went over UDP.
	assert.GreaterOrEqual(t, sends["client"], 22, "the client's UD SENDs")
	assert.GreaterOrEqual(t, sends["server"], 23, "the server's UD SENDs")
}

// checkUDPHeader checks a ds_udp_header of op from addr and returns its QPN.
func checkUDPHeader(t *testing.T, p []byte, op byte, addr netip.Addr) uint32 {
	t.Helper()
	require.GreaterOrEqual(t, len(p), 16, "ds_udp_header")
	assert.Equal(t, []byte{0x55, 0x55, 0x55, 0x55}, p[:4], "tag")
	assert.Equal(t, []byte{4, op, 16, 0}, p[4:8], "version, op, length, reserved")
	assert.Zero(t, p[8], "the QPN's top byte")
	assert.Equal(t, addr.AsSlice(), p[12:16], "address")
	qpn := binary.BigEndian.Uint32(p[8:12])
	assert.NotZero(t, qpn, "QPN")
	return qpn
}

// dgramFrame is an IPv4 UDP frame of a capture.
type dgramFrame struct {
	src, dst     netip.Addr
	sport, dport uint16
	payload      []byte // the UDP payload
}

// readDgramPcap reads the IPv4 UDP frames of an Ethernet pcap file.
func readDgramPcap(t *testing.T, file string) []dgramFrame {
	t.Helper()
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(raw), 24, "pcap header")
	order := binary.ByteOrder(binary.LittleEndian)
	if binary.BigEndian.Uint32(raw) == 0xa1b2c3d4 || binary.BigEndian.Uint32(raw) == 0xa1b23c4d {
		order = binary.BigEndian
	}
	var frames []dgramFrame
	for off := 24; off+16 <= len(raw); {
		n := int(order.Uint32(raw[off+8:]))
		if off+16+n > len(raw) {
			break
		}
		f := raw[off+16 : off+16+n]
		off += 16 + n
		if len(f) < 14+20+8 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[14+9] != 17 {
			continue
		}
		ihl := int(f[14]&0xf) * 4
		u := f[14+ihl:]
		if len(u) < 8 {
			continue
		}
		ulen := int(binary.BigEndian.Uint16(u[4:]))
		if ulen < 8 || ulen > len(u) {
			continue
		}
		frames = append(frames, dgramFrame{src: netip.AddrFrom4([4]byte(f[26:30])), dst: netip.AddrFrom4([4]byte(f[30:34])),
			sport: binary.BigEndian.Uint16(u), dport: binary.BigEndian.Uint16(u[2:]), payload: u[8:ulen]})
	}
	return frames
}
