package interop

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The runs connected with RDMA CM: rping and perftest -R, against
// rdmacm-utils' rping and perftest over rdma_rxe.

// interopRpingSizes are the rping runs' buffer sizes (-S), 100 pings each.
var interopRpingSizes = []string{"64", "1024", "8192"}

const rpingCount = 100

// rpingRun is an rping run: rping -v -V in the guest, softnic rping here,
// either side the server.
func rpingRun(size string) interopRun {
	opts := []string{"-v", "-V", "-C", fmt.Sprint(rpingCount), "-S", size}
	return interopRun{name: "rping-S" + size, rping: true, guest: "rping " + strings.Join(opts, " "),
		softnic: append([]string{"rping"}, opts...)}
}

// refusedPort is a port nobody listens on.
const refusedPort = "7199"

// refusedProbe is guest shell that connects the real rping to a port
// nobody listens on at softnic's, once softnic's device is up (until then
// a REQ finds no QP1 and gets no answer: those attempts are cut short),
// and prints how long the REJECTED took.
// The guest's date has no %N: /proc/uptime counts in centiseconds.
const refusedProbe = `cs() { read up _ < /proc/uptime; echo "${up%.*}${up#*.}"; }
for i in $(seq 60); do
	s=$(cs); out=$(timeout 3 rping -c -a 10.77.0.1 -p ` + refusedPort + ` -C 1 2>&1); e=$(cs)
	case "$out" in *REJECTED*) echo "refused-probe: $(( (e-s)*10 )) ms: $out"; break ;; esac
	sleep 0.2
done
`

// TestInteropRDMACM runs softnic rping against rping -v -V (sizes 64 to
// 8192 bytes, 100 pings each) and softnic perf write_bw -R and send_bw -R
// against ib_write_bw -R and ib_send_bw -R, either side as server, all
// connected with RDMA CM over rdma_rxe in one guest. A connect to a port
// nobody listens on must fail in under a second, both ways: softnic rping
// against rxe's CM, and the real rping against softnic's.
func TestInteropRDMACM(t *testing.T) {
	requireInteropHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var toServer, toClient []interopRun
	for _, s := range interopRpingSizes {
		toServer = append(toServer, rpingRun(s))
		toClient = append(toClient, rpingRun(s))
	}
	toServer[len(toServer)-1].guestBefore = refusedProbe
	for _, tt := range []string{"write_bw", "send_bw"} {
		toServer = append(toServer, perfRun(tt+"-R", tt, "-R", "-n", interopIters))
		toClient = append(toClient, perfRun(tt+"-R", tt, "-R", "-n", interopIters))
	}
	e := startInterop(t, ctx, "sncm", interopPlan{toServer: toServer, toClient: toClient, scriptTimeout: 10 * time.Minute, queues: 1})
	for _, r := range toServer {
		e.step(r, false, 3*time.Minute)
	}
	checkRefused(t, e)
	for _, r := range toClient {
		e.step(r, true, 3*time.Minute)
	}
	guestOut, _ := e.wait()
	checkSections(t, guestOut, toServer, toClient)
	checkRpings(t, e.results, guestOut, interopRpingSizes)
	checkRefusedProbe(t, guestOut["rping-S"+interopRpingSizes[len(interopRpingSizes)-1]+" client"])
	for _, r := range e.results {
		if !r.run.rping {
			assert.Regexpf(t, r.run.resultRE(), r.out, "softnic %s printed no result line", r.name)
		}
	}
	checkSameReport(t, e.results, guestOut, "write_bw-R")
	writeInteropTableTo(t, "SOFTNIC_INTEROP_CM_TABLE", toServer, toClient, e.results, guestOut)
}

