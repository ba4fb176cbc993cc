package interop

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInteropThroughDaemon runs softnic's tools as user nobody through a
// `softnic daemon` serving softnic's interface against perftest and
// ibv_rc_pingpong, ibv_uc_pingpong and ibv_ud_pingpong over rdma_rxe, both
// ways: every perftest test at its default size and the pingpongs, as in
// TestInteropWithRealTools, and with rdma_cm rping and perftest's -R
// write_bw and send_bw, as in TestInteropRDMACM; then Debian's own tools on
// softnic's side through softnic exec, the C provider and softnic's
// librdmacm (ibv_rc_pingpong, ib_write_bw, ib_read_bw, ib_send_bw -R,
// rping -v -V, and udaddy: UD, SIDR against Linux's CM). Every tool's session must reach the daemon.
func TestInteropThroughDaemon(t *testing.T) {
	requireInteropHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	var runs []interopRun
	for _, s := range []string{"1", "65536"} {
		runs = append(runs, pingpongRun(s))
	}
	runs = append(runs, otherPingpongRun("uc", "4096"), otherPingpongRun("ud", "1024"))
	for _, tt := range interopTests {
		runs = append(runs, perfRun(tt, tt, "-n", interopIters))
	}
	// rdma_cm through the daemon (its cm_* commands).
	runs = append(runs, rpingRun("64"), rpingRun("4000"),
		perfRun("write_bw-R", "write_bw", "-R", "-n", interopIters), perfRun("send_bw-R", "send_bw", "-R", "-n", interopIters))
	// Debian's own tools on softnic's side too, through the C provider.
	// read_bw with -o 16 on both sides: perftest's client takes the
	// server's outstanding READs for its max_rd_atomic, rxe's 128, which a
	// device of 16 refuses at RTS (ConnectX's mlx5 as softnic; rxe itself
	// refuses above its 128), as users of mixed fabrics know.
	runs = append(runs, stockRun(pingpongRun("4096")), stockRun(perfRun("write_bw", "write_bw", "-n", interopIters)),
		stockRun(perfRun("read_bw", "read_bw", "-o", "16", "-n", interopIters)))
	// And Debian's librdmacm programs, through softnic's librdmacm.so.1.
	runs = append(runs, stockRun(perfRun("send_bw-R", "send_bw", "-R", "-n", interopIters)), stockRpingRun("10"),
		stockUdaddyRun())
	e := startInterop(t, ctx, "sndmn", interopPlan{toServer: runs, toClient: runs, scriptTimeout: 8 * time.Minute, queues: 1})
	log := e.startDaemon()
	guestOut, _ := e.runAll(runs, runs, 2*time.Minute)
	for _, r := range e.results {
		if r.name == "read_lat server" || r.run.rping {
			continue // perftest's read_lat server prints no figures, rping no perftest line
		}
		assert.Regexpf(t, r.run.resultRE(), r.out, "softnic %s through the daemon printed no result line", r.name)
		if r.run.softnic[0] == "perf" {
			assert.Containsf(t, r.out, "the device is the daemon's", "softnic %s did not run through the daemon", r.name)
		}
	}
	checkPingpongs(t, e.results, guestOut, "pingpong-s", []string{"1", "65536"})
	checkPingpongs(t, e.results, guestOut, "uc-pingpong-s", []string{"4096"})
	checkPingpongs(t, e.results, guestOut, "ud-pingpong-s", []string{"1024"})
	checkRpings(t, e.results, guestOut, []string{"64", "4000"})
	checkPingpongs(t, e.results, guestOut, "stock-pingpong-s", []string{"4096"})
	checkStockRpings(t, e.results, guestOut, 10)
	checkStockUdaddy(t, e.results, guestOut)
	// (send_bw's sides measure each their own, as send_bw-R's above.)
	for _, tt := range []string{"write_bw", "read_bw", "atomic_bw", "write_bw-R", "stock-write_bw", "stock-read_bw"} {
		checkSameReport(t, e.results, guestOut, tt)
	}
	want := 2 * len(runs)
	require.Eventuallyf(t, func() bool { return strings.Count(log.String(), "session ended") >= want }, 10*time.Second,
		50*time.Millisecond, "want %d sessions ended in the daemon's log:\n%s", want, log.String())
}

// startDaemon serves softnic's interface with `softnic daemon` for the
// rest of the test and makes e's tools use it, as user nobody: the binary
// and the run directory are copied where every user may reach them. It
// returns the daemon's log. extra are added daemon flags.
func (e *interopEnv) startDaemon(extra ...string) *syncbuf.Buffer {
	t := e.t
	dir, err := os.MkdirTemp("", "softnic-interop-daemon-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	self, err := os.ReadFile(e.bin)
	require.NoError(t, err)
	e.bin = filepath.Join(dir, "softnic")
	require.NoError(t, os.WriteFile(e.bin, self, 0o755))
	// The C provider beside it, where softnic exec finds it.
	out, err := exec.Command("make", "-s", "-C", filepath.Join("..", "..", "provider"), "O="+dir).CombinedOutput()
	require.NoError(t, err, "make provider: %s", out)
	e.runDir = filepath.Join(dir, "run")

	log := &syncbuf.Buffer{}
	cmd := exec.Command("ip", "netns", "exec", e.net.PeerNS, e.bin, "daemon", "-d", e.net.PeerLink, "--run-dir", e.runDir)
	cmd.Args = append(cmd.Args, extra...)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			assert.NoErrorf(t, err, "the daemon's exit:\n%s", log.String())
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Errorf("the daemon did not stop in 30 s:\n%s", log.String())
		}
	})
	require.Eventuallyf(t, func() bool { return strings.Contains(log.String(), "serving") }, 20*time.Second,
		50*time.Millisecond, "the daemon did not start:\n%s", log.String())
	return log
}
