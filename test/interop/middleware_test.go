package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// softnic perf -R with the options people give perftest -R (issue #33),
// through the daemon, against ib_*_bw -R on rdma_rxe; Debian's
// fi_pingpong and ucx_perftest on both sides are in
// middleware_fabric_test.go.

// perfRRuns are softnic perf -R with the options people combine it with:
// -a (every size from 2 bytes to 8 MiB), -s with -q 4 (four connections),
// -b (both ways at once), for each bandwidth test.
func perfRRuns() []interopRun {
	var runs []interopRun
	for _, tt := range []string{"write_bw", "read_bw", "send_bw"} {
		runs = append(runs,
			perfRun(tt+"-R-a", tt, "-R", "-a", "-n", "5"),
			perfRun(tt+"-R-q4", tt, "-R", "-s", "1048576", "-q", "4", "-n", "20"),
			perfRun(tt+"-R-b", tt, "-R", "-b", "-s", "4096", "-n", interopIters))
	}
	return runs
}

// perfRBytes is the least a perfRRuns run moves each way it sends: -a's
// 5 iterations of every size 2..8 MiB, -q 4's 20 of 1 MiB (at least, on
// however many QPs), -b's 50 of 4 KiB.
func perfRBytes(name string) int64 {
	switch {
	case strings.HasSuffix(name, "-a"):
		var n int64
		for s := int64(2); s <= 8<<20; s *= 2 {
			n += 5 * s
		}
		return n
	case strings.HasSuffix(name, "-q4"):
		return 20 << 20
	}
	return 50 * 4096
}

// guestQueueLen is the guest's tap queue in packets in runPerfR: a READ
// responder sends every response it owes at once (ConnectX at line rate,
// softnic as fast as its engine), up to -a's five outstanding 8 MiB READs
// (40,960 frames), and the TCG guest drains its tap at 20-40 MB/s. RoCE
// expects a lossless fabric (PFC); behind the tap's default 1,000-packet
// drop-tail queue the tail of every READ over 1 MiB was dropped (76,466
// of 151,904 frames in one run), and rxe then waits for its retransmit
// timer, about 2.4 s a READ: 0.6-0.9 MB/s. rxe as the responder is paced
// by the guest itself and needs no room.
const guestQueueLen = 65536

// deepenGuestQueue gives the guest's tap guestQueueLen packets of queue.
func (e *interopEnv) deepenGuestQueue() {
	out, err := exec.Command("ip", "netns", "exec", e.net.BridgeNS, "ip", "link", "set", e.net.Taps[0],
		"txqueuelen", fmt.Sprint(guestQueueLen)).CombinedOutput()
	require.NoError(e.t, err, "txqueuelen: %s", out)
}

// TestInteropPerfR runs softnic perf write_bw, read_bw and send_bw with
// -R and -a, -s with -q 4, and -b through the daemon against perftest -R
// on rdma_rxe, softnic either side as server.
func TestInteropPerfR(t *testing.T) {
	runPerfR(t, "snpr", perfRRuns(), perfRRuns())
}

// runPerfR runs softnic's side of toServer as server and of toClient as
// client through the daemon, against the guest's perftest. The daemon's
// counters must show the payload: the side that sends it (the requester
// of writes and sends, the responder of reads; both with -b) sent at least
// the packets it takes, the other received them. Both sides must report
// the same figures where both measure the same thing.
func runPerfR(t *testing.T, name string, toServer, toClient []interopRun) {
	requireInteropHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	e := startInterop(t, ctx, name, interopPlan{toServer: toServer, toClient: toClient, scriptTimeout: 15 * time.Minute, queues: 1})
	e.deepenGuestQueue()
	e.startDaemon()
	e.ipcLock = true // -a registers 16 MiB, past RLIMIT_MEMLOCK's 8
	guestOut, _ := e.runChecked(toServer, toClient, 3*time.Minute, func(s runStep, res interopResult, d map[string]uint64) {
		t.Logf("%s: the daemon's device: sent_pkts %d rcvd_pkts %d duplicate_request %d out_of_seq_request %d "+
			"completer_retry_err %d local_ack_timeout_err %d", res.name, d["sent_pkts"], d["rcvd_pkts"],
			d["duplicate_request"], d["out_of_seq_request"], d["completer_retry_err"], d["local_ack_timeout_err"])
		min := uint64(perfRBytes(s.r.name) / 4096)
		read := strings.HasPrefix(s.r.name, "read_bw")
		both := strings.HasSuffix(s.r.name, "-b")
		softnicSends := read != s.client // a READ's responder sends the data
		if both || softnicSends {
			assert.GreaterOrEqualf(t, d["sent_pkts"], min, "%s: packets the daemon's device sent", res.name)
		}
		if both || !softnicSends {
			assert.GreaterOrEqualf(t, d["rcvd_pkts"], min, "%s: packets the daemon's device received", res.name)
		}
	})
	checkSections(t, guestOut, toServer, toClient)
	for _, r := range e.results {
		assert.Regexpf(t, bwRE, r.out, "softnic %s printed no result line", r.name)
		assert.Containsf(t, r.out, "the device is the daemon's", "softnic %s did not run through the daemon", r.name)
		if strings.HasSuffix(r.run.name, "-a") && strings.HasSuffix(r.name, " client") {
			assert.Lenf(t, bwRE.FindAllString(r.out, -1), 23, "softnic %s: a line per size, 2 B to 8 MiB", r.name)
		}
	}
	for _, r := range e.results {
		// -b: each side measures both ways its own; send_bw's sides each
		// their own end. A write or read server prints the client's
		// figures, with -a those of the last size only.
		if strings.HasSuffix(r.run.name, "-b") || strings.HasPrefix(r.run.name, "send_bw") {
			continue
		}
		role, peer := " server", " client"
		if strings.HasSuffix(r.name, " client") {
			role, peer = " client", " server"
		}
		mine, theirs := bwRE.FindAllString(r.out, -1), bwRE.FindAllString(guestOut[r.run.name+peer], -1)
		if len(mine) > 0 && len(theirs) > 0 {
			assert.Equalf(t, theirs[len(theirs)-1], mine[len(mine)-1], "softnic %s%s, the real tool as%s: the last figures",
				r.run.name, role, peer)
		}
	}
}

// counterDelta is what each counter counted from before to after.
func counterDelta(before, after map[string]uint64) map[string]uint64 {
	d := map[string]uint64{}
	for k, v := range after {
		d[k] = v - before[k]
	}
	return d
}

// daemonCounters are the daemon's device counters (`softnic stat -j`).
func (e *interopEnv) daemonCounters() map[string]uint64 {
	t := e.t
	out, err := exec.Command(e.bin, "stat", "-j", "--run-dir", e.runDir, "-d", e.net.PeerLink).Output()
	require.NoError(t, err, "softnic stat: %s", out)
	var devs []map[string]any
	require.NoError(t, json.Unmarshal(out, &devs), "softnic stat -j: %s", out)
	require.Len(t, devs, 1)
	c := map[string]uint64{}
	for k, v := range devs[0] {
		if f, ok := v.(float64); ok {
			c[k] = uint64(f)
		}
	}
	return c
}
