package system

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/softnic/softnic/internal/systest"
)

// TestRstream runs Debian's rstream (rsockets, librdmacm) between two
// softnic daemons as user nobody: softnic's librdmacm carries rsockets
// in rdma-core's protocol (provider/rsocket_int.h). -T v verifies each
// transfer's bytes; rstream's default (non-blocking sockets, each call
// retried until it moves bytes), with large transfers and few
// iterations, blocking calls (-T b: MSG_WAITALL on a blocking socket),
// async (-T a: rpoll before each call), -T n, and over IPv6.
func TestRstream(t *testing.T) {
	w := newProviderWorld(t)
	for _, tc := range []struct {
		name string
		ipv6 bool // the server binds its IPv6 address and the client connects there; else IPv4
		args []string
		last string // the start of the result line that ends the run
	}{
		{"default", false, []string{"-T", "v"}, "1m_bw"},
		{"large", false, []string{"-S", "65536", "-C", "1000", "-T", "v"}, "custom    64k     1k"},
		{"blocking", false, []string{"-T", "b", "-T", "v", "-S", "65536", "-C", "500"}, "custom    64k     500"},
		{"blocking-small", false, []string{"-T", "b", "-T", "v", "-S", "100", "-C", "2000"}, "custom    100     2k"},
		{"async", false, []string{"-T", "a", "-T", "v", "-S", "4096", "-C", "200"}, "custom    4k      200"},
		{"nonblocking", false, []string{"-T", "n", "-T", "v", "-S", "4096", "-C", "200"}, "custom    4k      200"},
		{"ipv6", true, []string{"-T", "v", "-S", "65536", "-C", "200"}, "custom    64k     200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The default run makes 111k round trips (100k of 64 bytes)
			// and as many one-way transfers: 56 s beside two qemu guests
			// and two builds, over 2 minutes (killed) once in CI beside
			// more.
			w.pairLimit = 0
			if tc.name == "default" {
				w.pairLimit = 8 * time.Minute
			}
			server, bind := "ADDR", []string(nil)
			if tc.ipv6 {
				server, bind = "ADDR6", []string{"-b", "ADDR6"}
			}
			sout, cout := w.cmPair(t, append(append([]string{"rstream"}, bind...), tc.args...),
				append([]string{"rstream", "-s", server}, tc.args...))
			for _, out := range []string{sout, cout} {
				assert.Regexp(t, `(?m)^`+tc.last, out, "rstream's result line")
				assert.NotContains(t, strings.ToLower(out), "fail", out)
			}
			t.Logf("client:\n%s", cout)
		})
	}
	w.stop(t)
}

