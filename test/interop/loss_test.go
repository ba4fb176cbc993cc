package interop

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// rxeCounters prints rdma_rxe's counters (cumulative since boot) as
// "name:value" lines after each run of the loss test.
const rxeCounters = "echo '-- rxe0 counters'; (cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep . *)\n"

// TestInteropUnderLoss runs ib_write_bw and ib_read_bw against softnic
// perf, either side as server, while netem drops 2% of the frames the
// rdma_rxe guest sends. Every run must complete with both tools' checks
// passing. Where softnic lost data frames, its counters must show the
// recovery: as WRITE responder it saw PSN gaps and sent sequence NAKs; as
// READ requester it restarted after gaps in the responses. One small lossy
// WRITE run is captured (roce/testdata/softnic-rxe-write-loss.pcap).
// rping, 100 pings either side as server, must complete over the lossy
// data path; the CM's MADs are spared (rxeguest.Config.Netem), since a
// DREQ Linux's CM stopped resending would leave softnic's server waiting.
func TestInteropUnderLoss(t *testing.T) {
	requireInteropHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	runs := []interopRun{perfRun("write_bw", "write_bw", "-n", interopIters), perfRun("read_bw", "read_bw", "-n", interopIters)}
	capture := perfRun("write-loss", "write_bw", "-s", "4000", "-n", "20")
	capture.capture = "softnic-rxe-write-loss.pcap"
	toServer := append(append([]interopRun(nil), runs...), capture, rpingRun("64"))
	toClient := append(runs, rpingRun("64"))

	e := startInterop(t, ctx, "snloss", interopPlan{toServer: toServer, toClient: toClient, after: rxeCounters,
		netem: "loss 2%", scriptTimeout: 6 * time.Minute, queues: 1})
	guestOut, _ := e.runAll(toServer, toClient, 2*time.Minute)

	prevRxe := map[string]int{}
	checkRpings(t, e.results, guestOut, []string{"64"})
	for _, r := range e.results {
		if r.run.rping {
			continue // checkRpings
		}
		ctr := softnicCounters(r.out)
		if !assert.NotEmptyf(t, ctr, "softnic %s printed no counters", r.name) {
			continue
		}
		guestRole := map[bool]string{true: " client", false: " server"}[strings.HasSuffix(r.name, " server")]
		name := strings.TrimSuffix(strings.TrimSuffix(r.name, " server"), " client")
		rxe := rxeCounterValues(guestOut[name+guestRole])
		delta := map[string]int{}
		for k, v := range rxe {
			delta[k] = v - prevRxe[k]
		}
		prevRxe = rxe
		t.Logf("%s under 2%% loss of rxe's frames: softnic Retransmits %d Timeouts %d RxOutOfSeq %d RxDuplicate %d TxNAKSeq %d RxBadResponse %d Rx.BadICRC %d; "+
			"rxe (this run) sent_pkts %d rcvd_pkts %d out_of_seq_request %d duplicate_request %d rcvd_seq_err %d completer_retry_err %d",
			r.name, ctr["Retransmits"], ctr["Timeouts"], ctr["RxOutOfSeq"], ctr["RxDuplicate"], ctr["TxNAKSeq"], ctr["RxBadResponse"], ctr["Rx.BadICRC"],
			delta["sent_pkts"], delta["rcvd_pkts"], delta["out_of_seq_request"], delta["duplicate_request"], delta["rcvd_seq_err"], delta["completer_retry_err"])
		assert.Zerof(t, ctr["Rx.BadICRC"], "softnic %s: bad ICRCs", r.name)
		assert.Zerof(t, ctr["RxBadPacket"], "softnic %s: bad packets", r.name)
		assert.Regexpf(t, r.run.resultRE(), r.out, "softnic %s printed no result line", r.name)
		switch r.name {
		case "write_bw server":
			// rxe's WRITEs were lost on the way (3200 packets: some are
			// lost but in one run of 10^28): softnic's responder saw the
			// gaps and asked for the missing PSNs.
			assert.NotZerof(t, ctr["RxOutOfSeq"], "softnic %s: RxOutOfSeq after lost WRITE packets", r.name)
			assert.NotZerof(t, ctr["TxNAKSeq"], "softnic %s: TxNAKSeq after lost WRITE packets", r.name)
		case "read_bw client":
			// rxe's READ responses were lost (3200 packets): softnic's
			// requester re-read from the gap.
			assert.NotZerof(t, ctr["Retransmits"], "softnic %s: no retransmissions after lost READ responses", r.name)
		}
	}
	// The write and read servers print the client's figures, from the
	// report exchange: the runs completed on both sides.
	for _, tt := range []string{"write_bw", "read_bw", "write-loss"} {
		checkSameReport(t, e.results, guestOut, tt)
	}
	checkCaptures(t, e.capDir, toServer)
	writeInteropTableTo(t, "SOFTNIC_INTEROP_LOSS_TABLE", toServer, toClient, e.results, guestOut)
}
