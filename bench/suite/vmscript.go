package main

import (
	"fmt"
	"strings"
)

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// The guest side of bench-vm: each guest runs one shell script that walks
// the same list of steps, the server guest serving and the client guest
// connecting. Each step has its own TCP port, so a client can never reach
// the server of another step, and a failed step costs only itself: both
// scripts go on with the next one.

// vmTest is one of the compared tests.
type vmTest struct {
	key, name  string
	unit       string
	lower      bool   // lower is better (latency)
	tool       string // perftest's test: write_bw, write_lat
	size       int
	itersFlag  func(o vmOptions) int
	resultFrom func(out string) (float64, error)
}

// vmImpl is one of the compared implementations: rdma_rxe, or softnic
// with its AF_XDP sockets bound in one mode.
type vmImpl struct {
	key, label string
	bind       string // softnic's --softnic-xdp-bind; "" for rxe
}

var (
	vmRxe      = &vmImpl{key: "rxe", label: "rdma_rxe"}
	vmCopy     = &vmImpl{key: "copy", label: "softnic copy", bind: "copy"}
	vmZeroCopy = &vmImpl{key: "zerocopy", label: "softnic zero-copy", bind: "zerocopy"}
	// vmSoftnics are softnic's modes, in the report's order.
	vmSoftnics = []*vmImpl{vmCopy, vmZeroCopy}
)

func (im *vmImpl) softnic() bool { return im.bind != "" }

// vmImpls are the compared implementations, in their first round's
// order. Every guest shape runs all three: with all of eth0's queue pairs
// in use (bench/vmqueues) virtio-net runs XDP natively, XDP_TX in its
// locked mode, and binds zero-copy with one queue pair as with several.
var vmImpls = []*vmImpl{vmRxe, vmCopy, vmZeroCopy}

// vmStep is one run: an implementation, a test, a round, and the
// exchange port both sides use.
type vmStep struct {
	index int
	impl  *vmImpl
	test  *vmTest
	round int
}

func (st vmStep) port() int { return vmBasePort + st.index }

// vmBasePort is the first step's port (perftest's default is 18515).
const vmBasePort = 18600

// stepMarker starts a step's section of a guest's output.
func (st vmStep) marker() string {
	return fmt.Sprintf("@@ step %d %s %s %d", st.index, st.impl.key, st.test.key, st.round)
}

// vmSteps orders the runs: a block of tests per implementation, the
// blocks' order rotating by one each round (round 1 rxe, copy, zero-copy;
// round 2 copy, zero-copy, rxe; ...), so that over as many rounds as
// implementations each block takes each place once and drift over the
// run falls on all alike.
func vmSteps(tests []*vmTest, impls []*vmImpl, rounds int) []vmStep {
	var steps []vmStep
	for r := 1; r <= rounds; r++ {
		for i := range impls {
			impl := impls[(i+r-1)%len(impls)]
			for _, t := range tests {
				steps = append(steps, vmStep{index: len(steps), impl: impl, test: t, round: r})
			}
		}
	}
	return steps
}

// vmPrelude defines the scripts' helpers. rxe_on and rxe_off give the
// port to rdma_rxe or take it away (softnic's runs must not share UDP
// 4791 with it); xdp_watch reports which XDP mode eth0 got while softnic
// runs; cpu prints the guest's aggregate CPU counters (jiffies) so the
// host can tell where a run's time went.
const vmPrelude = `
rxe_on() {
	[ -e /sys/class/infiniband/rxe0 ] && return 0
	rdma link add rxe0 type rxe netdev eth0 || return 1
	i=0
	until grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; do
		i=$((i + 1)); [ $i -gt 100 ] && return 1; sleep 0.1
	done
}
rxe_off() {
	[ -e /sys/class/infiniband/rxe0 ] || return 0
	rdma link delete rxe0
}
xdp_watch() {
	while :; do
		m=$(ip -d link show eth0 | grep -o -E ' xdp[a-z]*' | head -n 1)
		if [ -n "$m" ]; then echo "XDP-MODE:$m"; return; fi
		sleep 0.2
	done
}
cpu() { echo "CPU-$1: $(head -n 1 /proc/stat)"; }
# run_softnic runs softnic with a time limit, watching the XDP mode; the
# mode is printed after the run, where it cannot split softnic's report.
run_softnic() {
	xdp_watch >/tmp/xdp-mode & w=$!
	timeout -s TERM $RUN_TIMEOUT env $SOFTNIC_ENV softnic "$@" 2>&1; rc=$?
	kill $w 2>/dev/null; wait $w 2>/dev/null
	cat /tmp/xdp-mode; rm -f /tmp/xdp-mode
	return $rc
}
# retry_tool runs a perftest client until the server listens.
retry_tool() {
	n=0
	while :; do
		out=$(timeout -s TERM $RUN_TIMEOUT "$@" 2>&1) && { echo "$out"; return 0; }
		case "$out" in
		*"Couldn't connect to"*) ;;
		*) echo "$out"; return 1 ;;
		esac
		n=$((n + 1)); [ $n -ge 240 ] && { echo "$out"; return 1; }
		sleep 0.5
	done
}
`

// vmScript is the server's (server true) or the client's script.
func vmScript(steps []vmStep, o vmOptions, server bool, serverIP string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "RUN_TIMEOUT=%d\nSOFTNIC_ENV=%s\n%s", int(o.runTimeout.Seconds()), shellQuote(o.softnicEnv), vmPrelude)
	// Every queue pair in use from the start (bench/vmqueues says why:
	// otherwise a zero-copy run left a queue that crashed the next run).
	b.WriteString("vmqueues eth0 || echo '!! vmqueues failed'\n")
	for _, st := range steps {
		b.WriteString("echo '" + st.marker() + "'\n")
		if st.impl == vmRxe {
			b.WriteString("rxe_on || echo '!! FAILED: rxe0 not up'\n")
		} else {
			b.WriteString("rxe_off || echo '!! FAILED: rxe0 not removed'\n")
		}
		b.WriteString("cpu BEFORE\n")
		args := fmt.Sprintf("-x 1 -m 1024 -F -s %d -n %d -p %d", st.test.size, st.test.itersFlag(o), st.port())
		sn := fmt.Sprintf("run_softnic perf %s -d eth0 %s --softnic-xdp-bind %s%s", st.test.tool, args, st.impl.bind, o.softnicFlags)
		switch {
		case !st.impl.softnic() && server:
			fmt.Fprintf(&b, "timeout -s TERM $RUN_TIMEOUT ib_%s -d rxe0 %s 2>&1", st.test.tool, args)
		case !st.impl.softnic():
			fmt.Fprintf(&b, "retry_tool ib_%s -d rxe0 %s %s", st.test.tool, args, serverIP)
		case server:
			b.WriteString(sn)
		default:
			fmt.Fprintf(&b, "%s --connect-wait=%ds %s", sn, int(o.runTimeout.Seconds()), serverIP)
		}
		b.WriteString(" || echo '!! FAILED'\ncpu AFTER\n")
	}
	// virtio_net says why native XDP was refused or degraded, if it was;
	// the clocksource is what a clock read costs (the HPET: a system call
	// and an emulated device read, against a few instructions for the TSC).
	b.WriteString("echo '@@ end'\ndmesg | grep -i -E 'xdp|virtio_net|tsc unstable' | tail -n 20\n" +
		"echo \"clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)\"\n")
	return b.String()
}
