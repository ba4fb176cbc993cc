package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/internal/netnstest"
)

// TestProviderHostInterface builds the provider's side of the host
// interface for each version it speaks (HOSTIF_VERSION 3 and 4) into test
// programs that play the daemon themselves (testdata/provider_hostif.c,
// provider_hostif_cm.c), and runs them as user nobody when the test is
// root: what hello passes (version 4: the process's own /proc/PID/mem,
// read-write, then /proc/PID/maps, read-only, none of them kept; version
// 3: nothing), a hello refused with seq 0 and EAGAIN before or after the
// program sent its hello, errnos of commands, and the destroy commands of
// completion channels (op 43) and event channels (op 44) in version 4,
// none in version 3. No daemon of version 4 is needed.
func TestProviderHostInterface(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install gcc libibverbs-dev librdmacm-dev", "cc")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	provider := filepath.Join("..", "..", "provider")
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
		checks  map[int]int // by version
	}{
		{"provider_hostif", src("objects.c", "device.c", "qp.c", "datapath.c", "extended.c"), map[int]int{3: 15, 4: 18}},
		{"provider_hostif_cm", src("rdmacm_event.c", "rdmacm_qp.c", "rdmacm_addr.c", "rdmacm_unsup.c"), map[int]int{3: 8, 4: 8}},
	}
	for _, version := range []int{3, 4} {
		t.Run(fmt.Sprintf("version %d", version), func(t *testing.T) {
			dir := worldDir(t)
			for _, p := range programs {
				bin := filepath.Join(dir, p.name)
				args := append([]string{"-O1", "-g", "-std=gnu11", "-Wall", "-Wextra", "-Werror",
					fmt.Sprintf("-DHOSTIF_VERSION=%d", version), "-I", provider, "-I", "testdata", "-o", bin,
					filepath.Join("testdata", p.name+".c")}, p.sources...)
				out, err := exec.CommandContext(ctx, "cc", append(args, "-libverbs", "-lpthread", "-ldl")...).CombinedOutput()
				require.NoError(t, err, "cc %s: %s", p.name, out)
				cmd := exec.CommandContext(ctx, bin)
				cmd.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+dir)
				if os.Geteuid() == 0 {
					require.NoError(t, os.Chmod(dir, 0o777))
					cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
				}
				prog := startCProgram(t, cmd)
				prog.waitFor(t, fmt.Sprintf("version %d", version))
				prog.finish(t, p.checks[version])
			}
		})
	}
}

// TestProviderDestroysChannels runs testdata/channel_destroy.c through the
// provider and softnic's librdmacm, as user nobody: it makes and destroys
// 2,000 completion channels and 2,000 event channels, and the daemon must
// hold no more descriptors afterwards than before (fewer than 10 more: in
// host interface 3, which cannot destroy a channel, it held one pipe end
// for each, 4,000). A channel with a CQ on it is EBUSY until the CQ goes.
// It needs a daemon of host interface 4 (destroy_comp_channel and
// cm_destroy_channel), and says so when the daemon here is older.
func TestProviderDestroysChannels(t *testing.T) {
	if hostif.Version < 4 {
		t.Skipf("not run: needs host interface 4's destroy_comp_channel and cm_destroy_channel (the daemon here is version %d)", hostif.Version)
	}
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "channel_destroy", "-lrdmacm")
	fds := func() int {
		entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", w.daemons[0].Process.Pid))
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
