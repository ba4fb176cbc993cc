package rxeguest

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
)

// requireGuestTools skips unless the test can build and boot guests.
func requireGuestTools(t *testing.T) {
	t.Helper()
	netnstest.Integration(t)
	netnstest.RequireCommands(t, "test/interop/install-deps.sh", HostCommands...)
}

func buildTestImage(t *testing.T, ctx context.Context) *Image {
	t.Helper()
	start := time.Now()
	img, err := Build(ctx, DefaultCacheDir())
	require.NoError(t, err)
	t.Logf("image %s (kernel %s) ready in %v", img.Dir, img.KernelVersion, time.Since(start).Round(time.Millisecond))
	return img
}

func testNetwork(t *testing.T, ctx context.Context, taps int) *Network {
	t.Helper()
	require.NoError(t, SweepNetworks("rxetest"))
	n, err := NewNetwork(ctx, NetworkConfig{
		Name:     fmt.Sprintf("rxetest%d", os.Getpid()),
		Taps:     taps,
		PeerAddr: netip.MustParsePrefix("10.77.0.1/24"),
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, n.Close())
		out, _ := exec.Command("ip", "netns", "list").Output()
		require.NotContains(t, string(out), n.BridgeNS, "namespace left behind")
	})
	return n
}

// bootOnNetwork boots one guest with cfg on a network of one tap, as
// 10.77.0.11, and returns its result.
func bootOnNetwork(t *testing.T, cfg Config) *Result {
	t.Helper()
	requireGuestTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	img := buildTestImage(t, ctx)
	n := testNetwork(t, ctx, 1)
	cfg.NetNS, cfg.Tap, cfg.Addr = n.BridgeNS, n.Taps[0], netip.MustParsePrefix("10.77.0.11/24")
	res, err := Boot(ctx, img, cfg)
	require.NoError(t, err)
	return res
}

// TestGuestBringsUpRxe boots one guest and checks that rxe0 is usable:
// listed by ibv_devices, port ACTIVE, the IPv4 GID at index 1, netem
// applied to all but the CM's MADs, softnic's side of the veth reachable, UCX's and libfabric's
// verbs transports on it (ucx_info, fi_info: their libraries and UCX's
// modules are in the image), and the script's exit status reported.
func TestGuestBringsUpRxe(t *testing.T) {
	res := bootOnNetwork(t, Config{
		Name:  "rxe-up",
		Netem: "delay 1ms",
		Script: "ibv_devices\nibv_devinfo -d rxe0 -v\nrdma link show\ntc qdisc show dev eth0\ntc filter show dev eth0\n" +
			"ping -c 1 -W 5 10.77.0.1 && echo PEER-REACHABLE\nucx_info -d\nfi_info -p verbs\nexit 42\n",
	})
	t.Logf("guest ran in %v; output:\n%s", res.Duration.Round(time.Millisecond), res.Output)
	require.Equal(t, 42, res.ExitStatus, "console:\n%s", res.Console)
	require.Regexp(t, regexp.MustCompile(`(?m)^\s+rxe0\s+[0-9a-f]{16}$`), res.Output, "ibv_devices lists rxe0")
	require.Regexp(t, `state:\s+PORT_ACTIVE`, res.Output)
	require.Regexp(t, `GID\[\s*1\]:\s+::ffff:10\.77\.0\.11, RoCE v2`, res.Output)
	require.Contains(t, res.Output, "link rxe0/1 state ACTIVE")
	require.Contains(t, res.Output, "PEER-REACHABLE", "the guest reaches the veth end in the peer namespace")
	require.Regexp(t, `qdisc netem 20: (dev eth0 )?parent 1:2 .*delay 1ms`, res.Output)
	require.Regexp(t, `(?s)flowid 1:1.*match 00000001/00ffffff at 32`, res.Output, "the CM's MADs skip netem")
	require.Regexp(t, `(?m)^#\s+Transport: rc_verbs\n#\s+Device: rxe0:1$`, res.Output, "ucx_info -d lists rc_verbs on rxe0")
	require.Regexp(t, `(?m)^#\s+Transport: ud_verbs\n#\s+Device: rxe0:1$`, res.Output, "ucx_info -d lists ud_verbs on rxe0")
	require.Regexp(t, `(?m)^\s+domain: rxe0\n(?:.*\n)*?\s+type: FI_EP_MSG$`, res.Output, "fi_info lists verbs' msg endpoint on rxe0")
}

