package system

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
)

// metricsPort is where end A's daemon serves its metrics, on loopback in
// A's namespace (fresh for the test, so nothing else listens there).
const metricsPort = "9464"

// recoveryCounters move only when packets are lost: go-back-N restarts,
// sequence NAKs received and sent, requests ahead of the expected PSN.
var recoveryCounters = []string{"completer_retry_err", "rcvd_seq_err", "tx_nak_seq", "out_of_seq_request"}

// TestCountersUnderLoss runs daemons on a veth path through a bridge and
// three perftest pairs (write_bw, send_bw, read_bw, as user nobody)
// through them, first on a clean path, then with nftables dropping 1% of
// UDP/4791 in the bridge. softnic stat (text and -j), softnic stat --qp
// and a /metrics scrape must show packets both ways, and the recovery
// counters zero on the clean path and moving under loss.
func TestCountersUnderLoss(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install nftables", "nft")
	v := newServedVethConfig(t, netnstest.Config{MTU: 1500, Bridged: true}, []string{"--metrics", "127.0.0.1:" + metricsPort})
	ends := []*netnstest.End{&v.p.A, &v.p.B}

	before := v.countersOf(t, ends)
	dropsBefore := v.ringDrops(before)
	// A retransmit timeout of 68 s (-u 24): on the clean path only a lost
	// frame, not a machine too loaded to answer within perftest's 67 ms,
	// could start a recovery.
	v.runPerfPairs(t, "clean", 18631, "-u", "24")
	clean := v.countersOf(t, ends)
	for i, e := range ends {
		for _, name := range []string{"sent_pkts", "rcvd_pkts"} {
			require.Greater(t, clean[i][name], before[i][name], "%s on %s: no movement on the clean path", name, e.Ifname)
		}
	}
	// send_bw's SENDs: B's client sends them, A's server receives them.
	require.Greater(t, clean[1]["rdma_sends"], before[1]["rdma_sends"], "rdma_sends on B")
	require.Greater(t, clean[0]["rdma_recvs"], before[0]["rdma_recvs"], "rdma_recvs on A")
	if drops := v.ringDrops(clean) - dropsBefore; drops == 0 {
		for i, e := range ends {
			for _, name := range recoveryCounters {
				require.Equal(t, before[i][name], clean[i][name], "%s on %s moved on a clean path", name, e.Ifname)
			}
		}
		scrapeA := scrapeIn(t, &v.p.A)
		for _, name := range recoveryCounters {
			require.Equal(t, float64(clean[0][name]), metricValue(t, scrapeA, name, v.p.A.Ifname), "%s in /metrics", name)
		}
		t.Logf("clean path: A sent %d and received %d packets, B %d and %d; no recovery counter moved",
			clean[0]["sent_pkts"]-before[0]["sent_pkts"], clean[0]["rcvd_pkts"]-before[0]["rcvd_pkts"],
			clean[1]["sent_pkts"]-before[1]["sent_pkts"], clean[1]["rcvd_pkts"]-before[1]["rcvd_pkts"])
	} else {
		t.Logf("the AF_XDP rings dropped %d frames on the clean path: recovery was due", drops)
	}

	dropRule(t, v.p.Middle, 1)
	running := v.runPerfPairs(t, "lossy", 18641)
	lossy := v.countersOf(t, ends)
	dropped := droppedByRule(t, v.p.Middle)
	require.Positive(t, dropped, "nftables dropped nothing")
	sum := func(cs []map[string]uint64, name string) uint64 { return cs[0][name] + cs[1][name] }
	for _, name := range recoveryCounters {
		require.Greater(t, sum(lossy, name), sum(clean, name), "%s did not move with %d frames dropped", name, dropped)
	}
	for i, e := range ends {
		for _, name := range []string{"sent_pkts", "rcvd_pkts"} {
			require.Greater(t, lossy[i][name], clean[i][name], "%s on %s under loss", name, e.Ifname)
		}
	}
	require.Positive(t, running.qpRetries, "softnic stat --qp: the write_bw client's QP did not count its retries:\n%s", running.qpStat)
	t.Logf("under loss: %d frames dropped; A: %v; B: %v", dropped, pick(lossy[0], recoveryCounters), pick(lossy[1], recoveryCounters))

	scrapeA := scrapeIn(t, &v.p.A)
	for _, name := range append([]string{"sent_pkts", "rcvd_pkts"}, recoveryCounters...) {
		got := metricValue(t, scrapeA, name, v.p.A.Ifname)
		require.GreaterOrEqual(t, got, float64(lossy[0][name]), "%s in /metrics against softnic stat", name)
		if name != "completer_retry_err" && name != "rcvd_seq_err" {
			require.Positive(t, got, "%s in /metrics", name)
		}
	}
	require.Regexp(t, `softnic_qps\{device="softnic_veth0",port="1"\} \d+`, scrapeA)
	t.Logf("softnic stat -d %s after the lossy run:\n%s", v.p.B.Ifname, v.lastStat)
	t.Logf("softnic stat --qp during it:\n%s", running.qpStat)
	for _, l := range strings.Split(scrapeA, "\n") {
		if strings.Contains(l, "completer_retry_err") || strings.Contains(l, "softnic_qp") {
			t.Log(l)
		}
	}
}

