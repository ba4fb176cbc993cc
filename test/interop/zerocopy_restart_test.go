package interop

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/test/interop/rxeguest"
)

// TestZeroCopyDaemonRestarts starts and stops softnic's daemon three
// times in a guest whose virtio-net binds zero-copy (two queue pairs, one
// vCPU: native XDP turns the second on for XDP_TX while a program is
// attached). Each start must bind zero-copy, each stop exit 0, and the
// guest kernel must not complain: a daemon that detached its program
// before the kernel released its sockets' pools left virtio-net unable to
// unbind them ("Failed to disable zero-copy!", then "Missing unregister"
// at the next bind), and a later run on that queue crashed the guest.
func TestZeroCopyDaemonRestarts(t *testing.T) {
	requireInteropHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	img, err := rxeguest.BuildRelease(ctx, rxeguest.DefaultCacheDir(), rxeguest.TrixieBackportsKernel)
	require.NoError(t, err, "guest image")
	bin := buildStaticSoftnic(t, ctx)
	require.NoError(t, rxeguest.SweepNetworks("snzr"))
	n, err := rxeguest.NewNetwork(ctx, rxeguest.NetworkConfig{Name: fmt.Sprintf("snzr%d", os.Getpid()%100000),
		Taps: 1, TapQueues: zcQueues})
	require.NoError(t, err)
	defer n.Close()
	script := "rdma link delete rxe0\nmkdir -p /run/softnic\n" +
		"for i in 1 2 3; do\n" +
		"softnic daemon -d eth0 --xdp-bind zerocopy >/tmp/d.log 2>&1 & p=$!\n" +
		"n=0; while ! grep -q -e msg=serving -e level=ERROR /tmp/d.log && kill -0 $p 2>/dev/null && [ $n -lt 300 ]; do sleep 0.2; n=$((n+1)); done\n" +
		"echo \"start $i $(grep -o 'bind=[a-z-]*' /tmp/d.log)\"\n" +
		"kill -TERM $p; wait $p; echo \"stop $i exit $?\"\n" +
		"done\n" +
		"echo '@@ kernel'\ndmesg | grep -E -i 'zero-copy|unregister|xsk|virtio_net' ; dmesg | grep -E 'WARNING:|BUG:|Oops'\necho '@@ end'\n"
	g, err := rxeguest.Start(ctx, img, rxeguest.Config{Name: "zcrestart", NetNS: n.BridgeNS, Tap: n.Taps[0],
		Addr: netip.MustParsePrefix(mixedSoftnicIP + "/24"), Script: script, ScriptTimeout: 5 * time.Minute,
		MemoryMiB: 1024, Queues: zcQueues, AccessPlatform: true, Programs: map[string][]byte{"/usr/bin/softnic": bin}})
	require.NoError(t, err)
	res, err := g.Wait()
	require.NoError(t, err)
	t.Logf("guest (status %d, %v):\n%s", res.ExitStatus, res.Duration.Round(time.Second), res.Output)
	require.Zero(t, res.ExitStatus, "console:\n%s", res.Console)
	for i := 1; i <= 3; i++ {
		assert.Regexp(t, fmt.Sprintf(`(?m)^start %d bind=zero-copy$`, i), res.Output)
		assert.Regexp(t, fmt.Sprintf(`(?m)^stop %d exit 0$`, i), res.Output)
	}
	kernel := regexp.MustCompile(`(?s)@@ kernel\n(.*)@@ end`).FindStringSubmatch(res.Output)
	require.NotNil(t, kernel, "the script's kernel section")
	assert.NotRegexp(t, `(?i:failed to disable zero-copy|missing unregister)|WARNING:|BUG:|Oops`, kernel[1], "the guest kernel's messages")
}
