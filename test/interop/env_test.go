package interop

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
	bin     string // the softnic binary
	net     *rxeguest.Network
	gidx    string // softnic's GID index of 10.77.0.1
	guest   *rxeguest.Guest
	gcancel context.CancelFunc
	capDir  string // where captured pcaps go
	results []interopResult
	failed  bool
}

// requireInteropHost skips the test where it cannot boot the guest: with
// -short, when not root, or without the host tools.
func requireInteropHost(t *testing.T) {
	netnstest.Integration(t)
	netnstest.RequireCommands(t, "test/interop/install-deps.sh", rxeguest.HostCommands...)
}

// startInterop builds softnic and the guest image, makes the network
// (softnic's veth of the given number of queues) and boots the guest with
// script (netem, if set, on the guest's eth0).
func startInterop(t *testing.T, ctx context.Context, name, script, netem string, scriptTimeout time.Duration, queues int) *interopEnv {
	img, err := rxeguest.Build(ctx, rxeguest.DefaultCacheDir())
	require.NoError(t, err, "guest image")
	bin := buildSoftnic(t, ctx)
	n, err := rxeguest.NewNetwork(ctx, rxeguest.NetworkConfig{Name: fmt.Sprintf("%s%d", name, os.Getpid()%100000),
		Taps: 1, PeerAddr: netip.MustParsePrefix("10.77.0.1/24"), PeerQueues: queues})
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	// Without IPv6 on the softnic side its GID table is just 10.77.0.1; a
	// link-local address that comes or goes would shift the indexes.
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", n.PeerNS, "sh", "-c",
		"echo 1 > /proc/sys/net/ipv6/conf/"+n.PeerLink+"/disable_ipv6").CombinedOutput()
	require.NoErrorf(t, err, "disable IPv6 on %s:\n%s", n.PeerLink, out)
	gidx, err := gidIndexIn(n.PeerNS, n.PeerLink, netip.MustParseAddr("10.77.0.1"))
	require.NoError(t, err)
	gctx, gcancel := context.WithCancel(ctx)
	t.Cleanup(gcancel)
	guest, err := rxeguest.Start(gctx, img, rxeguest.Config{Name: name + "-peer", NetNS: n.BridgeNS, Tap: n.Taps[0],
		Addr: netip.MustParsePrefix("10.77.0.11/24"), Script: script, Netem: netem, ScriptTimeout: scriptTimeout,
		MemoryMiB: 1024})
	require.NoError(t, err)
	// SOFTNIC_INTEROP_PCAP_DIR keeps the captures (for roce/testdata).
	capDir := os.Getenv("SOFTNIC_INTEROP_PCAP_DIR")
	if capDir == "" {
		capDir = t.TempDir()
	}
	return &interopEnv{t: t, ctx: ctx, bin: bin, net: n, gidx: fmt.Sprint(gidx), guest: guest, gcancel: gcancel, capDir: capDir}
}

// buildSoftnic builds the softnic binary the tests run in the namespace.
func buildSoftnic(t *testing.T, ctx context.Context) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "softnic")
	out, err := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin,
		"github.com/softnic/softnic/cmd/softnic").CombinedOutput()
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
