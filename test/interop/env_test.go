package interop

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netns"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/roce/xdplink"
	"github.com/softnic/softnic/test/interop/rxeguest"
)

// interopEnv is a bridge with one rdma_rxe guest on it and softnic's
// interface (veth, AF_XDP) in its own namespace.
type interopEnv struct {
	t       *testing.T
	ctx     context.Context
	name    string
	plan    interopPlan
	img     *rxeguest.Image
	bin     string // the softnic binary
	net     *rxeguest.Network
	gidx    string // softnic's GID index of 10.77.0.1
	guest   *rxeguest.Guest
	gcancel context.CancelFunc
	capDir  string // where captured pcaps go
	results []interopResult
	failed  bool
	// reboots counts the guests whose NIC stalled and that were replaced
	// (rebootIfStalled); earlier holds what their tools printed.
	reboots int
	earlier map[string]string
	// runDir, when set, is the tools' $SOFTNIC_RUN_DIR, where a daemon
	// serves softnic's interface; they then run as user nobody
	// (daemon_test.go).
	runDir string
	// ipcLock gives the tools CAP_IPC_LOCK, as RDMA hosts give their
	// programs (middleware_test.go): perf -a and UCX register more than
	// RLIMIT_MEMLOCK's 8 MiB.
	ipcLock bool
}

// interopPlan is what the guest runs: the real tools as clients of
// softnic's servers (toServer), then as servers of its clients (toClient).
type interopPlan struct {
	toServer, toClient []interopRun
	after              string        // shell after each tool (see interopScript)
	netem              string        // on the guest's eth0, if set
	scriptTimeout      time.Duration // for the guest's whole script
	queues             int           // of softnic's veth
}

// requireInteropHost skips the test where it cannot boot the guest: with
// -short, when not root, or without the host tools.
func requireInteropHost(t *testing.T) {
	netnstest.Integration(t)
	netnstest.RequireCommands(t, "test/interop/install-deps.sh", rxeguest.HostCommands...)
}

// startInterop builds softnic and the guest image, makes the network
// (softnic's veth of plan.queues queues) and boots the guest with plan's
// script.
func startInterop(t *testing.T, ctx context.Context, name string, plan interopPlan) *interopEnv {
	e := prepareInterop(t, ctx, name, plan, rxeguest.Release{})
	e.boot(plan.toServer, plan.toClient)
	return e
}

// prepareInterop is startInterop up to the guest's boot, with an image
// of release r.
func prepareInterop(t *testing.T, ctx context.Context, name string, plan interopPlan, r rxeguest.Release) *interopEnv {
	img, err := rxeguest.BuildRelease(ctx, rxeguest.DefaultCacheDir(), r)
	require.NoError(t, err, "guest image")
	bin := buildSoftnic(t, ctx)
	n, err := rxeguest.NewNetwork(ctx, rxeguest.NetworkConfig{Name: fmt.Sprintf("%s%d", name, os.Getpid()%100000),
		Taps: 1, PeerAddr: netip.MustParsePrefix("10.77.0.1/24"), PeerQueues: plan.queues})
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	// Without IPv6 on the softnic side its GID table is just 10.77.0.1; a
	// link-local address that comes or goes would shift the indexes.
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", n.PeerNS, "sh", "-c",
		"echo 1 > /proc/sys/net/ipv6/conf/"+n.PeerLink+"/disable_ipv6").CombinedOutput()
	require.NoErrorf(t, err, "disable IPv6 on %s:\n%s", n.PeerLink, out)
	gidx, err := gidIndexIn(n.PeerNS, n.PeerLink, netip.MustParseAddr("10.77.0.1"))
	require.NoError(t, err)
	// SOFTNIC_INTEROP_PCAP_DIR keeps the captures (for roce/testdata).
	capDir := os.Getenv("SOFTNIC_INTEROP_PCAP_DIR")
	if capDir == "" {
		capDir = t.TempDir()
	}
	return &interopEnv{t: t, ctx: ctx, name: name, plan: plan, img: img, bin: bin, net: n, gidx: fmt.Sprint(gidx), capDir: capDir}
}

