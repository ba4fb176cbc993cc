package main

import (
	"context"
	"strings"
	"testing"
	"time"
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
	e := startInteropQueues(t, ctx, "sneng", interopScript(runs, runs, ""), "", 6*time.Minute, 2)
	for _, client := range []bool{false, true} {
		for _, r := range runs {
			e.step(r, client, 2*time.Minute, "--softnic-engines", "2")
		}
	}
	guestOut, _ := e.wait()
	forwarded := 0
	for _, r := range e.results {
		if !strings.Contains(r.out, "\nengines 2\n") {
			t.Errorf("softnic %s did not run two engines:\n%s", r.name, r.out)
		}
		ctr := softnicCounters(r.out)
		if ctr["Rx.BadICRC"] != 0 || ctr["RxBadPacket"] != 0 || ctr["RxNoQP"] != 0 {
			t.Errorf("softnic %s: %d bad ICRCs, %d bad packets, %d for no QP", r.name, ctr["Rx.BadICRC"], ctr["RxBadPacket"], ctr["RxNoQP"])
		}
		forwarded += ctr["Forwarded"]
		t.Logf("softnic %s: %d packets received, %d forwarded to the other engine, %d dropped there; %d retransmissions",
			r.name, ctr["RxPackets"], ctr["Forwarded"], ctr["ForwardDrops"], ctr["Retransmits"])
	}
	t.Logf("forwarded between engines over all runs: %d packets", forwarded)
	for _, r := range runs {
		for _, pair := range [][2]string{{r.name + " server", r.name + " client"}, {r.name + " client", r.name + " server"}} {
			mine, theirs := bwRE.FindString(resultOf(e.results, pair[0])), bwRE.FindString(guestOut[pair[1]])
			if mine == "" || mine != theirs {
				t.Errorf("softnic %s printed %q, the real tool as %s %q", pair[0], mine, pair[1], theirs)
			}
		}
	}
}
