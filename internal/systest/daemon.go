package systest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/softnic/softnic/roce"
)

// Daemon is one `softnic daemon` on a veth end, watched: its exit is
// collected as soon as it happens, so tests call its methods rather than
// Cmd's Wait.
type Daemon struct {
	End    *netnstest.End
	Name   string // its device's name
	RunDir string
	Sock   string // its socket
	Cmd    *exec.Cmd
	Log    *syncbuf.Buffer // its standard output and error
	done   chan struct{}
	err    error
}

// StartDaemon runs bin as `softnic daemon -d IFACE --run-dir runDir` (and
// the flags args) in end's namespace and returns once it serves. The
// test's end stops it (see Stop) and, if the test failed, logs what it
// said.
func StartDaemon(t testing.TB, bin string, end *netnstest.End, runDir string, args ...string) *Daemon {
	t.Helper()
	return StartNamedDaemon(t, bin, end, runDir, "", args...)
}

// StartNamedDaemon is StartDaemon with the device named name (-d
// IFACE:NAME); "" names it softnic_IFACE.
func StartNamedDaemon(t testing.TB, bin string, end *netnstest.End, runDir, name string, args ...string) *Daemon {
	t.Helper()
	d := LaunchDaemon(t, bin, end, end.Ifname, runDir, name, args...)
	d.AwaitLog(t, "serving", 20*time.Second)
	return d
}

// LaunchDaemon is StartNamedDaemon on interface ifname of end's namespace
// (which need not exist yet, nor be up), returning once it runs, not once
// it serves.
func LaunchDaemon(t testing.TB, bin string, end *netnstest.End, ifname, runDir, name string, args ...string) *Daemon {
	t.Helper()
	spec := ifname
	if name != "" {
		spec += ":" + name
	} else {
		name = "softnic_" + ifname
	}
	d := &Daemon{End: end, Name: name, RunDir: runDir, Sock: filepath.Join(runDir, name+".sock"), Log: &syncbuf.Buffer{},
		done: make(chan struct{})}
	argv := append([]string{"netns", "exec", end.Namespace, bin, "daemon", "-d", spec, "--run-dir", runDir}, args...)
	d.Cmd = exec.Command("ip", argv...)
	d.Cmd.Stdout, d.Cmd.Stderr = d.Log, d.Log
	if err := d.Cmd.Start(); err != nil {
		t.Fatalf("start the daemon on %s: %v", ifname, err)
	}
	go func() { d.err = d.Cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		d.Stop()
		d.removeDeviceFile()
		if t.Failed() {
			t.Logf("daemon on %s (exit %v) said:\n%s", ifname, d.err, Tail(d.Log.String(), 40))
		}
	})
	return d
}

// AwaitLog waits until the daemon's log holds text, for at most timeout
// (a deadline for a daemon that never says it, not a measure); the test
// fails if the daemon exits first or the deadline passes.
func (d *Daemon) AwaitLog(t testing.TB, text string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !strings.Contains(d.Log.String(), text); time.Sleep(20 * time.Millisecond) {
		if d.Exited() {
			t.Fatalf("the daemon on %s exited before it said %q: %v\n%s", d.End.Ifname, text, d.err, d.Log.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon on %s did not say %q within %v:\n%s", d.End.Ifname, text, timeout, d.Log.String())
		}
	}
}

// Pid is the daemon's process ID (ip netns exec execs softnic: softnic's).
func (d *Daemon) Pid() int { return d.Cmd.Process.Pid }

// Exited reports whether the daemon's process is gone.
func (d *Daemon) Exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// Wait waits for the daemon to exit and returns how it did.
func (d *Daemon) Wait() error {
	<-d.done
	return d.err
}

// Signal sends the daemon sig.
func (d *Daemon) Signal(sig os.Signal) error { return d.Cmd.Process.Signal(sig) }

// Kill ends the daemon with SIGKILL and waits for it.
func (d *Daemon) Kill() error {
	err := d.Cmd.Process.Kill()
	<-d.done
	return err
}

// Stop ends the daemon with SIGTERM, so that it takes away what it
// published, and with SIGKILL if it has not stopped within 10 s; it
// returns how the daemon exited. A daemon that exited already is left as
// it is.
func (d *Daemon) Stop() error {
	if !d.Exited() {
		d.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			d.Cmd.Process.Kill()
			<-d.done
		}
	}
	return d.err
}

// removeDeviceFile takes away the device file a crashed or killed daemon
// left in the host's /dev/infiniband (a link to /dev/null).
func (d *Daemon) removeDeviceFile() {
	cdev := DeviceFile(d.RunDir, d.Name)
	if target, err := os.Readlink(cdev); err == nil && target == "/dev/null" {
		os.Remove(cdev)
	}
}

// AwaitGID waits until the daemon's GID table holds the end's IPv4
// address (as a root session sees it), for at most 20 s.
func (d *Daemon) AwaitGID(t testing.TB) {
	t.Helper()
	want := roce.GIDFromAddr(d.End.Addr4())
	for deadline := time.Now().Add(20 * time.Second); !d.hasGID(want); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon on %s never had %v in its GID table", d.End.Ifname, d.End.Addr4())
		}
	}
}

func (d *Daemon) hasGID(want ibv.GID) bool {
	c, err := session.Dial(d.Sock)
	if err != nil {
		return false
	}
	defer c.Close()
	port, err := c.QueryPort()
	if err != nil {
		return false
	}
	for i := 0; i < int(port.GIDTableLen); i++ {
		if g, err := c.QueryGID(i); err == nil && g == want {
			return true
		}
	}
	return false
}

// Tail returns the last n lines of s, saying how many came before.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[%d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
