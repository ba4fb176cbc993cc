package system

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/systest"

	"github.com/softnic/softnic/internal/netnstest"
)

// routedPath is a sender and a receiver namespace joined through a router
// namespace that marks every RoCEv2 packet to the receiver CE (nftables
// `ip ecn set ce`), as a congested switch would: the kernel rewrites the
// TOS and the IP checksum of frames softnic built, on the real path.
type routedPath struct {
	prefix string
}

func (r *routedPath) ns(n string) string { return r.prefix + n }

func newRoutedPath(t *testing.T) *routedPath {
	t.Helper()
	r := &routedPath{prefix: fmt.Sprintf("snt%d-cc", os.Getpid())}
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		require.NoError(t, err, "%v: %s", args, out)
	}
	t.Cleanup(func() {
		for _, n := range []string{"s", "r", "d"} {
			exec.Command("ip", "netns", "del", r.ns(n)).Run()
		}
	})
	for _, n := range []string{"s", "r", "d"} {
		run("ip", "netns", "add", r.ns(n))
		run("ip", "-n", r.ns(n), "link", "set", "lo", "up")
	}
	run("ip", "link", "add", "s0", "netns", r.ns("s"), "type", "veth", "peer", "name", "r1", "netns", r.ns("r"))
	run("ip", "link", "add", "d0", "netns", r.ns("d"), "type", "veth", "peer", "name", "r2", "netns", r.ns("r"))
	for _, a := range [][3]string{{"s", "s0", "10.62.1.2/24"}, {"r", "r1", "10.62.1.1/24"}, {"r", "r2", "10.62.2.1/24"}, {"d", "d0", "10.62.2.2/24"}} {
		run("ip", "-n", r.ns(a[0]), "link", "set", a[1], "up")
		run("ip", "-n", r.ns(a[0]), "addr", "add", a[2], "dev", a[1])
	}
	run("ip", "-n", r.ns("s"), "route", "add", "default", "via", "10.62.1.1")
	run("ip", "-n", r.ns("d"), "route", "add", "default", "via", "10.62.2.1")
	run("ip", "netns", "exec", r.ns("r"), "sysctl", "-qw", "net.ipv4.ip_forward=1")
	nft := exec.Command("ip", "netns", "exec", r.ns("r"), "nft", "-f", "-")
	nft.Stdin = strings.NewReader(`table ip congested {
	chain congest {
		type filter hook forward priority 0; policy accept;
		ip daddr 10.62.2.2 udp dport 4791 ip ecn set ce
	}
}
`)
	out, err := nft.CombinedOutput()
	require.NoError(t, err, "nft: %s", out)
	return r
}

// perf runs softnic perf write_bw between the sender and the receiver,
// the sender with extra flags, and returns both outputs (--softnic-stats).
func (r *routedPath) perf(t *testing.T, bin string, extra ...string) (server, client string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"perf", "write_bw", "-s", "65536", "-n", "300", "--softnic-stats"}
	var sout []byte
	var serr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", r.ns("d"), bin}, append(args, "-d", "d0")...)...)
		cmd.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+t.TempDir())
		sout, serr = cmd.CombinedOutput()
	}()
	cargs := append(append(append([]string{"netns", "exec", r.ns("s"), bin}, args...), "-d", "s0", "--connect-wait=20s"), extra...)
	cmd := exec.CommandContext(ctx, "ip", append(cargs, "10.62.2.2")...)
	cmd.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+t.TempDir())
	cout, cerr := cmd.CombinedOutput()
	wg.Wait()
	require.True(t, serr == nil && cerr == nil, "server %v:\n%s\nclient %v:\n%s", serr, sout, cerr, cout)
	return string(sout), string(cout)
}

// TestCongestionOverRoutedVeth sends WRITEs through a router that marks
// them all CE: the receiver counts the marks and answers with CNPs, which
// the sender's reaction point handles; with the reaction point off the
// same CNPs are counted as ignored. The sender's capture holds the CNPs
// as softnic inspect and tshark decode them. Only these facts are
// checked: the rates (bench/results/dcqcn.md) depend on the machine.
func TestCongestionOverRoutedVeth(t *testing.T) {
	netnstest.Integration(t)
	netnstest.RequireCommands(t, "apt-get install nftables tshark", "nft", "tshark")
	bin := systest.Softnic(t)
	r := newRoutedPath(t)

	capture := filepath.Join(t.TempDir(), "sender.pcap")
	server, client := r.perf(t, bin, "--pcap", capture)
	requireCNPsDecoded(t, bin, capture)
	assert.NotZero(t, statValueOf(t, server, "NPECNMarked"), "the receiver saw CE marks")
	assert.NotZero(t, statValueOf(t, server, "NPCNPSent"), "the receiver sent CNPs")
	assert.Zero(t, statValueOf(t, client, "NPECNMarked"), "nothing marks the ACKs")
	assert.NotZero(t, statValueOf(t, client, "RPCNPHandled"), "the sender handled CNPs")
	assert.Zero(t, statValueOf(t, client, "RPCNPIgnored"))

	server, client = r.perf(t, bin, "--softnic-rp-off")
	assert.NotZero(t, statValueOf(t, server, "NPCNPSent"))
	assert.Zero(t, statValueOf(t, client, "RPCNPHandled"), "reaction point off")
	assert.NotZero(t, statValueOf(t, client, "RPCNPIgnored"))
}

// requireCNPsDecoded reads the sender's capture with softnic inspect
// (every ICRC checked) and tshark: both must find the receiver's CNPs,
// as many in one as in the other: BTH opcode 0x81 with P_Key 0xFFFF, and
// BECN set as inspect shows it (tshark 4.0's dissector has no BECN field).
func requireCNPsDecoded(t *testing.T, bin, file string) {
	t.Helper()
	out, err := exec.Command(bin, "inspect", file).CombinedOutput()
	require.NoError(t, err, "softnic inspect:\n%s", tail(string(out)))
	text := string(out)
	require.Regexp(t, `\d+ frames: \d+ RoCEv2 \(\d+ good, 0 bad\), 0 other`, text)
	cnps := len(regexp.MustCompile(`(?m)^\s*\d+ 10\.62\.2\.2:\d+ > 10\.62\.1\.2 CNP qp=\S+ psn=\d+ BECN payload=16 icrc=\S+ ok$`).FindAllString(text, -1))
	require.Positive(t, cnps, "CNPs in softnic inspect's reading:\n%s", tail(text))

	tshark := exec.Command("tshark", "-r", file, "-d", "udp.port==4791,infiniband", "-Y", "infiniband.bth.opcode == 129",
		"-T", "fields", "-e", "ip.src", "-e", "infiniband.bth.p_key")
	var stderr strings.Builder
	tshark.Stderr = &stderr
	tout, err := tshark.Output()
	require.NoError(t, err, "tshark:\n%s", stderr.String())
	lines := strings.Split(strings.TrimSpace(string(tout)), "\n")
	require.Len(t, lines, cnps, "tshark's CNPs")
	for _, l := range lines {
		require.Regexp(t, `^10\.62\.2\.2\s+65535$`, l, "a CNP from the receiver, P_Key 0xFFFF")
	}
}

// statValueOf returns the counter --softnic-stats printed as "Name value".
func statValueOf(t *testing.T, out, name string) uint64 {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == name {
			var v uint64
			_, err := fmt.Sscan(f[1], &v)
			require.NoError(t, err, line)
			return v
		}
	}
	require.Failf(t, "counter missing", "%s not in:\n%s", name, out)
	return 0
}