// TestRcopy copies a file with Debian's rcopy between two softnic
// daemons as user nobody (rsend, rrecv, rshutdown between a server that
// writes what it receives and a client that sends a file) and compares
// the copy byte for byte: 3 MiB of a pattern no shift repeats, with an
// odd tail, so that a byte lost, doubled or misplaced in the receive
// ring shows.
func TestRcopy(t *testing.T) {
	w := newProviderWorld(t)
	dir, err := os.MkdirTemp("", "softnic-rcopy-") // t.TempDir's parent is closed to nobody
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o777))
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	data := make([]byte, 3<<20+12345)
	x := uint32(2463534242)
	for i := range data {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		data[i] = byte(x)
	}
	require.NoError(t, os.WriteFile(src, data, 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sock := filepath.Join(w.runDir, "softnic_"+w.a.Ifname+".sock")
	before, err := listeners(sock, 0)
	require.NoError(t, err)
	srv := w.command(ctx, w.a, "rcopy")
	srv.WaitDelay = 5 * time.Second
	sout, exited := startWatched(t, srv)
	require.NoError(t, awaitListener(ctx, sock, before.last, exited), "rcopy server:\n%s", sout)
	cout, cerr := w.command(ctx, w.b, "rcopy", src, w.a.Addr4().String()+":"+dst).CombinedOutput()
	require.NoError(t, srv.Process.Kill()) // the server accepts for ever
	<-exited
	require.NoError(t, cerr, "client:\n%s\nserver:\n%s", cout, sout)
	got, err := os.ReadFile(dst)
	require.NoError(t, err, "server:\n%s", sout)
	require.Equal(t, len(data), len(got), "copy's size")
	assert.True(t, bytes.Equal(data, got), "the copy differs from the file")
	assert.Contains(t, sout.String(), "client: "+w.b.Addr4().String(), "rcopy server: rgetpeername")
	w.stop(t)
}

// rspreload is Debian's librspreload.so, which makes a program's TCP
// sockets rsockets by calling librdmacm's (here softnic's) r* functions.
const rspreload = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so"

// preloaded is argv run with librspreload before softnic exec's preloads.
func preloaded(argv ...string) []string {
	return append([]string{"sh", "-c", `LD_PRELOAD=` + rspreload + `:$LD_PRELOAD exec "$@"`, "sh"}, argv...)
}

// TestRspreloadNc sends a file with netcat-openbsd's nc under
// librspreload between two softnic daemons as nobody, to
// testdata/tcp_sink.c under librspreload too (nc -l accepts with accept4,
// which Debian's librspreload does not carry): nc's TCP socket is an
// rsocket, so the bytes go over RDMA (the client's daemon counts at
// least a RoCE packet per 4 KiB, the largest path MTU, of the file), and
// the copy must equal the file. With fork support (RDMAV_FORK_SAFE=1, as
// rdma-core documents it) the sink forks and its child reads, and
// testdata/tcp_source.c sends: librspreload
// keeps both TCP sockets until the first transfer, then the child listens
// on an rsocket, tells nc over TCP, and nc connects to it; a failure there
// falls back to TCP silently, which the packet count would show.
func TestRspreloadNc(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install netcat-openbsd librdmacm1 gcc", "nc", "cc")
	_, err := os.Stat(rspreload)
	require.NoError(t, err, "librdmacm1's librspreload")
	w := newProviderWorld(t)
	dir, err := os.MkdirTemp("", "softnic-nc-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o777))
	src := filepath.Join(dir, "src")
	data := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyz\n"), 30000) // about 1.1 MB
	require.NoError(t, os.WriteFile(src, data, 0o644))
	sink, source := filepath.Join(dir, "tcp_sink"), filepath.Join(dir, "tcp_source")
	for _, prog := range []string{sink, source} {
		out, err := exec.Command("cc", "-O1", "-Wall", "-Wextra", "-Werror", "-o", prog,
			filepath.Join("testdata", filepath.Base(prog)+".c")).CombinedOutput()
		require.NoError(t, err, "cc %s.c: %s", prog, out)
	}
	nc := func(addr, port, file string) []string {
		return []string{"sh", "-c", `exec nc -N "$0" "$1" < "$2"`, addr, port, file}
	}
	// fork support takes only sockets of a plain SOCK_STREAM type: nc's
	// are not
	plainSource := func(addr, port, file string) []string { return []string{source, addr, port, file} }

	for i, tc := range []struct {
		name   string
		env    []string // before the programs, through env(1)
		sink   []string // tcp_sink's flags
		client func(addr, port, file string) []string
	}{
		{"plain", nil, nil, nc},
		{"fork", []string{"RDMAV_FORK_SAFE=1"}, []string{"-f"}, plainSource},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			dst := filepath.Join(dir, "dst-"+tc.name)
			port := strconv.Itoa(5001 + i)
			withEnv := func(argv ...string) []string {
				return preloaded(append(append([]string{"env"}, tc.env...), argv...)...)
			}
			sock := filepath.Join(w.runDir, "softnic_"+w.a.Ifname+".sock")
			before, err := listeners(sock, 0)
			require.NoError(t, err)
			srv := w.command(ctx, w.a, withEnv(append(append([]string{sink}, tc.sink...), w.a.Addr4().String(), port, dst)...)...)
			srv.WaitDelay = 5 * time.Second
			sout, exited := startWatched(t, srv)
			if tc.env == nil {
				require.NoError(t, awaitListener(ctx, sock, before.last, exited), "nc -l:\n%s", sout)
			} else {
				// fork support listens on a TCP socket first
				require.NoError(t, waitTCPListen(ctx, w.a, port, exited), "sink:\n%s", sout)
			}
			sentBefore := rocePktsSent(t, w)
			cout, cerr := w.command(ctx, w.b, withEnv(tc.client(w.a.Addr4().String(), port, src)...)...).CombinedOutput()
			require.NoError(t, cerr, "client nc:\n%s\nserver:\n%s", cout, sout)
			require.NoError(t, <-exited, "server:\n%s", sout)
			got, err := os.ReadFile(dst)
			require.NoError(t, err)
			require.Equal(t, len(data), len(got), "copy's size")
			assert.True(t, bytes.Equal(data, got), "the copy differs from the file")
			assert.GreaterOrEqual(t, rocePktsSent(t, w)-sentBefore, uint64(len(data)/4096), "RoCE packets the client's daemon sent")
		})
	}
	w.stop(t)
}

