package system

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRstream runs Debian's rstream (rsockets, librdmacm) between two
// softnic daemons as user nobody: softnic's librdmacm carries rsockets
// in rdma-core's protocol (provider/rsocket_int.h). -T v verifies each
// transfer's bytes; blocking (default), with large transfers and few
// iterations, and non-blocking sockets.
func TestRstream(t *testing.T) {
	w := newProviderWorld(t)
	for _, tc := range []struct {
		name string
		args []string
		last string // the start of the result line that ends the run
	}{
		{"blocking", []string{"-T", "v"}, "1m_bw"},
		{"large", []string{"-S", "65536", "-C", "1000", "-T", "v"}, "custom    64k     1k"},
		{"async", []string{"-T", "a", "-T", "v", "-S", "4096", "-C", "200"}, "custom    4k      200"},
		{"nonblocking", []string{"-T", "n", "-T", "v", "-S", "4096", "-C", "200"}, "custom    4k      200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sout, cout := w.cmPair(t, append([]string{"rstream"}, tc.args...),
				append([]string{"rstream", "-s", "ADDR"}, tc.args...))
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
