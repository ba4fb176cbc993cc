package system

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/systest"
)

// TestProviderHostInterface builds the provider's side of the host
// interface into test programs that play the daemon themselves
// (testdata/provider_hostif.c, provider_hostif_cm.c), and runs them as
// user nobody when the test is root: the version they speak (hostif.h's
// SN_VERSION, which must be hostif.Version), what hello passes (the
// process's own /proc/PID/mem, read-write, then /proc/PID/maps, read-only,
// none of them kept), a hello refused with seq 0 and EAGAIN before or
// after the program sent its hello, errnos of commands, and the destroy
// commands of completion channels (op 43) and event channels (op 44). No
// daemon is needed.
func TestProviderHostInterface(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install gcc libibverbs-dev librdmacm-dev", "cc")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	provider := filepath.Join(systest.Root(t), "provider")
	src := func(names ...string) []string {
		var paths []string
		for _, n := range names {
			paths = append(paths, filepath.Join(provider, n))
		}
		return paths
	}
	programs := []struct {
		name    string
		sources []string
		checks  int
	}{
		{"provider_hostif", src("objects.c", "device.c", "qp.c", "datapath.c", "extended.c", "dm.c", "domain.c", "import.c", "tm.c", "flow.c", "rss.c",
			"xrc.c"), 18},
		{"provider_hostif_cm", src("rdmacm_event.c", "rdmacm_qp.c", "rdmacm_addr.c", "rdmacm_unsup.c", "rdmacm_mcast.c"), 8},
	}
	dir := systest.RootDir(t)
	for _, p := range programs {
		bin := filepath.Join(dir, p.name)
		args := append([]string{"-O1", "-g", "-std=gnu11", "-Wall", "-Wextra", "-Werror",
			"-I", provider, "-I", "testdata", "-o", bin, filepath.Join("testdata", p.name+".c")}, p.sources...)
		out, err := exec.CommandContext(ctx, "cc", append(args, "-libverbs", "-lpthread", "-ldl")...).CombinedOutput()
		require.NoError(t, err, "cc %s: %s", p.name, out)
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+dir)
		if os.Geteuid() == 0 {
			require.NoError(t, os.Chmod(dir, 0o777))
			cmd.SysProcAttr = systest.Credential(systest.Nobody)
		}
		prog := startCProgram(t, cmd)
		prog.waitFor(t, fmt.Sprintf("version %d", hostif.Version))
		prog.finish(t, p.checks)
	}
}

// TestProviderDestroysChannels runs testdata/channel_destroy.c through the
// provider and softnic's librdmacm, as user nobody: it makes and destroys
// 2,000 completion channels and 2,000 event channels, and the daemon must
// hold no more descriptors afterwards than before (fewer than 10 more; a
// daemon that kept one pipe end for each would hold 4,000 more). A channel
// with a CQ on it is EBUSY until the CQ goes.
func TestProviderDestroysChannels(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "channel_destroy", "-lrdmacm")
	fds := func() int {
		entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", w.daemons[0].Pid()))
		require.NoError(t, err)
		return len(entries)
	}
	p := startCProgram(t, w.command(ctx, w.a, prog))
	p.waitFor(t, "ready")
	before := fds()
	p.resume(t)
	p.waitFor(t, "done")
	after := fds()
	t.Logf("the daemon's descriptors: %d before, %d after", before, after)
	require.Less(t, after-before, 10, "descriptors the daemon kept for destroyed channels")
	p.resume(t)
	p.finish(t, 7)
	w.stop(t)
}