// perfRun is what runPerfPairs learned while the tools ran.
type perfRun struct {
	qpStat    string // softnic stat --qp of the write_bw client's QP, mid-run
	qpRetries uint64 // its completer_retry_err
}

// runPerfPairs runs write_bw, send_bw and read_bw at once, servers on A and
// clients on B, on ports from port on, with the flags extra; it reads the write_bw client's QP
// with softnic stat --qp while it runs, and requires every tool to pass.
func (v *servedVeth) runPerfPairs(t *testing.T, phase string, port int, extra ...string) perfRun {
	t.Helper()
	var tools []*runningTool
	var writer *runningTool
	for i, test := range []string{"write_bw", "send_bw", "read_bw"} {
		args := append([]string{"perf", test, "-n", "300", "-p", strconv.Itoa(port + i)}, extra...)
		s, c := v.startPair(t, phase+" "+test, &v.p.A, &v.p.B, "-x", args...)
		tools = append(tools, s, c)
		if test == "write_bw" {
			writer = c
		}
	}
	var run perfRun
	qpn := regexp.MustCompile(`local address: .*QPN (0x[0-9a-f]+)`)
	waitFor(t, 60*time.Second, func() bool { return qpn.MatchString(writer.out.String()) || writer.wait(0) },
		func() string { return "write_bw printed no QPN:\n" + writer.out.String() })
	if m := qpn.FindStringSubmatch(writer.out.String()); m != nil {
		n, err := strconv.ParseUint(m[1], 0, 32)
		require.NoError(t, err)
		for !writer.wait(0) {
			out, err := v.asNobody(&v.p.B, "stat", "-d", v.p.B.Ifname, "--qp", strconv.FormatUint(n, 10)).CombinedOutput()
			if err != nil {
				break // the QP is gone: the tool ended
			}
			run.qpStat = string(out)
			c := parseStatLine(t, run.qpStat)
			run.qpRetries = c["completer_retry_err"]
			require.Regexp(t, fmt.Sprintf(`^link softnic_%s/1 lqpn %d sent_pkts \d+ `, v.p.B.Ifname, n), run.qpStat)
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, r := range tools {
		require.True(t, r.wait(120*time.Second), "%s did not end:\n%s", r.name, r.out.String())
		require.NoError(t, r.err, "%s:\n%s\ndaemon A:\n%s\ndaemon B:\n%s", r.name, r.out.String(), v.logs[0].String(), v.logs[1].String())
		requireBWResult(t, r.name, r.out.String(), 65536, 300)
	}
	return run
}

// countersOf reads each end's device counters with softnic stat -d, as
// text and as JSON, which must agree on the counters that only traffic
// moves.
func (v *servedVeth) countersOf(t *testing.T, ends []*netnstest.End) []map[string]uint64 {
	t.Helper()
	var all []map[string]uint64
	for _, e := range ends {
		out, err := v.asNobody(e, "stat", "-d", e.Ifname).CombinedOutput()
		require.NoError(t, err, "softnic stat: %s", out)
		text := parseStatLine(t, string(out))
		v.lastStat = string(out)
		jout, err := v.asNobody(e, "stat", "-d", e.Ifname, "-j").CombinedOutput()
		require.NoError(t, err, "softnic stat -j: %s", jout)
		var js []map[string]any
		require.NoError(t, json.Unmarshal(jout, &js), "softnic stat -j: %s", jout)
		require.Len(t, js, 1)
		require.Equal(t, "softnic_"+e.Ifname, js[0]["ifname"])
		for _, name := range append([]string{"sent_pkts", "rcvd_pkts", "rdma_sends", "rdma_recvs"}, recoveryCounters...) {
			f, ok := js[0][name].(float64)
			require.True(t, ok, "softnic stat -j has no %s: %s", name, jout)
			require.Equal(t, text[name], uint64(f), "%s: text and JSON", name)
		}
		all = append(all, text)
	}
	return all
}

// ringDrops sums what the ends' AF_XDP rings and XDP program lost.
func (v *servedVeth) ringDrops(cs []map[string]uint64) uint64 {
	var n uint64
	for _, c := range cs {
		n += c["xsk_rx_dropped"] + c["xsk_rx_ring_full"] + c["xsk_rx_invalid_descs"] + c["xdp_pass_no_socket"]
	}
	return n
}

// parseStatLine reads one `link DEV/1 name value ...` line, whose names
// must be unique.
func parseStatLine(t *testing.T, out string) map[string]uint64 {
	t.Helper()
	f := strings.Fields(strings.TrimSpace(out))
	require.True(t, len(f) > 2 && f[0] == "link", "not a softnic stat line: %q", out)
	c := map[string]uint64{}
	for i := 2; i+1 < len(f); i += 2 {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		require.NoError(t, err, "%s in %q", f[i], out)
		_, dup := c[f[i]]
		require.False(t, dup, "counter %s twice in %q", f[i], out)
		c[f[i]] = n
	}
	return c
}

func pick(c map[string]uint64, names []string) map[string]uint64 {
	out := map[string]uint64{}
	for _, n := range names {
		out[n] = c[n]
	}
	return out
}

// dropRule makes the bridge in namespace ns drop pct% of the UDP/4791
// frames it forwards (100: all), counting them.
func dropRule(t *testing.T, ns string, pct int) {
	t.Helper()
	which := fmt.Sprintf("numgen random mod 100 < %d ", pct)
	if pct >= 100 {
		which = ""
	}
	for _, cmd := range []string{
		"add table bridge softnic_loss",
		"add chain bridge softnic_loss lossy { type filter hook forward priority 0 ; policy accept ; }",
		"add rule bridge softnic_loss lossy udp dport 4791 " + which + "counter drop",
	} {
		out, err := shellOut("ip", append([]string{"netns", "exec", ns, "nft"}, strings.Fields(cmd)...)...)
		require.NoError(t, err, "nft %s: %s", cmd, out)
	}
}

// droppedByRule returns how many frames dropRule's rule dropped.
func droppedByRule(t *testing.T, ns string) uint64 {
	t.Helper()
	out, err := shellOut("ip", "netns", "exec", ns, "nft", "list", "chain", "bridge", "softnic_loss", "lossy")
	require.NoError(t, err, "nft list: %s", out)
	m := regexp.MustCompile(`counter packets (\d+) bytes`).FindStringSubmatch(out)
	require.NotNil(t, m, "no counter in:\n%s", out)
	n, _ := strconv.ParseUint(m[1], 10, 64)
	return n
}

// scrapeIn fetches the metrics end's daemon serves on its namespace's
// loopback: the connection is made inside the namespace, the request and
// reply go over it from here.
func scrapeIn(t *testing.T, e *netnstest.End) string {
	t.Helper()
	var conn net.Conn
	require.NoError(t, e.Do(func() error {
		var err error
		conn, err = net.DialTimeout("tcp", "127.0.0.1:"+metricsPort, 10*time.Second)
		return err
	}))
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var b strings.Builder
	_, err = bufio.NewReader(resp.Body).WriteTo(&b)
	require.NoError(t, err)
	return b.String()
}

// metricValue returns softnic_NAME_total of the device on ifname.
func metricValue(t *testing.T, scrape, name, ifname string) float64 {
	t.Helper()
	re := regexp.MustCompile(fmt.Sprintf(`(?m)^softnic_%s_total\{device="softnic_%s",port="1"\} (\S+)$`, name, ifname))
	m := re.FindStringSubmatch(scrape)
	require.NotNil(t, m, "no %s for %s in the scrape", name, ifname)
	f, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return f
}

// shellOut runs a command and returns its combined output.
func shellOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
