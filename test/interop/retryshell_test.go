package interop

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
)

// runRetryShell runs script after retryShell with sh on this host: the
// guest's shell functions on stand-in tools, with short timeouts and the
// console report in a file. It returns what the script printed and what
// it reported on the console.
func runRetryShell(t *testing.T, peer, script string, wrap ...string) (out, console string) {
	t.Helper()
	kmsg := filepath.Join(t.TempDir(), "kmsg")
	argv := append(wrap, "sh", "-c", "PEER="+peer+"\n"+retryShell+"toolTimeout=1 serverGrace=1 pingWait=1\n"+script)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "KMSG="+kmsg)
	b, _ := cmd.CombinedOutput()
	k, _ := os.ReadFile(kmsg)
	return string(b), string(k)
}

// A hung tool fails its run after its timeout and the script goes on; a
// peer that still answers ping is no stalled NIC.
func TestRetryShellBoundsHungTools(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install iputils-ping", "ping", "timeout")
	out, console := runRetryShell(t, "127.0.0.1", "retry sleep 5\necho next\nserved sleep 5\necho done\n")
	require.Contains(t, out, "!! TIMED OUT after 1 s\n!! FAILED: sleep 5\nnext\n")
	require.Contains(t, out, "!! TIMED OUT after 2 s\n!! FAILED: sleep 5\ndone\n")
	require.NotContains(t, out, "!! NETWORK")
	require.Empty(t, console)

	out, _ = runRetryShell(t, "127.0.0.1", "retry echo fine\nserved echo fine too\n")
	require.Equal(t, "fine\nfine too\n", out)
}

// After a timeout, a peer that does not answer ping is reported on the
// console, where the harness looks for a stalled NIC
// (rxeguest.Guest.NICStalled).
func TestRetryShellReportsUnreachablePeer(t *testing.T) {
	netnstest.Integration(t)
	netnstest.RequireCommands(t, "apt-get install iputils-ping util-linux", "ping", "timeout", "unshare")
	// In a network namespace of its own the script reaches nobody.
	out, console := runRetryShell(t, "10.77.0.1", "retry sleep 5\n", "unshare", "-n")
	require.Contains(t, out, "!! NETWORK: 10.77.0.1 does not answer ping\n!! FAILED: sleep 5\n")
	require.Equal(t, "<3>rxeguest: eth0 cannot reach 10.77.0.1\n", console)
}
