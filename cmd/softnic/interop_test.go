package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/softnic/softnic/roce/xdplink"
	"github.com/softnic/softnic/test/interop/rxeguest"
)

// interopTests are the perftest programs the interop test runs both ways.
var interopTests = []string{"write_bw", "read_bw", "send_bw", "atomic_bw", "write_lat", "read_lat", "send_lat"}

const interopIters = "50"

// interopPingpongSizes are the message sizes of the ibv_rc_pingpong runs
// (its default path MTU, 1024, makes 65536 a 64-packet message).
var interopPingpongSizes = []string{"1", "1024", "4096", "65536"}

// interopRun is one run of a real tool against softnic: the tool's
// arguments in the guest and softnic's, without device, GID index and
// server address, which the harness adds.
type interopRun struct {
	name    string
	guest   string   // e.g. "ib_write_bw -F -a -n 5"
	softnic []string // e.g. perf write_bw -a -n 5
	// capture, when set, names a pcap of the run's RoCEv2 frames, taken on
	// the bridge (see TestInteropWithRealTools).
	capture string
}

// guestArgs puts the device and GID index options after the tool's name.
func (r interopRun) guestArgs() string {
	tool, rest, _ := strings.Cut(r.guest, " ")
	gid := "-x 1"
	if tool == "ibv_rc_pingpong" {
		gid = "-g 1"
	}
	return strings.TrimSpace(tool + " -d rxe0 " + gid + " " + rest)
}

// perfRun is a perftest run: ib_<test> in the guest, softnic perf <test>
// here, with the same options.
func perfRun(name, test string, opts ...string) interopRun {
	return interopRun{name: name, guest: "ib_" + test + " -F " + strings.Join(opts, " "),
		softnic: append([]string{"perf", test}, opts...)}
}

func pingpongRun(size string) interopRun {
	// -c: rdma-core 44's data check (the client marks each page, the
	// server reports pages whose mark did not arrive).
	return interopRun{name: "pingpong-s" + size, guest: "ibv_rc_pingpong -c -n " + interopIters + " -s " + size,
		softnic: []string{"pingpong", "-c", "-n", interopIters, "-s", size}}
}

// interopScript runs the real tools in the rdma_rxe guest: first as
// clients of softnic's servers (toSoftnicServer), then as servers for
// softnic's clients (toSoftnicClient). A client retries while softnic's
// next server starts. A failed run is marked "!! FAILED" and the script
// goes on, as softnic's side does, so that one failure hides no other
// result. after, if set, runs after each tool (e.g. to print rxe's
// counters).
func interopScript(toSoftnicServer, toSoftnicClient []interopRun, after string) string {
	var b strings.Builder
	b.WriteString(`retry() {
	n=0
	while :; do
		out=$("$@" 2>&1) && { echo "$out"; return 0; }
		case "$out" in
		*"Couldn't connect to"*) ;;
		*) echo "$out"; echo "!! FAILED: $*"; return 1 ;;
		esac
		n=$((n+1))
		if [ $n -ge 40 ]; then echo "$out"; echo "!! FAILED: $*"; return 1; fi
		sleep 1
	done
}
`)
	for _, r := range toSoftnicServer {
		fmt.Fprintf(&b, "echo \"@@ %s as client\"\nretry %s 10.77.0.1\n%s", r.name, r.guestArgs(), after)
	}
	for _, r := range toSoftnicClient {
		fmt.Fprintf(&b, "echo \"@@ %s as server\"\n%s 2>&1 || echo \"!! FAILED: %s\"\n%s", r.name, r.guestArgs(), r.guestArgs(), after)
	}
	b.WriteString("echo \"@@ all done\"\n")
	return b.String()
}

// interopEnv is a bridge with one rdma_rxe guest on it and softnic's
// interface (veth, AF_XDP) in its own namespace.
type interopEnv struct {
	t       *testing.T
	ctx     context.Context
	bin     string // the softnic binary
	net     *rxeguest.Network
	gidx    string // softnic's GID index of 10.77.0.1
	guest   *rxeguest.Guest
	gcancel context.CancelFunc
	capDir  string // where captured pcaps go
	results []interopResult
	failed  bool
}

// interopResult is what one softnic run printed.
type interopResult struct {
	name string // run name + " server" or " client" (softnic's role)
	run  interopRun
	out  string
	err  error
	took time.Duration
}

func requireInteropHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, AF_XDP, tap devices and qemu (CI runs as root)")
	}
	for _, tool := range []string{"qemu-system-x86_64", "apt-get", "dpkg-deb", "ip", "tcpdump"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: run test/interop/install-deps.sh", tool)
		}
	}
	if testing.Short() {
		t.Skip("boots a qemu guest; skipped in -short mode")
	}
}

