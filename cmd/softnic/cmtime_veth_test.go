package main

import (
	"context"
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
)

// cmtimeConnections is how many connections TestCmtime makes:
// SOFTNIC_CMTIME_CONNECTIONS, or 1000.
func cmtimeConnections(t *testing.T) int {
	n := 1000
	if s := os.Getenv("SOFTNIC_CMTIME_CONNECTIONS"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err, "SOFTNIC_CMTIME_CONNECTIONS")
	}
	return n
}

// cmtime's descriptors: rdma_create_qp without CQs makes two completion
// channels per connection (rdma-core's ucma_create_cqs), descriptors of
// the process with the kernel's librdmacm as with softnic's (and of the
// daemon, which holds each channel's write end), so N connections need
// RLIMIT_NOFILE above 2N on each side, as over the kernel: this machine's
// hard limit is 20000 (and raising it needs CAP_SYS_RESOURCE, which its
// root lacks), the most connections cmtime can make here about 9,990.

// TestCmtime runs Debian's cmtime (rdmacm-utils) between two daemons in
// two namespaces, as user nobody: its server listens with a backlog of 0
// (the ucma's most, 1024) and the client makes every connection at once,
// step by step (resolve, route, QP, connect, disconnect); every one must
// be established, and afterwards neither daemon holds an object of the
// programs (softnic stat res). Each step's time is logged.
func TestCmtime(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install rdmacm-utils", "cmtime")
	n := cmtimeConnections(t)
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sock := filepath.Join(w.runDir, "softnic_"+w.a.Ifname+".sock")
	before, err := listeners(sock, 0)
	require.NoError(t, err)
	srv := w.command(ctx, w.a, "cmtime")
	var sout syncbuf.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	srv.WaitDelay = 5 * time.Second
	exited := make(chan error, 1)
	require.NoError(t, srv.Start())
	go func() { exited <- srv.Wait() }()
	defer func() {
		srv.Process.Kill()
		<-exited
	}()
	require.NoError(t, awaitListener(ctx, sock, before.last, exited), "%s", sout.String())

	start := time.Now()
	out, err := w.command(ctx, w.b, "cmtime", "-s", w.a.Addr4().String(), "-c", strconv.Itoa(n)).CombinedOutput()
	took := time.Since(start)
	require.NoError(t, ctx.Err(), "cmtime -c %d did not end:\n%s\nserver:\n%s", n, outTail(out), sout.String())
	require.NoError(t, err, "%s\nserver:\n%s", outTail(out), sout.String())
	t.Logf("cmtime -c %d: %v\n%s", n, took, cmtimeSteps(string(out)))
	for _, bad := range []string{"event:", "ERROR", "failure", "failing"} {
		assert.NotContains(t, string(out), bad, "a connection failed:\n%s", outTail(out))
		assert.NotContains(t, sout.String(), bad, "the server failed a connection:\n%s", sout.String())
	}
	for _, step := range []string{"resolve addr", "resolve route", "create qp", "connect", "disconnect", "destroy"} {
		assert.Regexp(t, `(?m)^`+step+` *: +[0-9.]+`, string(out), "no figure for %s", step)
	}

	// The client is gone; its daemon holds nothing of it. The server's
	// connections went with the client's disconnects.
	srv.Process.Kill()
	<-exited
	exited <- nil
	for _, end := range []*netnstest.End{w.a, w.b} {
		require.Eventually(t, func() bool { return w.objectsLeft(t, end) == "" }, 30*time.Second, 50*time.Millisecond,
			"%s's daemon still holds: %s", end.Ifname, w.objectsLeft(t, end))
	}
}

// objectsLeft describes what end's daemon's sessions hold ("" nothing).
func (w *providerWorld) objectsLeft(t *testing.T, end *netnstest.End) string {
	out, err := exec.Command(w.bin, "stat", "res", "--run-dir", w.runDir, "-d", end.Ifname).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var left []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(l, "ctxn") {
			left = append(left, l)
		}
	}
	return strings.Join(left, "\n")
}

// cmtimeSteps is cmtime's table of steps.
func cmtimeSteps(out string) string {
	if i := strings.Index(out, "step "); i >= 0 {
		return out[i:]
	}
	return outTail([]byte(out))
}

// outTail is the end of a long output.
func outTail(out []byte) string {
	const keep = 4000
	if len(out) > keep {
		return "...\n" + string(out[len(out)-keep:])
	}
	return string(out)
}
