package system

import (
	"fmt"
	"regexp"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/systest"
)

// TestDaemonStartupLogSaysHowItRuns: the daemon's "serving" line names the
// XDP mode, the AF_XDP bind mode, the queues, the engines and the MTU, so
// that a user can see a slow generic or copy-mode attachment. A veth gives
// copy mode only (it has no zero-copy AF_XDP); its XDP is native on recent
// kernels, generic otherwise, so either is accepted there.
func TestDaemonStartupLogSaysHowItRuns(t *testing.T) {
	bin := systest.Softnic(t)
	pair := netnstest.NewT(t, netnstest.Config{MTU: 9000, Queues: 2})
	d := systest.StartDaemon(t, bin, &pair.A, systest.RootDir(t))
	engines := min(2, runtime.NumCPU())
	want := regexp.MustCompile(fmt.Sprintf(
		`msg=serving device=%s interface=%s .*xdp=(native|generic) bind=copy queues=2 engines=%d mtu=9000 frame_chunks=3 driver="xdp-features [a-z,-]+, xdp-zc-max-segs [0-9]+"`,
		d.Name, pair.A.Ifname, engines))
	require.Regexp(t, want, d.Log.String())
}
