package system

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/softnic/softnic/internal/systest"
)

// TestDeviceMemoryPingpong runs Debian's ibv_rc_pingpong -j (its buffer
// in device memory: ibv_alloc_dm, ibv_reg_dm_mr, ibv_memcpy_to_dm and
// from_dm) between two daemons in two namespaces, as user nobody with no
// capability (runuser, as any local user runs it), both sides checking
// every buffer they receive (-c), so the bytes went from one DM through
// the wire into the other.
func TestDeviceMemoryPingpong(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install ibverbs-utils util-linux", "ibv_rc_pingpong", "runuser", "ss")
	w := systest.NewWorld(t, systest.Config{Provider: true})
	a, b := &w.Pair.A, &w.Pair.B
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pingpong := []string{"ibv_rc_pingpong", "-g", "1", "-n", "200", "-j", "-c"}
	command := func(end *netnstest.End, argv ...string) *exec.Cmd {
		args := append([]string{"netns", "exec", end.Namespace, "runuser", "-u", "nobody", "--",
			w.Bin, "exec", "--run-dir", w.RunDir, "-d", end.Ifname, "--"}, argv...)
		cmd := exec.CommandContext(ctx, "ip", args...)
		cmd.WaitDelay = 5 * time.Second
		return cmd
	}
	srv := command(a, pingpong...)
	var sout syncbuf.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	require.NoError(t, srv.Start())
	listening := func() bool {
		out, _ := a.Command("ss", "-Hltn", fmt.Sprintf("sport = :%d", 18515)).Output()
		return strings.TrimSpace(string(out)) != ""
	}
	if !assert.Eventually(t, listening, 30*time.Second, 20*time.Millisecond, "the server never listened") {
		srv.Process.Kill()
		srv.Wait()
		t.Fatalf("server output:\n%s", sout.String())
	}
	cout, cerr := command(b, append(pingpong, a.Addr4().String())...).CombinedOutput()
	serr := srv.Wait()
	require.True(t, serr == nil && cerr == nil, "server %v:\n%s\nclient %v:\n%s", serr, sout.String(), cerr, cout)
	for _, out := range []string{sout.String(), string(cout)} {
		assert.Contains(t, out, "200 iters in", "a side did not finish")
	}
}

// TestDMAndParentDomainsThroughProvider runs testdata/dm_domains.c
// through the provider as user nobody: ibv_alloc_dm's, the copies' and
// ibv_reg_dm_mr's refusals as mlx5's, a thread domain and a parent domain
// and the holds they keep, an extended CQ of the parent domain, and an
// RDMA WRITE from a QP of the parent domain into a zero-based region over
// device memory, checked with ibv_memcpy_from_dm.
func TestDMAndParentDomainsThroughProvider(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "dm_domains")
	startCProgram(t, w.command(ctx, w.a, prog)).finish(t, 25)
	w.stop(t)
}
