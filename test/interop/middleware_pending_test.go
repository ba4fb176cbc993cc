//go:build middleware_pending

package interop

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// middlewareRuns are the stock middleware programs, the same command on
// both sides: ucx_perftest tag_bw over UCX's rc transport (wired up over
// ud_verbs), and fi_pingpong over libfabric's verbs msg endpoint (rdma_cm
// connections), with its data checks.
var middlewareRuns = []interopRun{
	bareRun("ucx-tag_bw-rc", "env", "UCX_TLS=rc", "ucx_perftest", "-t", "tag_bw", "-s", "65536", "-n", "200"),
	bareRun("fi_pingpong-msg", "fi_pingpong", "-p", "verbs", "-e", "msg", "-I", "100", "-S", "65536", "-c"),
}

// bareRun is a stock program run as it is on both sides (interopRun.bare).
func bareRun(name string, argv ...string) interopRun {
	return interopRun{name: name, bare: true, guest: strings.Join(argv, " "), softnic: append([]string{"exec"}, argv...)}
}

// ucxFinal is ucx_perftest's last line; fabricResult fi_pingpong's.
var (
	ucxFinal     = regexp.MustCompile(`(?m)^Final:\s+200\s+.*$`)
	fabricResult = regexp.MustCompile(`(?m)^64k\s+100\s+=100\s+.*$`)
)

// TestInteropMiddleware runs ucx_perftest tag_bw over rc and fi_pingpong
// -e msg through the daemon, as nobody with CAP_IPC_LOCK, against the
// same programs on rdma_rxe, softnic either side as server. Each
// program's bytes must show in the daemon's counters.
func TestInteropMiddleware(t *testing.T) {
	requireInteropHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	runs := middlewareRuns
	e := startInterop(t, ctx, "snmw", interopPlan{toServer: runs, toClient: runs, scriptTimeout: 15 * time.Minute, queues: 1})
	e.startDaemon()
	e.ipcLock = true
	for _, client := range []bool{false, true} {
		for _, r := range runs {
			before := e.daemonCounters()
			e.step(r, client, 3*time.Minute)
			d := counterDelta(before, e.daemonCounters())
			res := e.results[len(e.results)-1]
			// 64 KiB × 200 (tag_bw, one way) or × 100 each way, at most
			// 4096 bytes a packet
			min := uint64(65536 * 100 / 4096)
			if r.name == "fi_pingpong-msg" || !client {
				assert.GreaterOrEqualf(t, d["rcvd_pkts"], min, "%s: packets the daemon's device received: "+
					"the bytes did not go through softnic", res.name)
			}
			if r.name == "fi_pingpong-msg" || client {
				assert.GreaterOrEqualf(t, d["sent_pkts"], min, "%s: packets the daemon's device sent: "+
					"the bytes did not go through softnic", res.name)
			}
		}
	}
	guestOut, _ := e.wait()
	checkSections(t, guestOut, runs, runs)
	for _, r := range e.results {
		switch {
		case r.run.name == "ucx-tag_bw-rc" && strings.HasSuffix(r.name, " client"):
			assert.Regexpf(t, ucxFinal, r.out, "softnic's ucx_perftest client printed no Final line")
		case r.run.name == "fi_pingpong-msg":
			assert.Regexpf(t, fabricResult, r.out, "softnic's fi_pingpong %s printed no result", r.name)
		}
	}
	assert.Regexp(t, ucxFinal, guestOut["ucx-tag_bw-rc client"], "the guest's ucx_perftest client printed no Final line")
	for _, k := range []string{"fi_pingpong-msg client", "fi_pingpong-msg server"} {
		assert.Regexpf(t, fabricResult, guestOut[k], "the guest's fi_pingpong (%s) printed no result", k)
	}
}

// TestInteropReadResponder runs softnic perf read_bw -R -a and -s 1 MiB
// -q 4 as the server, the READ responder, of ib_read_bw -R on rdma_rxe:
// today 1 MiB READs fall to 1-2 MB/s and -a's 8 MiB ones time out.
func TestInteropReadResponder(t *testing.T) {
	var runs []interopRun
	for _, r := range perfRRuns() {
		if slices.Contains(readResponderSlow, r.name) {
			runs = append(runs, r)
		}
	}
	runPerfR(t, "snrr", runs, nil)
}
