package interop

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestInteropTwoEngines runs ib_write_bw and ib_read_bw over 8 QPs against
// softnic perf with two engines, on a veth of two queues, either side as
// server. The frames rdma_rxe sends reach softnic's queues by the
// bridge's flow hash, not by softnic's choice of engine, so some arrive
// at the other engine than their QP's and are forwarded to it: every run
// must still complete with both tools' checks passing and the same
// figures on both sides.
func TestInteropTwoEngines(t *testing.T) {
	requireInteropHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	runs := []interopRun{
		perfRun("write_bw-q8", "write_bw", "-q", "8", "-n", interopIters),
		perfRun("read_bw-q8", "read_bw", "-q", "8", "-n", interopIters),
	}
	e := startInterop(t, ctx, "sneng", interopPlan{toServer: runs, toClient: runs, scriptTimeout: 6 * time.Minute, queues: 2})
	guestOut, _ := e.runAll(runs, runs, 2*time.Minute, "--softnic-engines", "2")
	forwarded := 0
	for _, r := range e.results {
		assert.Containsf(t, r.out, "\nengines 2\n", "softnic %s did not run two engines", r.name)
		ctr := softnicCounters(r.out)
		for _, bad := range []string{"Rx.BadICRC", "RxBadPacket", "RxNoQP"} {
			assert.Zerof(t, ctr[bad], "softnic %s: %s", r.name, bad)
		}
		forwarded += ctr["Forwarded"]
		t.Logf("softnic %s: %d packets received, %d forwarded to the other engine, %d dropped there; %d retransmissions",
			r.name, ctr["RxPackets"], ctr["Forwarded"], ctr["ForwardDrops"], ctr["Retransmits"])
	}
	t.Logf("forwarded between engines over all runs: %d packets", forwarded)
	for _, r := range runs {
		checkSameReport(t, e.results, guestOut, r.name)
	}
}