// startInterop builds softnic and the guest image, makes the network and
// boots the guest with script (netem, if set, on the guest's eth0).
func startInterop(t *testing.T, ctx context.Context, name, script, netem string, scriptTimeout time.Duration) *interopEnv {
	return startInteropQueues(t, ctx, name, script, netem, scriptTimeout, 1)
}

// startInteropQueues is startInterop with softnic's veth of the given
// number of queues.
func startInteropQueues(t *testing.T, ctx context.Context, name, script, netem string, scriptTimeout time.Duration, queues int) *interopEnv {
	img, err := rxeguest.Build(ctx, rxeguest.DefaultCacheDir())
	if err != nil {
		t.Fatalf("guest image: %v", err)
	}
	bin := buildSoftnic(t, ctx)
	n, err := rxeguest.NewNetwork(ctx, rxeguest.NetworkConfig{Name: fmt.Sprintf("%s%d", name, os.Getpid()%100000),
		Taps: 1, PeerAddr: netip.MustParsePrefix("10.77.0.1/24"), PeerQueues: queues})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	// Without IPv6 on the softnic side its GID table is just 10.77.0.1; a
	// link-local address that comes or goes would shift the indexes.
	if out, err := exec.CommandContext(ctx, "ip", "netns", "exec", n.PeerNS, "sh", "-c",
		"echo 1 > /proc/sys/net/ipv6/conf/"+n.PeerLink+"/disable_ipv6").CombinedOutput(); err != nil {
		t.Fatalf("disable IPv6 on %s: %v\n%s", n.PeerLink, err, out)
	}
	gidx, err := gidIndexIn(n.PeerNS, n.PeerLink, netip.MustParseAddr("10.77.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	gctx, gcancel := context.WithCancel(ctx)
	t.Cleanup(gcancel)
	guest, err := rxeguest.Start(gctx, img, rxeguest.Config{Name: name + "-peer", NetNS: n.BridgeNS, Tap: n.Taps[0],
		Addr: netip.MustParsePrefix("10.77.0.11/24"), Script: script, Netem: netem, ScriptTimeout: scriptTimeout,
		MemoryMiB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	// SOFTNIC_INTEROP_PCAP_DIR keeps the captures (for roce/testdata).
	capDir := os.Getenv("SOFTNIC_INTEROP_PCAP_DIR")
	if capDir == "" {
		capDir = t.TempDir()
	}
	return &interopEnv{t: t, ctx: ctx, bin: bin, net: n, gidx: fmt.Sprint(gidx), guest: guest, gcancel: gcancel, capDir: capDir}
}

// softnic runs softnic in its namespace with args; after timeout it gets
// SIGTERM (softnic perf then still prints --softnic-stats).
func (e *interopEnv) softnic(timeout time.Duration, args ...string) (string, error) {
	cmd := exec.CommandContext(e.ctx, "ip", append([]string{"netns", "exec", e.net.PeerNS, e.bin}, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	timer := time.AfterFunc(timeout, func() { cmd.Process.Signal(syscall.SIGTERM) })
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// step runs softnic's side of r, as server without host or as client of
// the guest. extra are added options.
func (e *interopEnv) step(r interopRun, client bool, timeout time.Duration, extra ...string) {
	args := append(append([]string(nil), r.softnic...), "-d", e.net.PeerLink)
	if r.softnic[0] == "pingpong" {
		args = append(args, "-g", e.gidx)
	} else {
		// The counters after each run tell how a failed one failed.
		args = append(args, "-x", e.gidx, "--softnic-stats")
	}
	args = append(args, extra...)
	role := " server"
	if client {
		role = " client"
		args = append(args, "--connect-wait=2m", "10.77.0.11")
	}
	var capture *rxeguest.Capture
	if r.capture != "" {
		var err error
		if capture, err = e.net.Capture(e.ctx, "br0", filepath.Join(e.capDir, r.capture), "udp port 4791"); err != nil {
			e.t.Errorf("capture %s: %v", r.capture, err)
		}
	}
	start := time.Now()
	out, err := e.softnic(timeout, args...)
	if capture != nil {
		if err := capture.Stop(); err != nil {
			e.t.Errorf("capture %s: %v", r.capture, err)
		}
	}
	e.results = append(e.results, interopResult{name: r.name + role, run: r, out: out, err: err, took: time.Since(start)})
	if err != nil {
		e.t.Errorf("softnic %s: %v\n%s", strings.Join(args, " "), err, out)
		e.failed = true
	}
}

// wait waits for the guest and returns its script's output split into the
// "@@ name as role" sections, keyed "name role" (the guest's role).
func (e *interopEnv) wait() (map[string]string, *rxeguest.Result) {
	t := e.t
	if e.failed {
		// Give the guest a minute to finish its side, then stop it.
		time.AfterFunc(time.Minute, e.gcancel)
	}
	res, err := e.guest.Wait()
	for _, r := range e.results {
		t.Logf("softnic %s (%v):\n%s", r.name, r.took.Round(10*time.Millisecond), r.out)
	}
	if err != nil {
		// The output so far still tells which runs passed.
		t.Errorf("guest: %v", err)
	}
	t.Logf("guest (status %d, %v):\n%s", res.ExitStatus, res.Duration.Round(time.Second), res.Output)
	if err == nil && res.ExitStatus != 0 {
		t.Fatalf("guest script failed (status %d); console tail:\n%s", res.ExitStatus, tailLines(res.Console, 40))
	}
	guestOut := map[string]string{}
	// perftest's clock calibration complains on stderr under TCG; the
	// message can land inside a result line of stdout.
	calib := regexp.MustCompile(`Correlation coefficient r\^2: [0-9.e+-]+ < 0\.9\n?`)
	for _, sec := range strings.Split(calib.ReplaceAllString(res.Output, "\n"), "@@ ")[1:] {
		name, body, _ := strings.Cut(sec, "\n")
		name = strings.Replace(strings.Replace(name, " as client", " client", 1), " as server", " server", 1)
		guestOut[name] = body
		if strings.Contains(body, "!! FAILED") {
			t.Errorf("the real tool failed in %s", name)
		}
	}
	return guestOut, res
}

// Result lines. perftest in the TCG guest sometimes fails to calibrate its
// clock; with -F it then reports inf or nan, which travel in the report
// exchange.
var (
	numRE  = `(?:[0-9.]+|-?inf|-?nan)`
	bwRE   = regexp.MustCompile(`(?m)^ \d+\s+\d+\s+` + numRE + `\s+` + numRE + `\s+` + numRE + `\s*$`)
	latRE  = regexp.MustCompile(`(?m)^ \d+\s+\d+(\s+` + numRE + `){7}\s*$`)
	latDur = regexp.MustCompile(`(?m)^ \d+ +[1-9]\d* +[0-9.]+ +[0-9.]+\s*$`)
	ppRE   = regexp.MustCompile(`(?m)^(\d+) bytes in [0-9.]+ seconds = ([0-9.]+) Mbit/sec$`)
)

// resultRE is the result line of the run.
func (r interopRun) resultRE() *regexp.Regexp {
	switch {
	case r.softnic[0] == "pingpong":
		return ppRE
	case strings.HasSuffix(r.softnic[1], "_bw"):
		return bwRE
	case slices.Contains(r.softnic, "-D"):
		return latDur
	}
	return latRE
}

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

	// Runs with the real tool as client (softnic serves), then as server.
	var toServer, toClient []interopRun
	for _, s := range interopPingpongSizes {
		toServer = append(toServer, pingpongRun(s))
		toClient = append(toClient, pingpongRun(s))
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

	e := startInterop(t, ctx, "snperf", interopScript(toServer, toClient, ""), "", 12*time.Minute)
	for _, r := range toServer {
		e.step(r, false, 3*time.Minute)
	}
	for _, r := range toClient {
		e.step(r, true, 3*time.Minute)
	}
	guestOut, _ := e.wait()
	results := e.results
	if want := len(toServer) + len(toClient) + 1; len(guestOut) != want {
		t.Errorf("guest output has %d sections, want %d", len(guestOut), want)
	}
	for _, r := range results {
		if r.name == "read_lat server" || r.name == "read_lat-a server" {
			continue // perftest's read_lat server prints no figures
		}
		if !r.run.resultRE().MatchString(r.out) {
			t.Errorf("softnic %s printed no result line", r.name)
		}
	}
	// Pingpong: both sides count 2 × iterations × size bytes.
	for _, s := range interopPingpongSizes {
		want := fmt.Sprint(2 * 50 * atoi(t, s))
		for name, out := range map[string]string{
			"softnic pingpong-s" + s + " server": resultOf(results, "pingpong-s"+s+" server"),
			"softnic pingpong-s" + s + " client": resultOf(results, "pingpong-s"+s+" client"),
			"guest pingpong-s" + s + " client":   guestOut["pingpong-s"+s+" client"],
			"guest pingpong-s" + s + " server":   guestOut["pingpong-s"+s+" server"]} {
			if m := ppRE.FindStringSubmatch(out); m == nil || m[1] != want {
				t.Errorf("%s: result %q, want %s bytes", name, m, want)
			}
			if strings.Contains(out, "invalid data in page") {
				t.Errorf("%s: the -c data check failed:\n%s", name, out)
			}
		}
	}
	// The server of write/read/atomic bw prints the client's figures, which
	// travel in the report exchange: each side must print the other's.
	for _, tt := range []string{"write_bw", "read_bw", "atomic_bw", "write_bw-q2", "atomic_bw-cas", "write_bw-D", "read", "write", "atomic-fadd"} {
		for _, pair := range [][2]string{{tt + " server", tt + " client"}, {tt + " client", tt + " server"}} {
			if resultOf(results, pair[0]) == "" {
				continue // run one way only
			}
			mine := bwRE.FindString(resultOf(results, pair[0]))
			// The guest ran the opposite role.
			theirs := bwRE.FindString(guestOut[pair[1]])
			if mine == "" || mine != theirs {
				t.Errorf("softnic %s printed %q, the real tool as %s %q", pair[0], mine, pair[1], theirs)
			}
		}
	}
	// Bidirectional: both sides print the sum of both reports, so the
	// same line.
	for _, pair := range [][2]string{{"write_bw-b server", "write_bw-b client"}, {"read_bw-b client", "read_bw-b server"},
		{"send_bw-b server", "send_bw-b client"}} {
		mine, theirs := bwRE.FindAllString(resultOf(results, pair[0]), -1), bwRE.FindAllString(guestOut[pair[1]], -1)
		if len(mine) != 1 || len(theirs) != 1 || mine[0] != theirs[0] {
			t.Errorf("bidirectional: softnic %s printed %q, the real tool %q", pair[0], mine, theirs)
		}
	}
	if m := bwRE.FindStringSubmatch(guestOut["write_bw-q2 client"]); m == nil || !strings.Contains(m[0], " 100 ") {
		t.Errorf("two-QP run: guest line %q, want 100 iterations (50 per QP)", m)
	}
	checkCaptures(t, e.capDir, append(toServer, toClient...))
	writeInteropTableTo(t, "SOFTNIC_INTEROP_TABLE", toServer, toClient, results, guestOut)
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
	e := startInterop(t, ctx, "snall", interopScript(toServer, toClient, ""), "", 15*time.Minute)
	for _, r := range toServer {
		e.step(r, false, 3*time.Minute)
	}
	for _, r := range toClient {
		e.step(r, true, 3*time.Minute)
	}
	guestOut, _ := e.wait()
	if want := len(toServer) + len(toClient) + 1; len(guestOut) != want {
		t.Errorf("guest output has %d sections, want %d", len(guestOut), want)
	}
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
				if len(lines) != 23 || !strings.HasPrefix(lines[22], " 8388608 ") {
					t.Errorf("%s: %d result lines, want 23 ending with 8388608 bytes", who, len(lines))
				}
			case tt == "read_lat":
				if len(lines) != 0 {
					t.Errorf("%s: %d result lines, want none (read_lat's server)", who, len(lines))
				}
			default:
				// The client's last report, from the exchange.
				var peer string
				if strings.HasPrefix(who, "softnic") {
					peer = guestOut[name+" client"]
				} else {
					peer = resultOf(results, name+" client")
				}
				c := re.FindAllString(peer, -1)
				if len(lines) != 1 || len(c) == 0 || lines[0] != c[len(c)-1] {
					t.Errorf("%s printed %q, the client's last line %q", who, lines, c)
				}
			}
		}
	}
}

func atoi(t *testing.T, s string) int {
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// gidIndexIn returns the index of addr in the GID table softnic builds for
// ifname in the named namespace, once that table holds no IPv6 address.
func gidIndexIn(nsName, ifname string, addr netip.Addr) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return 0, err
	}
	defer orig.Close()
	h, err := netns.GetFromName(nsName)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		return 0, err
	}
	defer netns.Set(orig)
	var gids []netip.Addr
	for try := 0; try < 50; try++ {
		if gids, err = xdplink.GIDTable(ifname); err != nil {
			return 0, err
		}
		v6 := false
		for _, a := range gids {
			v6 = v6 || !a.Unmap().Is4()
		}
		if !v6 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, a := range gids {
		if a.Unmap() == addr {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%v not in the GID table %v of %s", addr, gids, ifname)
}

func resultOf(results []interopResult, name string) string {
	for _, r := range results {
		if r.name == name {
			return r.out
		}
	}
	return ""
}

func tailLines(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