// waitTCPListen waits until a TCP socket listens on port in end's
// namespace (ss), or the process ends.
func waitTCPListen(ctx context.Context, end *netnstest.End, port string, exited chan error) error {
	for {
		out, _ := end.Command("ss", "-Hltn", "sport = :"+port).Output()
		if len(bytes.TrimSpace(out)) > 0 {
			return nil
		}
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("exited before listening: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// rocePktsSent is end B's sent_pkts, from softnic stat as nobody.
func rocePktsSent(t *testing.T, w *providerWorld) uint64 {
	t.Helper()
	return rocePktsSentBy(t, w, w.b)
}

// rocePktsSentBy is end's sent_pkts, from softnic stat as nobody.
func rocePktsSentBy(t *testing.T, w *providerWorld, end *netnstest.End) uint64 {
	t.Helper()
	argv := systest.AsUser(systest.Nobody, w.bin, "stat", "-d", end.Ifname)
	cmd := end.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+w.runDir)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "softnic stat: %s", out)
	return parseStatLine(t, string(out))["sent_pkts"]
}

// TestRspreloadIperf3 runs iperf3 (its control and data connections)
// under librspreload between two softnic daemons as nobody: a second of
// TCP-over-rsockets, which the client's daemon must have carried as RoCE
// packets (at least one per 4 KiB of what iperf3 says it sent).
func TestRspreloadIperf3(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install iperf3 librdmacm1", "iperf3")
	_, err := os.Stat(rspreload)
	require.NoError(t, err, "librdmacm1's librspreload")
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sock := filepath.Join(w.runDir, "softnic_"+w.a.Ifname+".sock")
	before, err := listeners(sock, 0)
	require.NoError(t, err)
	srv := w.command(ctx, w.a, preloaded("iperf3", "-s", "-1", "-B", w.a.Addr4().String(), "-p", "5201")...)
	srv.WaitDelay = 5 * time.Second
	sout, exited := startWatched(t, srv)
	require.NoError(t, awaitListener(ctx, sock, before.last, exited), "iperf3 -s:\n%s", sout)
	sentBefore := rocePktsSent(t, w)
	cout, cerr := w.command(ctx, w.b, preloaded("iperf3", "-c", w.a.Addr4().String(), "-p", "5201", "-t", "1", "-J")...).CombinedOutput()
	require.NoError(t, cerr, "client iperf3:\n%s\nserver:\n%s", cout, sout)
	require.NoError(t, <-exited, "server iperf3:\n%s", sout)
	var res struct {
		End struct {
			SumSent struct {
				Bytes float64 `json:"bytes"`
			} `json:"sum_sent"`
		} `json:"end"`
	}
	require.NoError(t, json.Unmarshal(cout, &res), "iperf3 -J:\n%s", cout)
	require.Positive(t, res.End.SumSent.Bytes, "iperf3's bytes sent:\n%s", cout)
	assert.GreaterOrEqual(t, rocePktsSent(t, w)-sentBefore, uint64(res.End.SumSent.Bytes/4096), "RoCE packets the client's daemon sent")
	t.Logf("iperf3 sent %.0f bytes over rsockets", res.End.SumSent.Bytes)
	w.stop(t)
}

// TestRiostream runs Debian's riostream (riomap, riowrite: RDMA WRITEs
// into the region the peer mapped, offered through its iomap) between
// two softnic daemons as nobody: ping-pong of small writes, large
// transfers, and asynchronous. (Its default table runs 100k round trips
// of each side spinning on the buffer's last byte, which starve the
// daemons of a 2-CPU host; the runs here are short.)
func TestRiostream(t *testing.T) {
	w := newProviderWorld(t)
	for _, tc := range []struct {
		name string
		args []string
		last string // the start of the result line that ends the run
	}{
		{"latency", []string{"-S", "64", "-C", "1", "-I", "300"}, "custom    64      1       300"},
		{"large", []string{"-S", "65536", "-C", "500"}, "custom    64k     500"},
		{"async", []string{"-T", "a", "-S", "4096", "-C", "200"}, "custom    4k      200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sout, cout := w.cmPair(t, append([]string{"riostream"}, tc.args...),
				append([]string{"riostream", "-s", "ADDR"}, tc.args...))
			for _, out := range []string{sout, cout} {
				assert.Regexp(t, `(?m)^`+tc.last, out, "riostream's result line")
			}
			t.Logf("client:\n%s", cout)
		})
	}
	w.stop(t)
}

