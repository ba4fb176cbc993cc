package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
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
func TestInteropUnderLoss(t *testing.T) {
	requireInteropHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	runs := []interopRun{perfRun("write_bw", "write_bw", "-n", interopIters), perfRun("read_bw", "read_bw", "-n", interopIters)}
	capture := perfRun("write-loss", "write_bw", "-s", "4000", "-n", "20")
	capture.capture = "softnic-rxe-write-loss.pcap"
	toServer := append(append([]interopRun(nil), runs...), capture)
	toClient := runs

	e := startInterop(t, ctx, "snloss", interopScript(toServer, toClient, rxeCounters), "loss 2%", 6*time.Minute)
	for _, r := range toServer {
		e.step(r, false, 2*time.Minute)
	}
	for _, r := range toClient {
		e.step(r, true, 2*time.Minute)
	}
	guestOut, _ := e.wait()

	prevRxe := map[string]int{}
	for _, r := range e.results {
		ctr := softnicCounters(r.out)
		if len(ctr) == 0 {
			t.Errorf("softnic %s printed no counters", r.name)
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
		if ctr["Rx.BadICRC"] != 0 || ctr["RxBadPacket"] != 0 {
			t.Errorf("softnic %s: %d bad ICRCs, %d bad packets", r.name, ctr["Rx.BadICRC"], ctr["RxBadPacket"])
		}
		if !r.run.resultRE().MatchString(r.out) {
			t.Errorf("softnic %s printed no result line", r.name)
		}
		switch r.name {
		case "write_bw server":
			// rxe's WRITEs were lost on the way (3200 packets: some are
			// lost but in one run of 10^28): softnic's responder saw the
			// gaps and asked for the missing PSNs.
			if ctr["RxOutOfSeq"] == 0 || ctr["TxNAKSeq"] == 0 {
				t.Errorf("softnic %s: RxOutOfSeq %d, TxNAKSeq %d; want both non-zero after lost WRITE packets",
					r.name, ctr["RxOutOfSeq"], ctr["TxNAKSeq"])
			}
		case "read_bw client":
			// rxe's READ responses were lost (3200 packets): softnic's
			// requester re-read from the gap.
			if ctr["Retransmits"] == 0 {
				t.Errorf("softnic %s: no retransmissions after lost READ responses", r.name)
			}
		}
	}
	// The write and read servers print the client's figures, from the
	// report exchange: the runs completed on both sides.
	for _, tt := range []string{"write_bw", "read_bw", "write-loss"} {
		for _, pair := range [][2]string{{tt + " server", tt + " client"}, {tt + " client", tt + " server"}} {
			if resultOf(e.results, pair[0]) == "" {
				continue
			}
			mine, theirs := bwRE.FindString(resultOf(e.results, pair[0])), bwRE.FindString(guestOut[pair[1]])
			if mine == "" || mine != theirs {
				t.Errorf("softnic %s printed %q, the real tool as %s %q", pair[0], mine, pair[1], theirs)
			}
		}
	}
	checkCaptures(t, e.capDir, toServer)
	writeInteropTableTo(t, "SOFTNIC_INTEROP_LOSS_TABLE", toServer, toClient, e.results, guestOut)
}

var counterLine = regexp.MustCompile(`(?m)^  (\S+) +(\d+)$`)

// softnicCounters parses softnic perf --softnic-stats output.
func softnicCounters(out string) map[string]int {
	i := strings.Index(out, " softnic engine counters:")
	if i < 0 {
		return nil
	}
	m := map[string]int{}
	for _, l := range counterLine.FindAllStringSubmatch(out[i:], -1) {
		m[l[1]], _ = strconv.Atoi(l[2])
	}
	return m
}

var rxeCounterLine = regexp.MustCompile(`(?m)^([a-z_]+):(\d+)$`)

// rxeCounterValues parses the rxeCounters lines of a guest section.
func rxeCounterValues(out string) map[string]int {
	m := map[string]int{}
	for _, l := range rxeCounterLine.FindAllStringSubmatch(out, -1) {
		m[l[1]], _ = strconv.Atoi(l[2])
	}
	return m
}
