package interop

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// interopPingpongSizes are the message sizes of the ibv_rc_pingpong runs
// (its default path MTU, 1024, makes 65536 a 64-packet message).
var interopPingpongSizes = []string{"1", "1024", "4096", "65536"}

// interopUDPingpongSizes are those of the ibv_ud_pingpong runs: a UD
// message fits the path MTU (1024 in the guest).
var interopUDPingpongSizes = []string{"1", "512", "1024"}

// interopUCPingpongSizes are those of the ibv_uc_pingpong runs, up to four
// packets a message.
var interopUCPingpongSizes = []string{"1", "1024", "4096"}

// TestInteropWithRealTools runs softnic perf and softnic pingpong on a
// veth (AF_XDP) against perftest 4.5 and ibv_rc_pingpong over rdma_rxe in
// a Debian guest, with either side as server: pingpong at 1 to 65536
// bytes, every perftest test at its default size, and a few more options
// (-a is TestInteropAllSizes). A few small runs are captured on the bridge; every frame
// of them, softnic's included, must be RoCEv2 with a correct ICRC
// (SOFTNIC_INTEROP_PCAP_DIR keeps them: roce/testdata/softnic-rxe-*.pcap).
// SOFTNIC_INTEROP_TABLE names a file for a markdown table of the results.
func TestInteropWithRealTools(t *testing.T) {
	requireInteropHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	toServer, toClient := realToolRuns()
	e := startInterop(t, ctx, "snperf", interopPlan{toServer: toServer, toClient: toClient, scriptTimeout: 12 * time.Minute, queues: 1})
	guestOut, _ := e.runAll(toServer, toClient, 3*time.Minute)
	results := e.results
	checkSections(t, guestOut, toServer, toClient)
	for _, r := range results {
		if r.name == "read_lat server" || r.name == "read_lat-a server" {
			continue // perftest's read_lat server prints no figures
		}
		assert.Regexpf(t, r.run.resultRE(), r.out, "softnic %s printed no result line", r.name)
	}
	checkPingpongs(t, results, guestOut, "pingpong-s", interopPingpongSizes)
	checkPingpongs(t, results, guestOut, "ud-pingpong-s", interopUDPingpongSizes)
	checkPingpongs(t, results, guestOut, "uc-pingpong-s", interopUCPingpongSizes)
	// The server of write/read/atomic bw prints the client's figures, which
	// travel in the report exchange: each side must print the other's.
	for _, tt := range []string{"write_bw", "read_bw", "atomic_bw", "write_bw-q2", "atomic_bw-cas", "write_bw-D", "read", "write", "atomic-fadd"} {
		checkSameReport(t, results, guestOut, tt)
	}
	// Bidirectional: both sides print the sum of both reports, so the
	// same line.
	for _, pair := range [][2]string{{"write_bw-b server", "write_bw-b client"}, {"read_bw-b client", "read_bw-b server"},
		{"send_bw-b server", "send_bw-b client"}} {
		mine, theirs := bwRE.FindAllString(resultOf(results, pair[0]), -1), bwRE.FindAllString(guestOut[pair[1]], -1)
		if assert.Lenf(t, mine, 1, "bidirectional: softnic %s", pair[0]) && assert.Lenf(t, theirs, 1, "bidirectional: the real tool as %s", pair[1]) {
			assert.Equalf(t, theirs[0], mine[0], "bidirectional: softnic %s, the real tool", pair[0])
		}
	}
	m := bwRE.FindString(guestOut["write_bw-q2 client"])
	assert.Contains(t, m, " 100 ", "two-QP run: guest line, want 100 iterations (50 per QP)")
	checkCaptures(t, e.capDir, append(toServer, toClient...))
	writeInteropTableTo(t, "SOFTNIC_INTEROP_TABLE", toServer, toClient, results, guestOut)
}

// realToolRuns are TestInteropWithRealTools' runs with the real tool as
// client (softnic serves), then as server.
func realToolRuns() (toServer, toClient []interopRun) {
	for _, s := range interopPingpongSizes {
		toServer = append(toServer, pingpongRun(s))
		toClient = append(toClient, pingpongRun(s))
	}
	for _, s := range interopUDPingpongSizes {
		toServer = append(toServer, otherPingpongRun("ud", s))
		toClient = append(toClient, otherPingpongRun("ud", s))
	}
	for _, s := range interopUCPingpongSizes {
		toServer = append(toServer, otherPingpongRun("uc", s))
		toClient = append(toClient, otherPingpongRun("uc", s))
	}
	for _, tt := range interopTests {
		toServer = append(toServer, perfRun(tt, tt, "-n", interopIters))
		toClient = append(toClient, perfRun(tt, tt, "-n", interopIters))
	}
	toServer = append(toServer,
		perfRun("write_bw-q2", "write_bw", "-q", "2", "-n", interopIters),
		perfRun("atomic_bw-cas", "atomic_bw", "-A", "CMP_AND_SWAP", "-n", interopIters),
		perfRun("write_bw-b", "write_bw", "-b", "-n", interopIters),
		perfRun("send_bw-b", "send_bw", "-b", "-n", interopIters),
		perfRun("write_bw-D", "write_bw", "-D", "3"),
		perfRun("write_lat-D", "write_lat", "-D", "3"))
	toClient = append(toClient,
		perfRun("write_bw-q2", "write_bw", "-q", "2", "-n", interopIters),
		perfRun("atomic_bw-cas", "atomic_bw", "-A", "CMP_AND_SWAP", "-n", interopIters),
		perfRun("read_bw-b", "read_bw", "-b", "-n", interopIters),
		perfRun("send_bw-D", "send_bw", "-D", "3"),
		perfRun("send_lat-D", "send_lat", "-D", "3"))
	// Small captured runs: 2500-byte messages (FIRST, MIDDLE, LAST at IB
	// MTU 1024) five times; softnic answers READ and atomic requests,
	// and sends WRITEs and SENDs.
	capRun := func(name, test string, opts ...string) interopRun {
		r := perfRun(name, test, opts...)
		r.capture = "softnic-rxe-" + name + ".pcap"
		return r
	}
	toServer = append(toServer,
		capRun("read", "read_bw", "-s", "2500", "-n", "5"),
		capRun("atomic-fadd", "atomic_bw", "-n", "5"))
	toClient = append(toClient,
		capRun("write", "write_bw", "-s", "2500", "-n", "5"),
		capRun("send", "send_bw", "-s", "2500", "-n", "5"))
	return toServer, toClient
}