// TestTrixieGuestBringsUpRxe boots a Debian 13 guest (Linux 6.12,
// rdma-core 56): rxe0 up with the IPv4 GID at index 1, and the rxe of a
// kernel with IBTA 1.5's ATOMIC_WRITE and FLUSH (ibv_devinfo's
// device_cap_flags_ex lists them).
func TestTrixieGuestBringsUpRxe(t *testing.T) {
	requireGuestTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	img, err := BuildRelease(ctx, DefaultCacheDir(), Trixie)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(img.KernelVersion, "6.12."), "kernel %s", img.KernelVersion)
	n := testNetwork(t, ctx, 1)
	res, err := Boot(ctx, img, Config{Name: "rxe-trixie", NetNS: n.BridgeNS, Tap: n.Taps[0], Addr: netip.MustParsePrefix("10.77.0.11/24"),
		Script: "ibv_devinfo -d rxe0 -v\nping -c 1 -W 5 10.77.0.1 && echo PEER-REACHABLE\nexit 42\n"})
	require.NoError(t, err)
	t.Logf("guest ran in %v; output:\n%s", res.Duration.Round(time.Millisecond), res.Output)
	require.Equal(t, 42, res.ExitStatus, "console:\n%s", res.Console)
	require.Regexp(t, `state:\s+PORT_ACTIVE`, res.Output)
	require.Regexp(t, `GID\[\s*1\]:\s+::ffff:10\.77\.0\.11, RoCE v2`, res.Output)
	require.Contains(t, res.Output, "PEER-REACHABLE")
	// ibv_devinfo of rdma-core 56 names neither flag: the kernel ABI's
	// IB_UVERBS_DEVICE_FLUSH_GLOBAL (bit 38) and _ATOMIC_WRITE (bit 40).
	m := regexp.MustCompile(`device_cap_flags_ex:\s+0x([0-9A-Fa-f]+)`).FindStringSubmatch(res.Output)
	require.NotNil(t, m, "device_cap_flags_ex")
	flags, err := strconv.ParseUint(m[1], 16, 64)
	require.NoError(t, err)
	require.NotZero(t, flags&(1<<40), "rxe of Linux 6.12 offers ATOMIC_WRITE")
	require.NotZero(t, flags&(1<<38), "and FLUSH to global visibility")
}

// TestGuestReportsSetupFailure checks that a broken guest
// setup is reported as such rather than as the script's result.
func TestGuestReportsSetupFailure(t *testing.T) {
	res := bootOnNetwork(t, Config{
		Name:   "bad-netem",
		Netem:  "no-such-netem-option",
		Script: "echo must not run\n",
	})
	require.Equal(t, SetupFailedStatus, res.ExitStatus)
	require.Contains(t, res.Output, "setup failed: netem")
	require.NotContains(t, res.Output, "must not run")
}

// TestTwoGuestsRCPingpong runs ibv_rc_pingpong between two guests on the
// bridge and checks that the capture on the bridge saw RoCEv2 frames.
func TestTwoGuestsRCPingpong(t *testing.T) {
	requireGuestTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	img := buildTestImage(t, ctx)
	n := testNetwork(t, ctx, 2)
	pcap := filepath.Join(t.TempDir(), "rc.pcap")
	capture, err := n.Capture(ctx, n.Bridge, pcap, "udp port 4791")
	require.NoError(t, err)

	server, err := Start(ctx, img, Config{
		Name: "server", NetNS: n.BridgeNS, Tap: n.Taps[0], Addr: netip.MustParsePrefix("10.77.0.11/24"),
		Script:        "ibv_rc_pingpong -d rxe0 -g 1 -s 1500 -n 3\n",
		ScriptTimeout: 3 * time.Minute,
	})
	require.NoError(t, err)
	// The client retries while the server's guest is still booting.
	client, err := Start(ctx, img, Config{
		Name: "client", NetNS: n.BridgeNS, Tap: n.Taps[1], Addr: netip.MustParsePrefix("10.77.0.12/24"),
		Script: `for i in $(seq 100); do
	if out=$(ibv_rc_pingpong -d rxe0 -g 1 -s 1500 -n 3 10.77.0.11 2>&1); then echo "$out"; exit 0; fi
	echo "$out" | grep -q "Couldn't connect" || { echo "$out"; exit 1; }
	sleep 0.3
done
exit 1
`,
		ScriptTimeout: 3 * time.Minute,
	})
	require.NoError(t, err)
	cres, cerr := client.Wait()
	sres, serr := server.Wait()
	require.NoError(t, capture.Stop())
	require.NoError(t, cerr)
	require.NoError(t, serr)
	t.Logf("client (%v):\n%s\nserver (%v):\n%s", cres.Duration.Round(time.Millisecond), cres.Output, sres.Duration.Round(time.Millisecond), sres.Output)
	require.Equal(t, 0, cres.ExitStatus)
	require.Equal(t, 0, sres.ExitStatus)
	require.Contains(t, sres.Output, "9000 bytes in", "3 round trips of 1500 bytes each way")
	require.Contains(t, sres.Output, "GID ::ffff:10.77.0.12")

	st, err := os.Stat(pcap)
	require.NoError(t, err)
	// 3 round trips of a 2-packet message plus ACKs: well over 24 bytes
	// of pcap header.
	require.Greater(t, st.Size(), int64(24+6*1000), "capture holds the RoCEv2 frames")
}

// TestGuestWatchdogStopsHungScript checks that ScriptTimeout ends a hung
// script with status 124 and a list of what each process waits on.
func TestGuestWatchdogStopsHungScript(t *testing.T) {
	requireGuestTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	img := buildTestImage(t, ctx)
	res, err := Boot(ctx, img, Config{
		Name:          "hung",
		Script:        "echo started\nsleep 600\necho must not finish\n",
		ScriptTimeout: 3 * time.Second,
	})
	require.NoError(t, err)
	require.Equal(t, 124, res.ExitStatus, "output:\n%s", res.Output)
	require.Contains(t, res.Output, "started")
	require.Contains(t, res.Output, "script timed out after 3s")
	require.Regexp(t, `(?m)^\d+ sleep \S+ sleep 600 $`, res.Output, "the hung process and its wait channel")
	require.NotContains(t, res.Output, "must not finish")
}
