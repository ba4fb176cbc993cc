package system

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/systest"
)

// TestOpenErrorMessagesOverVeth: as an ordinary user the daemon and a
// tool without a daemon are told they need root (and the tool about the
// daemon); a tool on an interface that is down is told to bring it up; with a daemon of another run directory on the interface, a
// tool and a second daemon are told another XDP program holds it and what
// to do.
func TestOpenErrorMessagesOverVeth(t *testing.T) {
	bin, p, _, _ := vethSoftnic(t)
	emptyRunDir := systest.RootDir(t)
	asNobody := func(args ...string) *exec.Cmd {
		argv := systest.AsUser(systest.Nobody, append([]string{bin}, args...)...)
		cmd := p.A.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+emptyRunDir)
		return cmd
	}
	out, err := asNobody("perf", "write_bw", "-d", p.A.Ifname).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "softnic perf: "+p.A.Ifname+": no softnic daemon serves it (no socket "+
		filepath.Join(emptyRunDir, "softnic_"+p.A.Ifname+".sock")+"), and opening it in this process needs root")
	assert.Contains(t, string(out), "start a daemon (sudo softnic daemon -d "+p.A.Ifname+") and run the tool as any user")

	out, err = asNobody("daemon", "-d", p.A.Ifname, "--run-dir", emptyRunDir).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "softnic daemon: lock file: open "+filepath.Join(emptyRunDir, "softnic_"+p.A.Ifname+".lock")+
		": permission denied (softnic daemon needs root: run it with sudo; --run-dir names another directory)")
	// A run directory of the user's own gets it as far as the XDP hook.
	ownRunDir := systest.RootDir(t)
	require.NoError(t, os.Chown(ownRunDir, 65534, 65534))
	out, err = asNobody("daemon", "-d", p.A.Ifname, "--run-dir", ownRunDir).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "softnic daemon: "+p.A.Ifname+": softnic daemon needs root to attach its XDP program")
	assert.Contains(t, string(out), "run it with sudo")

	// An interface that is down.
	require.NoError(t, p.B.Command("ip", "link", "set", "dev", p.B.Ifname, "down").Run())
	down := p.B.Command(bin, "pingpong", "-d", p.B.Ifname)
	down.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+emptyRunDir)
	out, err = down.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "interface is down: bring it up (ip link set dev "+p.B.Ifname+" up)")
	require.NoError(t, p.B.Command("ip", "link", "set", "dev", p.B.Ifname, "up").Run())

	// A daemon of another run directory holds the interface's XDP hook.
	systest.StartDaemon(t, bin, &p.A, systest.RootDir(t))
	tool := p.A.Command(bin, "pingpong", "-d", p.A.Ifname)
	tool.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+emptyRunDir)
	out, err = tool.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "softnic pingpong: "+p.A.Ifname+": ")
	assert.Contains(t, string(out), "attach XDP to \""+p.A.Ifname+"\": another XDP program is already attached to the interface (program id ")
	assert.Contains(t, string(out), "if it is another softnic tool's, wait for it to end, or run both through a daemon")

	out, err = exec.Command("ip", "netns", "exec", p.A.Namespace, bin, "daemon", "-d", p.A.Ifname, "--run-dir", emptyRunDir).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "another XDP program is already attached to the interface")
	assert.Contains(t, string(out), "stop the program that attached it first")
}