// TestRsocketWire captures (the server daemon's --pcap) a short rstream
// run and looks for rdma-core's rs_conn_data in the CM's REQ and REP, as
// rsocket.c lays it out: version 1, flags IOMAP (2), credits 384
// big-endian, three reserved zeros, iomap size 0, then the target SGL
// (address, key, length 2 entries) and the data buffer (address, key,
// length 512 KiB: half of the 1 MiB receive buffer that rstream's
// SO_RCVBUF of 512 KiB makes, doubled as rdma-core does), all
// big-endian; and for the data, RDMA WRITEs with immediate.
func TestRsocketWire(t *testing.T) {
	dir, err := os.MkdirTemp("", "softnic-rswire-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o777))
	file := filepath.Join(dir, "a.pcap")
	netnstest.RequireCommands(t, "apt-get install ibverbs-utils perftest libibverbs-dev librdmacm-dev gcc make",
		append([]string{"cc", "make", "setpriv"}, stockTools...)...)
	sw := systest.NewWorld(t, systest.Config{Provider: true, Args: [2][]string{{"--pcap", file}, nil}})
	w := &providerWorld{bin: sw.Bin, runDir: sw.RunDir, a: &sw.Pair.A, b: &sw.Pair.B,
		daemons: []*systest.Daemon{sw.A, sw.B}, logs: []*syncbuf.Buffer{sw.A.Log, sw.B.Log}}
	w.cmPair(t, []string{"rstream", "-S", "1000", "-C", "10"}, []string{"rstream", "-s", "ADDR", "-S", "1000", "-C", "10"})
	w.stop(t) // the capture is whole once the daemon stopped
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	head := []byte{1, 2, 0x01, 0x80, 0, 0, 0, 0}
	found := 0
	for i := 0; i+40 <= len(raw); i++ {
		c := raw[i : i+40]
		if bytes.Equal(c[:8], head) && bytes.Equal(c[20:24], []byte{0, 0, 0, 2}) && bytes.Equal(c[36:40], []byte{0, 8, 0, 0}) {
			found++
		}
	}
	if !assert.GreaterOrEqual(t, found, 2, "rs_conn_data in the REQ and the REP") {
		for i := 0; i+40 <= len(raw); i++ {
			if raw[i] == 1 && raw[i+1] == 2 && bytes.Equal(raw[i+4:i+8], []byte{0, 0, 0, 0}) {
				t.Logf("a candidate at %d: % x", i, raw[i:i+40])
			}
		}
	}
	out, err := exec.Command(w.bin, "inspect", file).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, want := range []string{"CM_REQ", "CM_REP", "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"} {
		assert.Contains(t, string(out), " "+want, "softnic inspect of the server's capture:\n%s", tail(string(out)))
	}
}
