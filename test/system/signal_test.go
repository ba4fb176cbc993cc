package system

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/systest"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
)

// TestSignalsDetach starts the softnic binary as a server waiting for a
// client, stops it with SIGINT or SIGTERM, and checks that it exits promptly
// and leaves no XDP program on the interface.
func TestSignalsDetach(t *testing.T) {
	netnstest.Integration(t) // also skips with -short, which this test's go build would slow
	bin := systest.Softnic(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	xdpAttached := func() bool {
		out, err := pair.A.Command("ip", "link", "show", "dev", pair.A.Ifname).CombinedOutput()
		require.NoError(t, err, string(out))
		return strings.Contains(string(out), "xdp")
	}
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		args []string
	}{
		{"pingpong SIGTERM", syscall.SIGTERM, []string{"pingpong", "-g", "1"}},
		{"pingpong SIGINT", syscall.SIGINT, []string{"pingpong", "-g", "1"}},
		{"perf write_bw SIGTERM", syscall.SIGTERM, []string{"perf", "write_bw", "-x", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"netns", "exec", pair.A.Namespace, bin}, tc.args...)
			args = append(args, "-d", pair.A.Ifname)
			cmd := exec.Command("ip", args...)
			var output syncbuf.Buffer
			cmd.Stdout, cmd.Stderr = &output, &output
			require.NoError(t, cmd.Start())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			deadline := time.Now().Add(10 * time.Second)
			for !xdpAttached() {
				select {
				case err := <-done:
					require.FailNowf(t, "softnic exited early", "%v\n%s", err, output.String())
				default:
				}
				require.True(t, time.Now().Before(deadline), "XDP program never attached:\n%s", output.String())
				time.Sleep(50 * time.Millisecond)
			}
			// ip netns exec execs the binary, so the signal reaches softnic itself.
			require.NoError(t, cmd.Process.Signal(tc.sig))
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				require.FailNowf(t, "softnic did not exit", "within 5 s of %v:\n%s", tc.sig, output.String())
			}
			assert.False(t, xdpAttached(), "XDP program left on %s after %v", pair.A.Ifname, tc.sig)
		})
	}
}