// checkPingpongs checks the pingpong runs named prefix+size: both sides
// count 2 × iterations × size bytes, and -c found no page with bad data.
func checkPingpongs(t *testing.T, results []interopResult, guestOut map[string]string, prefix string, sizes []string) {
	t.Helper()
	for _, s := range sizes {
		want := fmt.Sprint(2 * 50 * atoi(t, s))
		run := prefix + s
		for name, out := range map[string]string{
			"softnic " + run + " server": resultOf(results, run+" server"),
			"softnic " + run + " client": resultOf(results, run+" client"),
			"guest " + run + " client":   guestOut[run+" client"],
			"guest " + run + " server":   guestOut[run+" server"]} {
			m := ppRE.FindStringSubmatch(out)
			if assert.NotNilf(t, m, "%s: no result line, want %s bytes", name, want) {
				assert.Equalf(t, want, m[1], "%s: bytes in the result", name)
			}
			assert.NotContainsf(t, out, "invalid data in page", "%s: the -c data check failed", name)
		}
	}
}

// TestInteropAllSizes runs every perftest test but atomic_bw (perftest
// refuses -a for it: "Message size cannot be changed for Atomic tests")
// with -a, sizes 2 to 2^23 bytes, five iterations each, both ways between
// softnic and rdma_rxe. The runs with softnic as READ requester come last.
// SOFTNIC_INTEROP_ALL_TABLE names a file for a markdown table.
func TestInteropAllSizes(t *testing.T) {
	requireInteropHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var toServer, toClient, last []interopRun
	for _, tt := range runAllTests() {
		r := perfRun(tt+"-a", tt, "-a", "-n", "5")
		toServer = append(toServer, r)
		if strings.HasPrefix(tt, "read_") {
			last = append(last, r)
		} else {
			toClient = append(toClient, r)
		}
	}
	toClient = append(toClient, last...)
	e := startInterop(t, ctx, "snall", interopPlan{toServer: toServer, toClient: toClient, scriptTimeout: 15 * time.Minute, queues: 1})
	guestOut, _ := e.runAll(toServer, toClient, 3*time.Minute)
	checkSections(t, guestOut, toServer, toClient)
	checkRunAll(t, e.results, guestOut)
	writeInteropTableTo(t, "SOFTNIC_INTEROP_ALL_TABLE", toServer, toClient, e.results, guestOut)
}

// runAllTests are the tests that accept -a: all but atomic_bw.
func runAllTests() []string {
	return slices.DeleteFunc(slices.Clone(interopTests), func(s string) bool { return s == "atomic_bw" })
}

// checkRunAll checks the -a runs: a client (either side) prints one line
// per size, 2 to 2^23 bytes; so do the servers of
// send_bw, write_lat and send_lat, which measure too; the servers of
// write_bw and read_bw print the client's last line.
func checkRunAll(t *testing.T, results []interopResult, guestOut map[string]string) {
	t.Helper()
	for _, tt := range runAllTests() {
		name := tt + "-a"
		re := perfRun(name, tt).resultRE()
		outs := map[string]string{
			"softnic " + name + " server": resultOf(results, name+" server"), "guest " + name + " client": guestOut[name+" client"],
			"softnic " + name + " client": resultOf(results, name+" client"), "guest " + name + " server": guestOut[name+" server"]}
		for who, out := range outs {
			lines := re.FindAllString(out, -1)
			client := strings.HasSuffix(who, " client")
			switch {
			case client || tt == "send_bw" || tt == "write_lat" || tt == "send_lat":
				if assert.Lenf(t, lines, 23, "%s: result lines (2 to 8388608 bytes)", who) {
					assert.Truef(t, strings.HasPrefix(lines[22], " 8388608 "), "%s: last line %q, want 8388608 bytes", who, lines[22])
				}
			case tt == "read_lat":
				assert.Emptyf(t, lines, "%s: result lines, want none (read_lat's server)", who)
			default:
				// The client's last report, from the exchange.
				var peer string
				if strings.HasPrefix(who, "softnic") {
					peer = guestOut[name+" client"]
				} else {
					peer = resultOf(results, name+" client")
				}
				c := re.FindAllString(peer, -1)
				if assert.Lenf(t, lines, 1, "%s: result lines", who) && assert.NotEmptyf(t, c, "%s: the client printed no result line", who) {
					assert.Equalf(t, c[len(c)-1], lines[0], "%s, the client's last line", who)
				}
			}
		}
	}
}
