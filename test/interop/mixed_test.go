package interop

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/test/interop/rxeguest"
)

// The mixed case: softnic inside one guest (virtio-net, XDP, AF_XDP)
// against rdma_rxe in the other, as users running softnic in a virtual
// machine would meet rxe peers.

const (
	mixedSoftnicIP = "10.77.0.11"
	mixedRxeIP     = "10.77.0.12"
)

// mixedRuns are the runs, each both ways: perftest's write_bw and
// ibv_rc_pingpong -c.
func mixedRuns() []interopRun {
	return []interopRun{perfRun("write_bw", "write_bw", "-n", interopIters), pingpongRun("4096")}
}

// mixedStep is one run of r with softnic as server or client, on its own
// exchange port so that a late client never meets another run's server.
type mixedStep struct {
	run           interopRun
	softnicServes bool
	port          int
}

func mixedSteps() []mixedStep {
	var steps []mixedStep
	for _, serves := range []bool{true, false} {
		for _, r := range mixedRuns() {
			steps = append(steps, mixedStep{run: r, softnicServes: serves, port: 18700 + len(steps)})
		}
	}
	return steps
}

// mixedScripts are the softnic guest's script and the rxe guest's. The
// softnic guest removes rxe0 first, so that only softnic handles UDP 4791
// there. Clients retry until their server listens.
func mixedScripts(steps []mixedStep) (softnicGuest, rxeGuest string) {
	var sn, rx strings.Builder
	sn.WriteString("rdma link delete rxe0 || echo '!! FAILED: rdma link delete rxe0'\n")
	rx.WriteString("PEER=" + mixedSoftnicIP + "\n" + retryShell)
	for _, st := range steps {
		snRole, rxRole := "server", "client"
		if !st.softnicServes {
			snRole, rxRole = "client", "server"
		}
		args := append(append([]string(nil), st.run.softnic...), "-d", "eth0", "-p", fmt.Sprint(st.port))
		if st.run.softnic[0] == "pingpong" {
			args = append(args, "-g", "1")
		} else {
			args = append(args, "-x", "1", "--softnic-stats")
		}
		if !st.softnicServes {
			args = append(args, "--connect-wait=60s", mixedRxeIP)
		}
		fmt.Fprintf(&sn, "echo '@@ %s as %s'\ntimeout -s TERM 90 softnic %s 2>&1 || echo '!! FAILED'\n", st.run.name, snRole, strings.Join(args, " "))
		tool := st.run.guestArgs() + " -p " + fmt.Sprint(st.port)
		if st.softnicServes {
			fmt.Fprintf(&rx, "echo '@@ %s as %s'\nretry %s %s\n", st.run.name, rxRole, tool, mixedSoftnicIP)
		} else {
			fmt.Fprintf(&rx, "echo '@@ %s as %s'\ntimeout -s TERM 90 %s 2>&1 || echo '!! FAILED'\n", st.run.name, rxRole, tool)
		}
	}
	sn.WriteString("echo '@@ all done'\n")
	rx.WriteString("echo '@@ all done'\n")
	return sn.String(), rx.String()
}

// TestInteropMixedGuests boots two guests once: softnic (a static build)
// in one, on its virtio-net eth0, and rdma_rxe in the other. It runs
// write_bw (perftest's protocol) and ibv_rc_pingpong -c with softnic as
// server and then as client, and checks both sides' result lines as
// TestInteropWithRealTools does.
func TestInteropMixedGuests(t *testing.T) {
	requireInteropHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	img, err := rxeguest.Build(ctx, rxeguest.DefaultCacheDir())
	require.NoError(t, err, "guest image")
	bin := buildStaticSoftnic(t, ctx)
	require.NoError(t, rxeguest.SweepNetworks("snmix"))
	n, err := rxeguest.NewNetwork(ctx, rxeguest.NetworkConfig{Name: fmt.Sprintf("snmix%d", os.Getpid()%100000), Taps: 2})
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })

	steps := mixedSteps()
	snScript, rxScript := mixedScripts(steps)
	start := time.Now()
	boot := func(name string, tap int, addr, script string, files map[string][]byte) *rxeguest.Guest {
		g, err := rxeguest.Start(ctx, img, rxeguest.Config{Name: name, NetNS: n.BridgeNS, Tap: n.Taps[tap],
			Addr: netip.MustParsePrefix(addr + "/24"), Script: script, ScriptTimeout: 4 * time.Minute,
			MemoryMiB: 1024, Programs: files})
		require.NoError(t, err)
		return g
	}
	snGuest := boot("mixsoftnic", 0, mixedSoftnicIP, snScript, map[string][]byte{"/usr/bin/softnic": bin})
	rxGuest := boot("mixrxe", 1, mixedRxeIP, rxScript, nil)
	rxRes, rxErr := rxGuest.Wait()
	snRes, snErr := snGuest.Wait()
	t.Logf("both guests done in %v", time.Since(start).Round(time.Second))
	for _, g := range []struct {
		who string
		res *rxeguest.Result
		err error
	}{{"softnic guest", snRes, snErr}, {"rxe guest", rxRes, rxErr}} {
		require.NoErrorf(t, g.err, "%s", g.who)
		t.Logf("%s (status %d, %v):\n%s", g.who, g.res.ExitStatus, g.res.Duration.Round(time.Second), g.res.Output)
		require.Zerof(t, g.res.ExitStatus, "%s: script failed; console tail:\n%s", g.who, tailLines(g.res.Console, 40))
	}
	snOut, rxOut := guestSections(t, snRes.Output), guestSections(t, rxRes.Output)
	var results []interopResult
	for _, st := range steps {
		role := " client"
		if st.softnicServes {
			role = " server"
		}
		out, ok := snOut[st.run.name+role]
		require.Truef(t, ok, "the softnic guest ran no %s%s", st.run.name, role)
		results = append(results, interopResult{name: st.run.name + role, run: st.run, out: out})
		assert.Regexpf(t, st.run.resultRE(), out, "softnic %s%s printed no result line", st.run.name, role)
	}
	require.Contains(t, snOut, "all done", "the softnic guest finished its script")
	require.Contains(t, rxOut, "all done", "the rxe guest finished its script")
	checkSameReport(t, results, rxOut, "write_bw")
	checkPingpongs(t, results, rxOut, "pingpong-s", []string{"4096"})
}

// buildStaticSoftnic builds softnic without cgo: the guest's libraries are
// Debian 12's, and a static binary needs none of them.
func buildStaticSoftnic(t *testing.T, ctx context.Context) []byte {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "softnic")
	cmd := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin,
		"github.com/softnic/softnic/cmd/softnic")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoErrorf(t, err, "go build:\n%s", out)
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	return data
}