// checkRefused connects softnic rping to a port of the guest nobody listens
// on: rxe's CM rejects the REQ, and softnic must say so within a second.
func checkRefused(t *testing.T, e *interopEnv) {
	start := time.Now()
	out, err := e.softnic(30*time.Second, "rping", "-c", "-a", "10.77.0.11", "-p", refusedPort, "-C", "1")
	took := time.Since(start)
	t.Logf("softnic rping to a port nobody listens on (%v): %s", took.Round(time.Millisecond), out)
	assert.Error(t, err, "softnic rping to a port nobody listens on")
	assert.Less(t, took, time.Second, "softnic rping to a port nobody listens on: time to fail")
	assert.Contains(t, out, "RDMA_CM_EVENT_REJECTED", "softnic rping to a port nobody listens on")
}

var refusedProbeRE = regexp.MustCompile(`refused-probe: (\d+) ms: .*RDMA_CM_EVENT_REJECTED`)

// checkRefusedProbe checks the guest's refusedProbe: the real rping heard
// softnic's REJ in under a second.
func checkRefusedProbe(t *testing.T, out string) {
	m := refusedProbeRE.FindStringSubmatch(out)
	if assert.NotNilf(t, m, "the real rping to a port nobody listens on at softnic's got no REJECTED:\n%s", out) {
		ms, _ := strconv.Atoi(m[1])
		t.Logf("the real rping to a port nobody listens on at softnic's: REJECTED after %d ms", ms)
		assert.Less(t, ms, 1000, "the real rping to a port nobody listens on at softnic's: time to fail")
	}
}

// checkRpings checks the rping runs: each client printed every ping's
// data ("ping data: rdma-ping-N: ..."), N from 0 to count-1, and no side
// reported an error or a data mismatch.
func checkRpings(t *testing.T, results []interopResult, guestOut map[string]string, sizes []string) {
	t.Helper()
	for _, s := range sizes {
		run := "rping-S" + s
		for name, out := range map[string]string{
			"softnic " + run + " server": resultOf(results, run+" server"),
			"softnic " + run + " client": resultOf(results, run+" client"),
			"guest " + run + " client":   guestOut[run+" client"],
			"guest " + run + " server":   guestOut[run+" server"]} {
			assert.NotContainsf(t, out, "mismatch", "%s: the -V data check failed", name)
			if strings.HasSuffix(name, " client") {
				checkPingData(t, name, out, rpingCount)
			}
		}
	}
}

// checkStockRpings checks the stock rping run both ways: the client's
// side (softnic's or the guest's) printed count pings, in order.
func checkStockRpings(t *testing.T, results []interopResult, guestOut map[string]string, count int) {
	t.Helper()
	checkPingData(t, "stock-rping softnic client", resultOf(results, "stock-rping client"), count)
	checkPingData(t, "stock-rping guest client", guestOut["stock-rping client"], count)
}

// checkStockUdaddy checks the stock udaddy run both ways: each side of
// each direction finished its transfers.
func checkStockUdaddy(t *testing.T, results []interopResult, guestOut map[string]string) {
	t.Helper()
	for name, out := range map[string]string{
		"softnic server": resultOf(results, "stock-udaddy server"), "softnic client": resultOf(results, "stock-udaddy client"),
		"guest server": guestOut["stock-udaddy server"], "guest client": guestOut["stock-udaddy client"]} {
		assert.Containsf(t, out, "data transfers complete", "udaddy, %s", name)
	}
}

var pingDataRE = regexp.MustCompile(`(?m)^ping data: rdma-ping-(\d+): `)

// checkPingData checks that out has the lines of count pings, in order.
func checkPingData(t *testing.T, name, out string, count int) {
	t.Helper()
	m := pingDataRE.FindAllStringSubmatch(out, -1)
	if !assert.Lenf(t, m, count, "%s: ping data lines", name) {
		return
	}
	for i, l := range m {
		if l[1] != strconv.Itoa(i) {
			assert.Failf(t, "ping data out of order", "%s: line %d is rdma-ping-%s", name, i, l[1])
			return
		}
	}
}