// boot starts a guest that runs the real tools of toServer and toClient.
func (e *interopEnv) boot(toServer, toClient []interopRun) {
	gctx, gcancel := context.WithCancel(e.ctx)
	e.t.Cleanup(gcancel)
	guest, err := rxeguest.Start(gctx, e.img, rxeguest.Config{Name: e.name + "-peer", NetNS: e.net.BridgeNS, Tap: e.net.Taps[0],
		Addr: netip.MustParsePrefix("10.77.0.11/24"), Script: interopScript(toServer, toClient, e.plan.after),
		Netem: e.plan.netem, ScriptTimeout: e.plan.scriptTimeout, MemoryMiB: 1024, WatchTX: true})
	require.NoError(e.t, err)
	e.guest, e.gcancel = guest, gcancel
}

// maxReboots is how many stalled guests a test replaces. On some hosts
// the stalls come several to a test, each in a fresh guest, and every
// replacement costs only time.
const maxReboots = 8

// rebootIfStalled replaces the guest by a fresh one if the guest reported
// its NIC stalled, up to maxReboots times per test: that fault is qemu's
// and the guest's (see rxeguest.Guest.NICStalled), and every run after it
// would fail. The fresh guest runs steps[i:], and before them the steps
// already done whose guest side failed on the stalled guest (its tool may
// have hung on the stall while softnic's side ended well), which go back
// into steps at i. It reports whether it replaced the guest; the stalled
// guest's output and console go to the log.
func (e *interopEnv) rebootIfStalled(steps *[]runStep, i int) bool {
	if e.reboots == maxReboots {
		return false
	}
	stall := e.guest.NICStalled()
	if stall == "" {
		return false
	}
	e.reboots++
	e.gcancel()
	res, err := e.guest.Wait()
	e.t.Logf("the stalled guest (%v):\n%s\nconsole tail:\n%s", err, res.Output, tailLines(res.Console, 60))
	sections := splitSections(res.Output)
	var again int
	*steps, again = stepsAfterStall(*steps, i, sections)
	rest := (*steps)[i:]
	if e.earlier == nil {
		e.earlier = map[string]string{}
	}
	maps.Copy(e.earlier, sections)
	var toServer, toClient []interopRun
	for _, s := range rest {
		delete(e.earlier, s.guestKey())
		if s.client {
			toClient = append(toClient, s.r)
		} else {
			toServer = append(toServer, s.r)
		}
	}
	e.t.Logf("the guest's NIC stalled (%q): booting a fresh guest for the %d runs left, %d of them run again",
		stall, len(rest), again)
	e.boot(toServer, toClient)
	return true
}

// stepsAfterStall returns steps with the runs before i whose guest side
// failed in the stalled guest's output sections put back at i, and how
// many it put back. Those come from the guest's first list (softnic as
// server) whenever steps[i:] still holds any of it, so the order of the
// fresh guest's script stays that of runAll.
func stepsAfterStall(steps []runStep, i int, sections map[string]string) ([]runStep, int) {
	var again []runStep
	for _, s := range steps[:i] {
		if strings.Contains(sections[s.guestKey()], "!! FAILED") {
			again = append(again, s)
		}
	}
	return append(append(steps[:i:i], again...), steps[i:]...), len(again)
}

// buildSoftnic builds the softnic binary the tests run in the namespace,
// without cgo as make build does (softnic daemon drops its privileges on
// every thread, which a cgo binary cannot).
func buildSoftnic(t *testing.T, ctx context.Context) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "softnic")
	cmd := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin,
		"github.com/softnic/softnic/cmd/softnic")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoErrorf(t, err, "go build:\n%s", out)
	return bin
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
